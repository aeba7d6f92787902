"""A small world for console pages: alice's session with a few executed runs.

Alice is an admin of "Research", carol a plain member of it, bob lives in another space.
"""

from __future__ import annotations

import pytest
from django.test import Client

from context_app.services.agents import agent_create, agent_publish
from sessions_app.services.runs import session_create
from tests.factories import make_connection


@pytest.fixture
def version(space, alice):
    connection = make_connection(space, name="Local demo", context_window=200_000)
    agent = agent_create(
        user=alice,
        space=space,
        name="Helper",
        system_prompt="You help.",
        model_connection=connection.pk,
        tools=["echo", "fail"],
        sub_agents=[
            {
                "name": "researcher",
                "description": "Looks things up.",
                "system_prompt": "Research.",
                "tools": ["echo"],
            }
        ],
    )
    return agent_publish(user=alice, agent=agent)


@pytest.fixture
def session(version, alice):
    return session_create(user=alice, agent_version=version, title="Alice's chat")


@pytest.fixture
def client_for():
    """Return a factory of test clients logged in as a given user (or anonymous for None)."""

    def factory(user=None) -> Client:
        client = Client()
        if user is not None:
            client.force_login(user)
        return client

    return factory
