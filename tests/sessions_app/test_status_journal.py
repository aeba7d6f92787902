"""Journaling a run's status: a queued question first, each status once.

That every user action is durable is tested in `tests/foundation/test_user_actions.py`.
"""

from __future__ import annotations

from django.db import transaction

from sessions_app.models import SessionMessage
from sessions_app.services.journal import status_journal
from tests.factories import make_run


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
