"""Rows inserted without a queryset are stored as `bulk_create` stores them."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import BinaryField
from django.db.models.functions import Cast
from django.utils import timezone

from sessions_app.models import SessionMessage
from sessions_app.services.rows import insert_rows
from sessions_app.services.runs import run_ask

pytestmark = pytest.mark.django_db


def _row(run, seq: int, text: str) -> SessionMessage:
    return SessionMessage(
        session_id=run.session_id,
        seq=seq,
        run_id=run.pk,
        instance="main",
        kind="assistant",
        entry_key=f"k{seq}",
        local_seq=seq,
        message={"role": "assistant", "content": text},
        created_at=timezone.now(),
    )


def test_rows_are_stored_as_their_fields_store_them(alice, make_demo_session):
    run = run_ask(user=alice, session=make_demo_session(), question="q")
    rows = [_row(run, 100 + n, f"NONCE-ROW-{n} ü" * 40) for n in range(3)]
    insert_rows(rows)
    stored = list(SessionMessage.objects.filter(run=run, seq__gte=100).order_by("seq"))
    assert [row.message for row in stored] == [row.message for row in rows]
    assert [row.created_at for row in stored] == [row.created_at for row in rows]
    raw = SessionMessage.objects.filter(run=run, seq__gte=100).values_list(
        Cast("message", output_field=BinaryField()), flat=True
    )
    assert not any(b"NONCE-ROW" in bytes(value) for value in raw), "encrypted at rest"
    assert not rows[0]._state.adding


def test_a_conflict_is_ignored_only_when_asked(alice, make_demo_session):
    run = run_ask(user=alice, session=make_demo_session(), question="q")
    insert_rows([_row(run, 200, "first")])
    insert_rows([_row(run, 200, "again"), _row(run, 201, "new")], ignore_conflicts=True)
    stored = SessionMessage.objects.filter(run=run, seq__gte=200).order_by("seq")
    assert [row.message["content"] for row in stored] == ["first", "new"]
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_rows([_row(run, 200, "again")])


def test_many_rows_go_in_the_batches_the_database_allows(alice, make_demo_session):
    run = run_ask(user=alice, session=make_demo_session(), question="q")
    fields = [f for f in SessionMessage._meta.concrete_fields if f.column != "id"]
    count = 3 * max(connection.ops.bulk_batch_size(fields, [None] * 5000), 1) + 1
    count = min(count, 5000)
    insert_rows([_row(run, 1000 + n, "x") for n in range(count)])
    assert SessionMessage.objects.filter(run=run, seq__gte=1000).count() == count
