"""What a new question reads of the session's runs: never every run, once the session is known
to have none from before the journal.

The active-run check and the lease sweep find runs by status through the (status, session)
index, never by reading the row of every run of the session (on SQLite, wide rows with
checkpoints). SQLite's planner is checked: it serves no query whose statuses are parameters
from the constraint's partial index, and an ORDER BY can turn it to the (session, number)
index. The look for runs never journaled reads every finished run of the session (on
PostgreSQL 15 ms at 3,000 runs), so a session is looked at once (`Session.runs_journaled`).

The records a view refers to are searched within their seq range, so PostgreSQL never scans
the session's whole journal for them, however stale its statistics."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import Max
from django.utils import timezone

from sessions_app.models import Run, Session, SessionMessage
from sessions_app.selectors.journal import journal_messages
from sessions_app.services.runs import run_ask, sweep_expired_leases
from tests.factories import ask

pytestmark = pytest.mark.django_db

TABLE = Run._meta.db_table
# The look for runs with no journal row (`adopt_unjournaled_runs`).
_UNJOURNALED = 'NOT (EXISTS(SELECT %s AS "a" FROM "sessions_app_sessionmessage"'


class _Reads:
    """Captures the statements as sent: SQL and parameters apart, as the planner sees them."""

    def __init__(self):
        self.statements = []

    def __call__(self, execute, sql, params, many, context):
        self.statements.append((sql, params))
        return execute(sql, params, many, context)

    def plans(self) -> list[tuple[str, str]]:
        """Return (sql, plan) of each read of the run table that filters by status."""
        plans = []
        for sql, params in self.statements:
            if not sql.startswith("SELECT") or f'FROM "{TABLE}"' not in sql:
                continue
            if '"status" IN' not in sql:
                continue
            with connection.cursor() as cursor:
                cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
                plan = " / ".join(row[-1] for row in cursor.fetchall())
            plans.append((sql, plan))
        return plans


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's planner")
def test_a_questions_checks_and_the_sweep_find_runs_by_status(alice, gateway, make_demo_session):
    session = make_demo_session()
    for n in range(3):
        ask(session, alice, f"question {n}")
    # A session from before `runs_journaled`: its next question looks for unjournaled runs once.
    Session.objects.filter(pk=session.pk).update(runs_journaled=False)
    session.refresh_from_db()
    reads = _Reads()
    with connection.execute_wrapper(reads):
        run_ask(user=alice, session=session, question="one more")
        sweep_expired_leases()
    plans = reads.plans()
    # The active run, expired leases of the session, runs never journaled, and the beat's sweep.
    assert len(plans) == 4, plans
    assert any(_UNJOURNALED in sql for sql, _ in plans)
    for sql, plan in plans:
        # Each run of the session is found through the index, its row read only when it is one.
        assert f"{TABLE} USING" in plan and "run_status_session" in plan, (sql, plan)


def test_a_session_is_looked_at_once_for_runs_never_journaled(alice, gateway, make_demo_session):
    session = make_demo_session()
    assert session.runs_journaled  # opened now: nothing to look for
    ask(session, alice, "first")
    Session.objects.filter(pk=session.pk).update(runs_journaled=False)
    for question, looked in (("second", True), ("third", False)):
        session = Session.objects.get(pk=session.pk)
        reads = _Reads()
        with connection.execute_wrapper(reads):
            ask(session, alice, question)
        assert any(_UNJOURNALED in sql for sql, _ in reads.statements) is looked, question
        assert Session.objects.get(pk=session.pk).runs_journaled


def _index_conditions(node: dict) -> list[str]:
    """Return the index conditions of every scan in a JSON plan, and one `Seq Scan` mark each
    sequential scan."""
    found = [node["Index Cond"]] if "Index Cond" in node else []
    if node.get("Node Type") == "Seq Scan":
        found.append("Seq Scan")
    for child in node.get("Plans", []):
        found += _index_conditions(child)
    return found


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's planner")
def test_a_views_records_are_searched_within_their_range_whatever_the_statistics(
    alice, gateway, make_demo_session
):
    # A journal of 3,000 records that no ANALYZE has seen, as after an import or a fork before
    # autovacuum's next pass (the test database is never analyzed).
    session = make_demo_session()
    run = ask(session, alice, "first")
    last = SessionMessage.objects.filter(session=session).aggregate(Max("seq"))["seq__max"]
    now = timezone.now()
    SessionMessage.objects.bulk_create(
        SessionMessage(
            session=session,
            run=run,
            seq=last + n,
            kind=SessionMessage.Kind.USER_INPUT,
            entry_key=f"bulk-{n}",
            message={"role": "user", "content": f"record {n}"},
            created_at=now,
        )
        for n in range(1, 3_001)
    )
    # What a view refers to: a stretch of records with its status records left out.
    seqs = [last + n for n in range(1_500, 1_600) if n % 5]
    reads = _Reads()
    with connection.execute_wrapper(reads):
        found = journal_messages(session.pk, seqs)
    assert sorted(found) == seqs
    ((sql, params),) = reads.statements
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    conditions = _index_conditions(plan[0]["Plan"])
    assert conditions and all("seq" in condition for condition in conditions), conditions
