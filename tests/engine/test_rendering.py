"""Rendering versions: new runs record the current one, old checkpoints keep their own."""

from __future__ import annotations

import pytest

from agentloom.engine import (
    ConfigurationError,
    ContextBinding,
    ContextPolicy,
    GatewayError,
    ModelBudget,
    ModelResponse,
    ProjectedHistory,
    rendering_of,
)
from agentloom.engine._rendering import CURRENT_RENDERING, RENDERINGS
from agentloom.engine.testing import text_response
from tests.engine.helpers import Recorder, make_engine


def _thinking(content: str) -> ModelResponse:
    return ModelResponse(
        message={"role": "assistant", "content": content, "reasoning_content": "I think NONCE-R"},
        finish_reason="stop",
    )


def _start(engine, **options):
    return engine.start(run_number=1, attempt=1, system_prompt="sys", question="q", **options)


def test_versions_are_numbered_in_order_and_name_what_they_change():
    assert [r.version for r in RENDERINGS] == list(range(1, len(RENDERINGS) + 1))
    assert RENDERINGS[-1].version == CURRENT_RENDERING
    assert all(r.changes for r in RENDERINGS)
    assert rendering_of({}).version == 1  # a binding saved before versions existed


def test_a_new_run_records_the_current_rendering_and_keeps_reasoning(scripted):
    outcome = _start(make_engine(scripted(_thinking("answer"))))
    assert outcome.checkpoint.frame["binding"]["rendering"] == CURRENT_RENDERING
    assistant = outcome.frame["context"]["records"][-2]["message"]
    assert assistant["reasoning_content"] == "I think NONCE-R"


def test_a_run_made_under_version_1_records_no_version_and_drops_reasoning(scripted):
    outcome = _start(make_engine(scripted(_thinking("answer")), rendering=1))
    assert "rendering" not in outcome.checkpoint.frame["binding"]
    assistant = outcome.frame["context"]["records"][-2]["message"]
    assert "reasoning_content" not in assistant


def test_a_resumed_checkpoint_keeps_the_version_it_was_made_with(scripted):
    recorder = Recorder()
    first = _start(
        make_engine(scripted(GatewayError("upstream", "down")), recorder=recorder, rendering=1)
    )
    assert first.status == "failed"
    # The engine renders with the current version by default; the checkpoint says 1.
    again = make_engine(
        scripted(_thinking("done")), recorder=recorder, record_store=recorder.store()
    )
    resumed = again.resume(recorder.stored[-1], attempt=2)
    assert resumed.status == "succeeded"
    assert "rendering" not in resumed.checkpoint.frame["binding"]
    assistant = [r for r in resumed.frame["context"]["records"] if r["kind"] == "assistant"]
    assert "reasoning_content" not in assistant[-1]["message"]


def test_an_unknown_version_is_refused():
    with pytest.raises(ConfigurationError, match="rendering"):
        ContextBinding(ContextPolicy(), ModelBudget(32_768, 4_096, 0), rendering=99)
    with pytest.raises(ConfigurationError, match="rendering"):
        rendering_of({"rendering": 99})


def test_history_projected_under_another_version_is_refused(scripted):
    history = ProjectedHistory(from_journal=True, rendering=1)
    engine = make_engine(scripted(text_response("x")))
    with pytest.raises(ConfigurationError, match="rendering"):
        _start(engine, history=history)
