"""The journal's record store against the one contract of record stores."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.utils.dateparse import parse_datetime

from sessions_app.selectors.checkpoints import JournalStore
from sessions_app.services.journal import append_records
from tests.factories import (
    make_agent,
    make_connection,
    make_run,
    make_session,
    make_space,
    make_user,
    make_version,
)
from tests.support.record_store_contract import RecordStoreContract

pytestmark = pytest.mark.django_db


class JournalCase:
    """The contract's journal: rows go into the session journal, each run a `Run` row."""

    def __init__(self) -> None:
        user = make_user()
        space = make_space(admin=user)
        agent = make_agent(space, user, connection=make_connection(space))
        self.session = make_session(make_version(agent), user)
        self.runs = {}

    def _run(self, number):
        if number not in self.runs:
            self.runs[number] = make_run(self.session, number=number, status="succeeded")
        return self.runs[number]

    def write(self, run, rows):
        run = self._run(run)
        entries = [
            (instance, r.kind, r.entry_key, r.message, parse_datetime(r.at), r.seq)
            for instance, r in rows
        ]
        with transaction.atomic():
            added = append_records(run_id=run.pk, session_id=self.session.pk, records=entries)
        return [row.seq for row in added]

    def store(self, run):
        return JournalStore(self._run(run))


class TestJournalStore(RecordStoreContract):
    @pytest.fixture
    def journal(self):
        return JournalCase()
