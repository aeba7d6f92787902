"""Compaction versions: new runs record the current one, old checkpoints keep their own."""

from __future__ import annotations

import pytest

from agentloom.engine import (
    ConfigurationError,
    ContextBinding,
    ContextPolicy,
    GatewayError,
    ModelBudget,
    compaction_of,
)
from agentloom.engine import _compaction_versions as versions
from agentloom.engine.testing import text_response
from tests.engine.helpers import Recorder, make_engine


def _start(engine):
    return engine.start(run_number=1, attempt=1, system_prompt="sys", question="q")


def test_versions_are_numbered_in_order_and_name_what_they_change():
    numbers = [c.version for c in versions.COMPACTIONS]
    assert numbers == list(range(1, len(numbers) + 1))
    assert versions.COMPACTIONS[-1].version == versions.CURRENT_COMPACTION
    assert all(c.changes for c in versions.COMPACTIONS)
    assert compaction_of({}).version == 1  # a binding saved before versions existed


def test_an_unknown_version_is_refused():
    with pytest.raises(ConfigurationError, match="compaction"):
        ContextBinding(ContextPolicy(), ModelBudget(32_768, 4_096, 0), compaction=99)
    with pytest.raises(ConfigurationError, match="compaction"):
        compaction_of({"compaction": 99})


def test_a_run_records_its_version_in_the_binding_and_version_1_records_none(scripted):
    one = _start(make_engine(scripted(text_response("a")), compaction=1))
    assert "compaction" not in one.checkpoint.frame["binding"]
    two = _start(make_engine(scripted(text_response("a")), compaction=2))
    assert two.checkpoint.frame["binding"]["compaction"] == 2


def test_a_resumed_checkpoint_keeps_the_version_it_was_made_with(scripted):
    recorder = Recorder()
    first = _start(
        make_engine(scripted(GatewayError("upstream", "down")), recorder=recorder, compaction=2)
    )
    assert first.status == "failed"
    # The engine compacts with version 1 here; the checkpoint says 2.
    again = make_engine(
        scripted(text_response("done")),
        recorder=recorder,
        record_store=recorder.store(),
        compaction=1,
    )
    # What a resume compacts with: the checkpoint's version, not the engine's.
    _, context = again._restored(recorder.stored[-1])
    assert context.compaction.version == 2
    resumed = again.resume(recorder.stored[-1], attempt=2)
    assert resumed.status == "succeeded"
    assert resumed.checkpoint.frame["binding"]["compaction"] == 2
