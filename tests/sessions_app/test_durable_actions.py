"""Durable actions: each top-level service is one outermost transaction, never a savepoint."""

from __future__ import annotations

import pytest
from django.db import transaction

from context_app.services import agent_publish
from models_app.models import ModelConnection
from models_app.services import connection_create, connection_delete, connection_update
from sessions_app.models import SessionMessage
from sessions_app.services.deletion import session_delete
from sessions_app.services.journal import status_journal
from sessions_app.services.runs import (
    run_ask,
    run_cancel,
    run_resume,
    supplement_add,
)
from tests.factories import make_run

ACTIONS = {
    "run_ask": lambda s, run: run_ask(user=s.created_by, session=s, question="Why?"),
    "run_resume": lambda s, run: run_resume(user=s.created_by, run=run),
    "run_cancel": lambda s, run: run_cancel(user=s.created_by, run=run),
    "supplement_add": lambda s, run: supplement_add(user=s.created_by, run=run, text="more"),
    "session_delete": lambda s, run: session_delete(user=s.created_by, session=s),
    "agent_publish": lambda s, run: agent_publish(user=s.created_by, agent=s.agent),
    "connection_create": lambda s, run: connection_create(
        user=s.created_by,
        space=s.space,
        name="another",
        provider=ModelConnection.Provider.LOCAL,
        model_id="local-demo",
        context_window=8_192,
        max_output_tokens=512,
    ),
    "connection_update": lambda s, run: connection_update(
        user=s.created_by, connection=s.agent_version.model_connection, name="renamed"
    ),
    "connection_delete": lambda s, run: connection_delete(
        user=s.created_by, connection=s.agent_version.model_connection
    ),
}


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_an_action_refuses_to_run_inside_another_transaction(make_demo_session, name):
    session = make_demo_session()
    run = make_run(session)
    with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
        ACTIONS[name](session, run)


def test_status_journal_journals_a_queued_question_first_and_only_once(make_demo_session):
    session = make_demo_session()
    run = make_run(session, question="What is NONCE-Q?")
    with transaction.atomic():
        status_journal(run, status="cancelled", error="")
        status_journal(run, status="cancelled", error="")
    rows = list(SessionMessage.objects.filter(run=run).order_by("seq"))
    assert [(row.kind, row.entry_key) for row in rows] == [
        ("user_input", "user_input"),
        ("status", "status:1"),
    ]
    assert rows[0].message == {"role": "user", "content": "What is NONCE-Q?"}
    assert rows[1].message == {"status": "cancelled", "error": None}
