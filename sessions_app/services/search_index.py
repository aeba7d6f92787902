"""The journal's keyed search index: written with each record, rebuilt after a key rotation.

Rules:

- A record's row (`JournalTerms`) holds the keyed digests of its search terms
  (`agentloom.engine` `terms` of `searchable_text`, as `search_history` matches them), made under
  the session's search key of the current field key (`encryption.search_keys`) — never text.
  Terms are taken from the journaled message, which the engine has already redacted, and a span
  that looks like a credential is never a term, so the index cannot confirm a pasted key.
- Every path that writes journal records indexes them in the same transaction: the engine's
  `append_records`, a fork's copy, an import. `status` records are not searchable.
- `index_journal` indexes what has no row yet (records written before the index existed) and
  rebuilds rows made under a key that is no longer the current one, in batches that commit one
  by one: an interrupted run is simply started again. Until it has run, a search still finds
  rows of a fallback key (it tries every configured key).
- Rows go with their session (purge); nothing else deletes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Q

from agentloom import encryption
from agentloom.engine import record_terms
from sessions_app.models import MAIN_INSTANCE, JournalTerms, Run, SessionMessage
from sessions_app.services.rows import insert_rows

DEFAULT_BATCH_SIZE = 500
UNSEARCHABLE_KINDS = (SessionMessage.Kind.STATUS,)


def record_digests(key: bytes, message: Any) -> list[int]:
    """Return the sorted, distinct digests of a journaled message's search terms under `key`."""
    return sorted(set(encryption.term_digests(key, record_terms(message))))


def index_records(rows: Iterable[SessionMessage], *, run_number: int | None = None) -> int:
    """Write the index rows of freshly journaled `rows` (one session); return how many.

    `run_number` is the run of every row when the caller knows it; otherwise it is read (one
    query). A row that is already indexed is left as it is.
    """
    rows = [row for row in rows if row.kind not in UNSEARCHABLE_KINDS]
    if not rows:
        return 0
    numbers = _run_numbers(rows) if run_number is None else {}
    key_id, key = encryption.search_keys(rows[0].session_id)[0]
    insert_rows(
        [
            JournalTerms(
                session_id=row.session_id,
                seq=row.seq,
                run_number=run_number if run_number is not None else numbers[row.run_id],
                main=row.instance == MAIN_INSTANCE,
                kind=row.kind,
                key_id=key_id,
                digests=record_digests(key, row.message),
            )
            for row in rows
        ],
        ignore_conflicts=True,
    )
    return len(rows)


def _run_numbers(rows: list[SessionMessage]) -> dict[int, int]:
    known = {row.run_id: row.run.number for row in rows if SessionMessage.run.is_cached(row)}
    missing = {row.run_id for row in rows} - set(known)
    if missing:
        known.update(Run.objects.filter(pk__in=missing).values_list("pk", "number"))
    return known


@dataclass
class IndexReport:
    """What `index_journal` did."""

    indexed: int = 0
    rebuilt: int = 0


def index_journal(
    *, batch_size: int = DEFAULT_BATCH_SIZE, on_batch: Callable[[IndexReport], None] | None = None
) -> IndexReport:
    """Index records that have no row, then rebuild rows made under a retired key."""
    report = IndexReport()
    after = 0
    while True:
        rows = list(
            SessionMessage.objects.filter(pk__gt=after)
            .exclude(kind__in=UNSEARCHABLE_KINDS)
            .order_by("pk")
            .select_related("run")
            .only("pk", "session_id", "seq", "run__number", "instance", "kind", "message")[
                :batch_size
            ]
        )
        if not rows:
            break
        after = rows[-1].pk
        by_session: dict[int, list[SessionMessage]] = {}
        for row in rows:
            by_session.setdefault(row.session_id, []).append(row)
        with transaction.atomic():
            for session_id, records in by_session.items():
                have = set(
                    JournalTerms.objects.filter(
                        session_id=session_id, seq__in=[r.seq for r in records]
                    ).values_list("seq", flat=True)
                )
                report.indexed += index_records([r for r in records if r.seq not in have])
        if on_batch is not None:
            on_batch(report)
    report.rebuilt = _rebuild_retired(batch_size, report, on_batch)
    return report


def _rebuild_retired(
    batch_size: int, report: IndexReport, on_batch: Callable[[IndexReport], None] | None
) -> int:
    rebuilt = 0
    after = (0, 0)  # (session, seq) of the last row seen, in key order
    while True:
        stale = list(
            JournalTerms.objects.filter(
                Q(session_id__gt=after[0]) | Q(session_id=after[0], seq__gt=after[1])
            )
            .order_by("session_id", "seq")
            .values_list("session_id", "seq", "key_id")[:batch_size]
        )
        if not stale:
            return rebuilt
        after = stale[-1][:2]
        retired: dict[int, list[tuple[int, int]]] = {}
        for session_id, seq, key_id in stale:
            if key_id != encryption.search_keys(session_id)[0][0]:
                retired.setdefault(session_id, []).append((seq, key_id))
        with transaction.atomic():
            for session_id, items in retired.items():
                current_id, key = encryption.search_keys(session_id)[0]
                messages = dict(
                    SessionMessage.objects.filter(
                        session_id=session_id, seq__in=[seq for seq, _ in items]
                    ).values_list("seq", "message")
                )
                for seq, key_id in items:
                    # Compare-and-set on the key id: a row rebuilt meanwhile is left alone.
                    rebuilt += JournalTerms.objects.filter(
                        session_id=session_id, seq=seq, key_id=key_id
                    ).update(key_id=current_id, digests=record_digests(key, messages.get(seq)))
        report.rebuilt = rebuilt
        if on_batch is not None:
            on_batch(report)
