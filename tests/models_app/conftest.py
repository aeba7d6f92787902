"""A small world for model-connection tests: alice administers a space where carol is a member,
bob administers another space, and a provider double answers on 127.0.0.1."""

from __future__ import annotations

import pytest

from tests.api.factories import client_for

# Recognisable in any body or log line it leaks into.
SECRET_KEY = "sk-test-9f8e7d6c5b4a39281706"


@pytest.fixture
def private_hosts(settings):
    """Allow model endpoints on loopback, where the provider double listens."""
    settings.ALLOW_PRIVATE_MODEL_HOSTS = True


@pytest.fixture
def api(alice, space):
    """An API client authenticated as alice (admin of `space`)."""
    return client_for(alice)


@pytest.fixture
def member_api(carol):
    return client_for(carol)


@pytest.fixture
def bob_api(bob, other_space):
    return client_for(bob)


@pytest.fixture
def anon(db):
    return client_for(None)
