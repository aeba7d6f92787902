"""A small world for API tests: one space with an admin, a second admin and a member, another
space with its own admin, a published agent, and a session of alice's with one queued run.
"""

from __future__ import annotations

import pytest

from tests.api.factories import ask, client_for, make_agent, open_session, publish
from tests.factories import make_user


@pytest.fixture
def erin(db):
    """A second admin of alice's space."""
    return make_user("erin")


@pytest.fixture
def space(space, erin):
    """The shared "Research" space (tests/conftest.py), with erin as a second admin."""
    from agentloom.spaces.models import Membership

    Membership.objects.create(space=space, user=erin, role=Membership.Role.ADMIN)
    return space


@pytest.fixture
def agent(space, alice):
    return make_agent(space, alice)


@pytest.fixture
def version(agent, alice):
    return publish(agent, alice)


@pytest.fixture
def session(version, alice):
    return open_session(version, alice)


@pytest.fixture
def run(session, alice):
    return ask(session, alice)


@pytest.fixture
def api(alice):
    """An API client authenticated as alice."""
    return client_for(alice)


@pytest.fixture
def anon(db):
    return client_for(None)
