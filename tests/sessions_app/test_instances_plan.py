"""The instances of a session are found by skipping through the journal's (session, instance,
seq) index, never by reading the journal: PostgreSQL's plan of `instances_of` says so, and reads a
few index entries, not one per record."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from sessions_app.models import SessionMessage
from sessions_app.selectors.sessions import instances_of
from tests.support.journaled import journaled_session

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's planner"),
]


def _nodes(plan):
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def test_instances_of_uses_the_index_not_a_scan_of_the_journal(alice):
    session = journaled_session(alice, 200)  # 1,000 records
    table = SessionMessage._meta.db_table
    statements = []

    def capture(execute, sql, params, many, context):
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {table}")
    with connection.execute_wrapper(capture):
        assert instances_of(session) == ["main"]
    sql, params = next((sql, params) for sql, params in statements if "RECURSIVE" in sql)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        (plan,) = cursor.fetchone()
    plan = plan if isinstance(plan, list) else json.loads(plan)
    nodes = list(_nodes(plan[0]["Plan"]))

    on_journal = [node for node in nodes if node.get("Relation Name") == table]
    assert on_journal
    assert all(node["Node Type"] != "Seq Scan" for node in on_journal), plan
    assert {node.get("Index Name") for node in on_journal} == {"journal_instance_seq"}, plan
    # A few index entries are read (one per instance, and one to find there is no other), not
    # the session's thousand.
    read = sum(
        node["Actual Rows"] * node["Actual Loops"]
        + node.get("Rows Removed by Filter", 0)
        + node.get("Rows Removed by Index Recheck", 0)
        for node in on_journal
    )
    assert read <= 10, plan
