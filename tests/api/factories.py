"""Rows for API tests, made through the services wherever a service owns the write."""

from __future__ import annotations

from django.utils import timezone
from rest_framework.test import APIClient

from tests.factories import make_connection


def client_for(user=None) -> APIClient:
    """Return an API client that sends `user`'s token (anonymous when `user` is None)."""
    from agentloom.spaces.services.tokens import token_create

    client = APIClient()
    if user is not None:
        _, key = token_create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def make_agent(space, admin, **fields):
    """Create a draft through `agent_create` with a local demo connection."""
    from context_app.services.agents import agent_create

    if "model_connection" not in fields:
        fields["model_connection"] = make_connection(space)
    fields.setdefault("name", "helper")
    fields.setdefault("system_prompt", "You are helpful.")
    return agent_create(user=admin, space=space, **fields)


def publish(agent, admin):
    from context_app.services.agents import agent_publish

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


def compacted_frame(*, budget=(4_000, 500, 100)) -> dict:
    """Return a real main-instance checkpoint frame with one successful and one failed compaction.

    Built with the engine's own context manager, so the frame has the shape runs really save.
    """
    from agentloom.engine import (
        ContextBinding,
        ContextPolicy,
        JournalContextManager,
        ModelBudget,
        ModelResponse,
    )

    manager = JournalContextManager(ContextBinding(ContextPolicy(), ModelBudget(*budget)))
    manager.create(
        instance="main", system_prompt="You are helpful.", task="Question", run_number=1, attempt=1
    )

    def grow(label: str) -> None:
        for step in range(8):
            manager.add_assistant({"role": "assistant", "content": f"{label}{step} " + "w " * 150})
            manager.add_feedback(f"Go on {step} " + "m " * 80)

    def summary(text: str):
        return lambda request: ModelResponse(message={"role": "assistant", "content": text})

    grow("a")
    assert manager.prepare("action", call_model=summary("Summary NONCE-1.")).compaction.succeeded
    grow("b")
    assert not manager.prepare("action", call_model=summary("")).compaction.succeeded
    return manager.frame.to_dict()
