"""A session journal in memory: the record store of by-reference frames without a database.

Engine tests and benchmarks use it to save `format: 2` checkpoints and resume them, exactly as
the application does with the database journal.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from agentloom.engine.large import history_judge
from agentloom.engine.projection import JournalRecord, ProjectedHistory, project_history
from agentloom.engine.records import MAIN_INSTANCE, Record
from agentloom.engine.refs import Origin, RecordStore

__all__ = ["MemoryJournal"]


class MemoryJournal:
    """Ordered session rows deduplicated by (run, instance, entry key), plus each run's records."""

    def __init__(self) -> None:
        self.rows: list[JournalRecord] = []
        self.records: dict[tuple[Any, str], list[Record]] = {}
        self._seen: set[tuple[Any, str, str]] = set()

    def sync(self, run_id: Any, checkpoint: Any) -> list[JournalRecord]:
        """Journal a checkpoint's new records (an engine `save` hook); return the new rows."""
        added = []
        for instance, record in checkpoint.records:
            key = (run_id, instance, record.entry_key)
            if key in self._seen:
                continue
            self._seen.add(key)
            self.records.setdefault((run_id, instance), []).append(record)
            row = JournalRecord(len(self.rows) + 1, run_id, instance, record.kind, record.message)
            self.rows.append(row)
            added.append(row)
        return added

    def history(
        self, upto: int | None = None, *, binding: dict[str, Any] | None = None
    ) -> ProjectedHistory:
        """Return what a new run inherits from the rows up to `upto` (all by default).

        With a run's `binding`, large records are shown as its large-record policy says.
        """
        return project_history(
            (row for row in self.rows if upto is None or row.seq <= upto),
            judge=history_judge(binding) if binding else None,
        )

    def store(self, run_id: Any) -> RecordStore:
        """Return the record store a frame of run `run_id` resolves its references with."""
        return _Store(self, run_id)


class _Store(RecordStore):
    def __init__(self, journal: MemoryJournal, run_id: Any):
        self.source = journal
        self.run_id = run_id

    def records(self, instance: str) -> list[Record]:
        return list(self.source.records.get((self.run_id, instance), []))

    def journal(self, seqs: Collection[int]) -> dict[int, dict[str, Any]]:
        return {row.seq: row.message for row in self.source.rows if row.seq in seqs}

    def history(self, block: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Origin]]:
        if block.get("view") is not None:
            raise LookupError("the memory journal keeps no reusable views")
        rows = [
            row
            for row in self.source.rows
            if block["after"] < row.seq <= block["upto"] and row.instance == MAIN_INSTANCE
        ]
        excerpts = {int(seq): chars for seq, chars in (block.get("ex") or {}).items()}
        history = project_history(rows, tool_result_chars=block["cap"], excerpts=excerpts)
        return history.messages, history.origins

    def main_record(
        self,
        *,
        up_to: int,
        seq: int | None = None,
        run: int | None = None,
        local: int | None = None,
    ) -> dict[str, Any] | None:
        for row in self.source.rows:
            if row.seq > up_to or row.instance != MAIN_INSTANCE:
                continue
            if seq is not None and row.seq == seq:
                return row.message
            if seq is None and row.run_id == run:
                records = self.source.records.get((run, MAIN_INSTANCE), [])
                if any(r.seq == local and r.message is row.message for r in records):
                    return row.message
        return None
