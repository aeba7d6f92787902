"""Rows for API tests, made through the services wherever a service owns the write."""

from __future__ import annotations

from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.factories import make_connection


def client_for(user=None) -> APIClient:
    """Return an API client that sends `user`'s token (anonymous when `user` is None)."""
    client = APIClient()
    if user is not None:
        token, _ = Token.objects.get_or_create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def make_agent(space, admin, **fields):
    """Create a draft through `agent_create` with a local demo connection."""
    from context_app.services import agent_create

    if "model_connection" not in fields:
        fields["model_connection"] = make_connection(space)
    fields.setdefault("name", "helper")
    fields.setdefault("system_prompt", "You are helpful.")
    return agent_create(user=admin, space=space, **fields)


def publish(agent, admin):
    from context_app.services import agent_publish

    return agent_publish(user=admin, agent=agent)


def open_session(version, user):
    from sessions_app.services.runs import session_create

    return session_create(user=user, agent_version=version)


def ask(session, user, question="What is 2+2?"):
    from sessions_app.services.runs import run_ask

    return run_ask(user=user, session=session, question=question)


def finish(run, status, **fields):
    """Put `run` in a terminal `status` as a worker would leave it."""
    from sessions_app.models import Run

    Run.objects.filter(pk=run.pk).update(
        status=status, finished_at=timezone.now(), lease_expires_at=None, **fields
    )
    run.refresh_from_db()
    return run
