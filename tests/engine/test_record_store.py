"""The memory journal's record store against the one contract of record stores."""

from __future__ import annotations

import pytest

from agentloom.engine import Checkpoint, RecordStore
from agentloom.engine.testing import MemoryJournal
from tests.support.record_store_contract import RecordStoreContract


class MemoryCase:
    """The contract's journal: rows go into a `MemoryJournal`, keyed by run number."""

    def __init__(self) -> None:
        self.memory = MemoryJournal()

    def write(self, run, rows):
        added = self.memory.sync(run, Checkpoint(frame={}, records=list(rows)))
        return [row.seq for row in added]

    def store(self, run):
        return self.memory.store(run)


class TestMemoryStore(RecordStoreContract):
    @pytest.fixture
    def journal(self):
        return MemoryCase()


def test_the_memory_store_keeps_no_reusable_views():
    block = {"view": 3, "after": 4, "upto": 9, "count": 2, "cap": 24_000}
    with pytest.raises(LookupError, match="no reusable views"):
        MemoryJournal().store(1).history(block, rendering=3)


def test_a_store_that_keeps_no_journal_reads_no_main_record():
    class FramesOnly(RecordStore):
        def records(self, instance):
            return []

        def journal(self, seqs):
            return {}

        def history(self, block, *, rendering):
            return [], []

    assert FramesOnly().main_record(up_to=10, seq=1) is None
    assert FramesOnly().main_record(up_to=10, run=1, local=1) is None
