"""The journal's keyed search index: written with each record, in blocks of records, rebuilt
after a key rotation.

Rules:

- An index row (`JournalTerms`) holds the keyed digests of its records' search terms
  (`agentloom.engine` `terms` of `searchable_text`, as `search_history` matches them), made under
  the session's search key of the current field key (`encryption.search_keys`) — never text.
  Terms are taken from the journaled message, which the engine has already redacted, and a span
  that looks like a credential is never a term, so the index cannot confirm a pasted key.
- Every path that writes journal records indexes them in the same transaction: the engine's
  `append_records`, a fork's copy, an import. `status` records are not searchable.
- A row stands for a block: up to `JournalTerms.MAX_BLOCK_RECORDS` records of one run and one
  side (the main instance, or its sub-agents), consecutive among that run's and side's
  searchable records, holding each digest of theirs once — a question, the call that quotes it,
  the tool's result and the answer share most of their terms. A run's journal writer keeps its
  open blocks from save to save (`OpenBlock`): a save's records join them while they have room
  (one UPDATE of the row, no more statements than a row of their own) and start new ones after,
  so a record is found from the save that journals it. A search reads the records of the blocks
  it matches (`selectors.search.block_records`) and filters them one by one.
- `index_journal` indexes what no row covers (records written before the index existed),
  rebuilds rows made under a key that is no longer the current one, and merges the rows of one
  record that earlier versions wrote into blocks (rewriting SQLite's hex text as blobs), in
  batches that commit one by one: an interrupted run is simply started again. Until it has run,
  a search still finds rows of a fallback key (it tries every configured key) and rows of
  either form.
- Rows go with their session (purge); nothing else deletes them but that merge, which replaces
  rows by the block holding all their digests in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from itertools import groupby
from typing import Any

from django.db import connection, transaction
from django.db.models import Q
from django.db.models.expressions import RawSQL

from agentloom import encryption
from agentloom.engine import record_terms
from sessions_app.models import MAIN_INSTANCE, JournalTerms, Run, SessionMessage
from sessions_app.selectors.search import block_records, stands_for
from sessions_app.services.rows import insert_rows

DEFAULT_BATCH_SIZE = 500
UNSEARCHABLE_KINDS = (SessionMessage.Kind.STATUS,)


def record_digests(key: bytes, message: Any) -> list[int]:
    """Return the sorted, distinct digests of a journaled message's search terms under `key`."""
    return sorted(set(encryption.term_digests(key, record_terms(message))))


@dataclass(frozen=True)
class OpenBlock:
    """An index row a run's journal writer may still extend: its records' seqs and kinds, and
    the digests it holds (the row as written)."""

    seq: int
    last_seq: int
    run_number: int
    main: bool
    key_id: int
    kinds: frozenset[str]
    records: int
    digests: frozenset[int]

    def row(self, session_id: int) -> JournalTerms:
        return JournalTerms(
            session_id=session_id,
            seq=self.seq,
            last_seq=self.last_seq if self.records > 1 else None,
            run_number=self.run_number,
            main=self.main,
            kind=next(iter(self.kinds)) if len(self.kinds) == 1 else JournalTerms.MIXED_KINDS,
            key_id=self.key_id,
            digests=sorted(self.digests),
        )


# Open blocks by (run number, main side): a writer's, carried from one save to the next.
OpenBlocks = dict[tuple[int, bool], OpenBlock]


def index_records(
    rows: Iterable[SessionMessage],
    *,
    run_number: int | None = None,
    open_blocks: OpenBlocks | None = None,
) -> int:
    """Write the index rows of freshly journaled `rows` (one session, in seq order) in blocks of
    one run and side; return how many records.

    `run_number` is the run of every row when the caller knows it; otherwise it is read (one
    query). `open_blocks`: the blocks this writer wrote before, which a record joins while its
    block has room (an UPDATE of that row instead of a row of its own); it is updated in place,
    so a caller whose transaction may roll back passes a copy and keeps it once committed.
    Without it the rows start blocks of their own. A block whose first record is already
    indexed is left as it is.
    """
    rows = [row for row in rows if row.kind not in UNSEARCHABLE_KINDS]
    if not rows:
        return 0
    numbers = _run_numbers(rows) if run_number is None else {}
    session_id = rows[0].session_id
    key_id, key = encryption.search_keys(session_id)[0]
    blocks = open_blocks if open_blocks is not None else {}
    # The sides whose open block this call changed, and whether it started that block.
    changed: dict[tuple[int, bool], bool] = {}
    inserts: list[OpenBlock] = []
    updates: list[OpenBlock] = []

    def write(side: tuple[int, bool]) -> None:
        (inserts if changed.pop(side) else updates).append(blocks[side])

    for row in rows:
        side = (
            run_number if run_number is not None else numbers[row.run_id],
            row.instance == MAIN_INSTANCE,
        )
        digests = record_digests(key, row.message)
        block = blocks.get(side)
        if (
            block is None
            or block.records >= JournalTerms.MAX_BLOCK_RECORDS
            or block.key_id != key_id
        ):
            if side in changed:
                write(side)
            blocks[side] = OpenBlock(
                row.seq, row.seq, *side, key_id, frozenset({row.kind}), 1, frozenset(digests)
            )
            changed[side] = True
        else:
            blocks[side] = replace(
                block,
                last_seq=row.seq,
                kinds=block.kinds | {row.kind},
                records=block.records + 1,
                digests=block.digests.union(digests),
            )
            changed.setdefault(side, False)
    for side in list(changed):
        write(side)
    insert_rows([block.row(session_id) for block in inserts], ignore_conflicts=True)
    for block in updates:
        row = block.row(session_id)
        JournalTerms.objects.filter(session_id=session_id, seq=row.seq).update(
            last_seq=row.last_seq, kind=row.kind, digests=row.digests
        )
    return len(rows)


def _merge(singles: list[JournalTerms]) -> int:
    """Replace rows of one record (of one session, in seq order) by blocks; return how many.
    Digests are merged as stored, per field key."""
    merged = 0
    groups: dict[tuple[int, bool, int], list[JournalTerms]] = {}
    for row in singles:
        groups.setdefault((row.run_number, row.main, row.key_id), []).append(row)
    for (run_number, main, key_id), side in groups.items():
        for start in range(0, len(side), JournalTerms.MAX_BLOCK_RECORDS):
            rows = side[start : start + JournalTerms.MAX_BLOCK_RECORDS]
            if len(rows) == 1 and not getattr(rows[0], "text_form", False):
                continue
            block = OpenBlock(
                rows[0].seq,
                rows[-1].seq,
                run_number,
                main,
                key_id,
                frozenset(row.kind for row in rows),
                len(rows),
                frozenset(digest for row in rows for digest in row.digests),
            )
            # A row another merge replaced meanwhile: its block already holds these digests.
            JournalTerms.objects.filter(
                session_id=rows[0].session_id, seq__in=[row.seq for row in rows]
            ).delete()
            insert_rows([block.row(rows[0].session_id)], ignore_conflicts=True)
            merged += len(rows)
    return merged


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
    merged: int = 0


def index_journal(
    *, batch_size: int = DEFAULT_BATCH_SIZE, on_batch: Callable[[IndexReport], None] | None = None
) -> IndexReport:
    """Index records that no row covers, rebuild rows made under a retired key, then merge rows
    of one record into blocks."""
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
                records.sort(key=lambda record: record.seq)
                covered = _covered(session_id, records)
                report.indexed += index_records([r for r in records if r.seq not in covered])
        if on_batch is not None:
            on_batch(report)
    _rebuild_retired(batch_size, report, on_batch)
    _merge_singles(batch_size, report, on_batch)
    return report


def _covered(session_id: int, records: list[SessionMessage]) -> set[int]:
    """Return the seqs of `records` (of one session, in seq order) that an index row covers."""
    first, last = records[0].seq, records[-1].seq
    blocks = list(
        JournalTerms.objects.filter(session_id=session_id, seq__lte=last)
        .filter(Q(last_seq__gte=first) | Q(last_seq__isnull=True, seq__gte=first))
        .values_list("seq", "last_seq", "run_number", "main")
    )
    return {
        record.seq
        for record in records
        if any(
            stands_for(block, record.seq, record.run.number, record.instance) for block in blocks
        )
    }


def _rows_in_key_order(batch_size: int, **filters: Any):
    """Yield the index rows matching `filters` in batches of `batch_size`, in key order."""
    after = (0, 0)  # (session, seq) of the last row seen
    while True:
        rows = JournalTerms.objects.filter(
            Q(session_id__gt=after[0]) | Q(session_id=after[0], seq__gt=after[1]), **filters
        ).order_by("session_id", "seq")
        if connection.vendor == "sqlite":
            rows = rows.annotate(text_form=RawSQL("typeof(digests) = 'text'", ()))
        batch = list(rows[:batch_size])
        if not batch:
            return
        after = (batch[-1].session_id, batch[-1].seq)
        yield batch


def _rebuild_retired(
    batch_size: int, report: IndexReport, on_batch: Callable[[IndexReport], None] | None
) -> None:
    for batch in _rows_in_key_order(batch_size):
        retired = [
            row for row in batch if row.key_id != encryption.search_keys(row.session_id)[0][0]
        ]
        with transaction.atomic():
            for session_id, rows in groupby(retired, key=lambda row: row.session_id):
                blocks = {row: (row.seq, row.last_seq, row.run_number, row.main) for row in rows}
                current_id, key = encryption.search_keys(session_id)[0]
                records = block_records(session_id, blocks.values())
                for row, block in blocks.items():
                    digests: set[int] = set()
                    for seq, _kind, run_number, instance, message in records:
                        if stands_for(block, seq, run_number, instance):
                            digests.update(record_digests(key, message))
                    # Compare-and-set on the key id: a row rebuilt meanwhile is left alone.
                    report.rebuilt += JournalTerms.objects.filter(
                        session_id=session_id, seq=row.seq, key_id=row.key_id
                    ).update(key_id=current_id, digests=sorted(digests))
        if on_batch is not None:
            on_batch(report)


def _merge_singles(
    batch_size: int, report: IndexReport, on_batch: Callable[[IndexReport], None] | None
) -> None:
    for batch in _rows_in_key_order(batch_size, last_seq__isnull=True):
        with transaction.atomic():
            for _session_id, rows in groupby(batch, key=lambda row: row.session_id):
                report.merged += _merge(list(rows))
        if on_batch is not None:
            on_batch(report)
