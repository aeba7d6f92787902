"""One contract for every `RecordStore`: the tests each implementation must pass.

A `RecordStore` is where a by-reference (`format: 2`) frame finds what it refers to: the run's own
records (`records`), session journal records by seq (`journal`), the inherited history block its
checkpoint names (`history`) and, for `read_record`, one main-instance record within the
inherited watermark (`main_record`). Two implementations pass this suite: the application's
`JournalStore` (`sessions_app/selectors/checkpoints.py`, run in
`tests/sessions_app/test_record_store.py`) and the memory journal's store of
`agentloom.engine.testing` (`tests/engine/test_record_store.py`).

A module runs the suite by subclassing `RecordStoreContract` and giving it a `journal` fixture: a
`Journal` that journals a session's rows as the application does (in order, session seqs from 1,
each row naming its run by its number in the session) and returns the store of one run.

Where the implementations legitimately differ, the suite does not test:

- a history block that names a reusable view (`block["view"]`): the journal's store rebuilds the
  view saved in the database; the memory journal keeps no views and raises `LookupError` (its own
  module tests that);
- when records are read: the journal's store reads every instance's records of its run at its
  first `records` call (one query) and keeps them, since a frame reads them once, when it loads;
  the memory store reads them as they are. The suite asks a new store after every write;
- what `main_record` reads in a store that keeps no journal: nothing (the base class's default),
  tested once for the interface itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pytest

from agentloom.engine import (
    Checkpoint,
    ContextBinding,
    ContextPolicy,
    EngineConfig,
    EngineHooks,
    InstanceFrame,
    JournalRecord,
    ModelBudget,
    Record,
    RecordStore,
    create_engine,
    iso_utc,
    project_history,
)
from agentloom.engine._rendering import RENDERINGS
from agentloom.engine.testing import ScriptedGateway, text_response, tool_call_response

MAIN = "main"
CHILD = "1.1"
START = datetime(2026, 10, 9, 12, 0, tzinfo=UTC)


class Journal(Protocol):
    """A session journal under test: rows go in, a run's record store comes out."""

    def write(self, run: int, rows: list[tuple[str, Record]]) -> list[int]:
        """Journal `(instance, record)` rows of run number `run` in order; return their seqs."""

    def store(self, run: int) -> RecordStore:
        """Return a new record store of run number `run`."""


def _record(seq: int, kind: str, message: dict[str, Any], entry_key: str) -> Record:
    return Record(seq, kind, message, entry_key, iso_utc(START + timedelta(seconds=seq)))


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "echo", "arguments": "{}"}}


@dataclass
class Journaled:
    """The rows a session journaled, as the suite wrote them, with the seq each was given."""

    rows: list[JournalRecord]
    records: dict[tuple[int, str], list[Record]]

    def seq_of(self, run: int, instance: str, local: int) -> int:
        [row] = [
            row
            for row in self.rows
            if (row.run_id, row.instance) == (run, instance)
            and row.message is self.local(run, instance, local).message
        ]
        return row.seq

    def local(self, run: int, instance: str, local: int) -> Record:
        [record] = [r for r in self.records[run, instance] if r.seq == local]
        return record

    def main_rows(self, after: int, upto: int) -> list[JournalRecord]:
        return [row for row in self.rows if row.instance == MAIN and after < row.seq <= upto]


def write(journal: Journal, session: Journaled, run: int, rows: list[tuple[str, Record]]) -> None:
    """Journal `rows` of `run` and note them in `session`, checking the seqs they were given."""
    seqs = journal.write(run, rows)
    expected = list(range(len(session.rows) + 1, len(session.rows) + len(rows) + 1))
    assert seqs == expected  # a session numbers its rows from 1, in journal order
    for seq, (instance, record) in zip(seqs, rows, strict=True):
        session.rows.append(
            JournalRecord(seq, run, instance, record.kind, record.message, record.entry_key)
        )
        session.records.setdefault((run, instance), []).append(record)


def two_runs(journal: Journal) -> Journaled:
    """Journal two runs: the first with a tool call and a sub-agent between its records."""
    session = Journaled(rows=[], records={})
    write(
        journal,
        session,
        1,
        [
            (MAIN, _record(1, "user_input", {"role": "user", "content": "q1"}, "user_input")),
            (
                MAIN,
                _record(
                    2,
                    "assistant",
                    {"role": "assistant", "content": None, "tool_calls": [_call("r1-1-1")]},
                    "assistant:1",
                ),
            ),
            (CHILD, _record(1, "user_input", {"role": "user", "content": "task"}, "user_input")),
            (
                CHILD,
                _record(
                    2, "assistant", {"role": "assistant", "content": "child done"}, "assistant:1"
                ),
            ),
            (
                MAIN,
                _record(
                    3,
                    "tool_result",
                    {"role": "tool", "tool_call_id": "r1-1-1", "content": "echoed"},
                    "tool:r1-1-1",
                ),
            ),
            (MAIN, _record(4, "assistant", {"role": "assistant", "content": "a1"}, "assistant:2")),
            (MAIN, _record(5, "status", {"status": "succeeded", "error": None}, "status:1")),
        ],
    )
    write(
        journal,
        session,
        2,
        [
            (MAIN, _record(1, "user_input", {"role": "user", "content": "q2"}, "user_input")),
            (MAIN, _record(2, "assistant", {"role": "assistant", "content": "a2"}, "assistant:1")),
        ],
    )
    return session


def _fields(records: list[Record]) -> list[tuple[Any, ...]]:
    return [(r.seq, r.kind, r.message, r.entry_key, r.at) for r in records]


class _Saving:
    """A save hook that journals each checkpoint and checks its frame loads back the same."""

    def __init__(self, journal: Journal, run: int):
        self.journal = journal
        self.run = run
        self.loaded = 0
        self.stored: list[dict[str, Any]] = []
        self.full: list[dict[str, Any]] = []

    def save(self, checkpoint: Checkpoint) -> None:
        full = json.loads(json.dumps(checkpoint.full()))
        self.journal.write(self.run, list(checkpoint.records))
        stored = json.loads(json.dumps(checkpoint.frame))
        self.stored.append(stored)
        self.full.append(full)
        loaded = InstanceFrame.from_dict(stored, store=self.journal.store(self.run)).to_dict()
        assert json.dumps(loaded) == json.dumps(full)
        self.loaded += 1


class RecordStoreContract:
    """What every `RecordStore` does; a subclass gives the `journal` fixture."""

    @pytest.fixture
    def journal(self) -> Journal:
        raise NotImplementedError

    def test_records_are_the_runs_own_records_of_an_instance_in_local_seq_order(self, journal):
        session = two_runs(journal)

        assert _fields(journal.store(1).records(MAIN)) == _fields(session.records[1, MAIN])
        assert _fields(journal.store(1).records(CHILD)) == _fields(session.records[1, CHILD])
        assert _fields(journal.store(2).records(MAIN)) == _fields(session.records[2, MAIN])
        assert journal.store(2).records(CHILD) == []
        assert journal.store(1).records("nobody") == []

    def test_records_hands_out_a_list_of_its_own(self, journal):
        two_runs(journal)
        store = journal.store(1)

        store.records(MAIN).clear()

        assert len(store.records(MAIN)) == 5

    def test_journal_returns_messages_by_session_seq_of_any_run_and_instance(self, journal):
        session = two_runs(journal)
        wanted = {
            session.seq_of(1, MAIN, 3),
            session.seq_of(1, CHILD, 2),
            session.seq_of(2, MAIN, 1),
        }

        found = journal.store(2).journal(wanted | {999})

        assert found == {row.seq: row.message for row in session.rows if row.seq in wanted}
        assert journal.store(2).journal(set()) == {}

    @pytest.mark.parametrize("rendering", [rendering.version for rendering in RENDERINGS])
    def test_history_rebuilds_a_block_of_main_records_under_its_rendering(self, journal, rendering):
        session = two_runs(journal)
        after, upto = session.seq_of(1, MAIN, 1), session.seq_of(1, MAIN, 5)
        expected = project_history(
            session.main_rows(after, upto), tool_result_chars=3, rendering=rendering
        )
        count = len(expected.messages)
        block = {"view": None, "after": after, "upto": upto, "count": count, "cap": 3}

        messages, origins = journal.store(2).history(block, rendering=rendering)

        assert (messages, origins) == (expected.messages, expected.origins)
        # The run's records after the question, the tool result under the block's cap.
        assert {"role": "assistant", "content": "a1"} in messages
        [tool] = [message for message in messages if message["role"] == "tool"]
        assert tool["content"].startswith("ech") and "echoed" not in tool["content"]

    def test_main_record_by_session_seq_within_the_watermark(self, journal):
        session = two_runs(journal)
        tool, child = session.seq_of(1, MAIN, 3), session.seq_of(1, CHILD, 2)
        store = journal.store(2)

        assert store.main_record(up_to=tool, seq=tool) == session.local(1, MAIN, 3).message
        assert store.main_record(up_to=tool - 1, seq=tool) is None
        # A sub-agent's record is not readable from the main instance.
        assert store.main_record(up_to=tool, seq=child) is None
        assert store.main_record(up_to=999, seq=999) is None

    def test_main_record_by_run_number_and_local_seq_within_the_watermark(self, journal):
        session = two_runs(journal)
        watermark = session.seq_of(1, MAIN, 5)
        store = journal.store(2)

        found = store.main_record(up_to=watermark, run=1, local=2)
        # The main instance's local seq 2, not the sub-agent's.
        assert found == session.local(1, MAIN, 2).message
        assert store.main_record(up_to=watermark, run=1, local=4) == {
            "role": "assistant",
            "content": "a1",
        }
        assert store.main_record(up_to=session.seq_of(1, MAIN, 4) - 1, run=1, local=4) is None
        assert store.main_record(up_to=watermark, run=1, local=9) is None
        assert store.main_record(up_to=999, run=7, local=1) is None

    def test_every_frame_an_engine_saves_loads_back_through_the_store(self, journal):
        # Run 1 calls a tool; run 2 inherits its history and compacts it, so its frames refer
        # to their own records, to session records (the snapshot) and to the inherited block.
        first = _Saving(journal, 1)
        gateway = ScriptedGateway(
            [tool_call_response(("echo", {"text": "x" * 400})), text_response("a" * 400)]
        )
        outcome = _engine(gateway, first, window=200_000).start(
            run_number=1, attempt=1, system_prompt="sys", question="q1 " + "f" * 600, history=None
        )
        assert outcome.status == "succeeded"
        rows = [
            JournalRecord(seq, 1, MAIN, record["kind"], record["message"])
            for seq, record in enumerate(first.full[-1]["context"]["records"], start=1)
        ]
        history = project_history(rows)

        second = _Saving(journal, 2)
        gateway = ScriptedGateway([text_response("summary NONCE-S"), text_response("a2")])
        outcome = _engine(gateway, second, window=3_000).start(
            run_number=2, attempt=1, system_prompt="sys", question="q2", history=history
        )

        assert outcome.status == "succeeded"
        assert first.loaded and second.loaded
        last = second.stored[-1]
        assert last["context"]["inherited"]["history"]["upto"] == history.watermark
        assert any("s" in entry for entry in last["context"]["compactions"][0]["view"])


def _engine(gateway: ScriptedGateway, hook: _Saving, *, window: int):
    return create_engine(
        gateway,
        ["echo"],
        ContextBinding(ContextPolicy(), ModelBudget(window, 500, 0)),
        hooks=EngineHooks(save=hook.save),
        config=EngineConfig(record_store=hook.journal.store(hook.run)),
    )
