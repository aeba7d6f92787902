"""Checkpoints saved under an older rendering version rebuild, resume and replay unchanged."""

from __future__ import annotations

import pytest

from agentloom.engine import rendering_of
from agentloom.engine._rendering import CURRENT_RENDERING
from context_app.engine_adapter import run_measures, version_binding
from sessions_app.models import ModelCall, Run
from sessions_app.selectors.checkpoints import full_checkpoint
from sessions_app.selectors.history import history_for_new_run
from sessions_app.services import replay
from sessions_app.services.execution import run_execute
from sessions_app.services.replay import replay_run
from sessions_app.services.runs import run_resume
from tests.factories import ask
from tests.support.checkpoint_fixtures import fixture, load_session

pytestmark = pytest.mark.django_db

FIXTURES = [
    "rendering_v1_local",
    "rendering_v1_deepseek",
    "rendering_v3_local",
    "rendering_v4_local",
]


def _known(frame: dict, saved: dict) -> dict:
    """Return `frame` with only the state keys `saved` has, in every instance."""
    state = {key: frame["state"][key] for key in saved["state"] if key in frame["state"]}
    children = saved["state"].get("children") or {}
    state["children"] = {
        name: _known(child, children[name])
        for name, child in (frame["state"].get("children") or {}).items()
        if name in children
    }
    return {**frame, "state": state}


def _runs(session) -> list[Run]:
    """Return the session's runs made by the engine (a legacy run adopted has no binding)."""
    runs = Run.objects.filter(session=session).order_by("number")
    return [run for run in runs if "binding" in run.checkpoint]


def _rendering(run: Run) -> int:
    return rendering_of(run.checkpoint["binding"]).version


@pytest.mark.parametrize("name", FIXTURES)
def test_old_checkpoints_rebuild_exactly_as_saved(alice, name):
    session = load_session(name, user=alice)
    expanded = fixture(name)["expanded"]
    for run in _runs(session):
        rebuilt, saved = full_checkpoint(run), expanded[str(run.number)]
        # Execution state may gain keys with their defaults; everything saved is as it was.
        assert _known(rebuilt, saved) == saved, f"run {run.number}"
        assert _rendering(run) == fixture(name)["rendering"], f"run {run.number}"


@pytest.mark.parametrize("name", FIXTURES)
def test_every_old_run_replays_unchanged(alice, gateway, name, monkeypatch):
    session = load_session(name, user=alice)
    sent = []
    answer = replay._RecordedGateway.complete
    # Each request as sent, so its size, tool schemas included, is compared with the run's.
    monkeypatch.setattr(
        replay._RecordedGateway,
        "complete",
        lambda self, request: sent.append(request) or answer(self, request),
    )
    for run in _runs(session):
        sent.clear()
        report = replay_run(run)
        assert report.ok, (run.number, report.differences)
        if fixture(name)["rendering"] < 3:
            # Measured by the code of its time, before these fixtures recorded sizes to compare.
            continue
        _policy, _budget, estimator = run_measures(
            session.agent_version.snapshot, run.checkpoint["binding"]
        )
        calls = ModelCall.objects.filter(run=run, discarded=False).order_by("id")
        assert [estimator.estimate(r.messages, r.tools) for r in sent] == [
            call.request_estimate for call in calls
        ], f"run {run.number}"


@pytest.mark.parametrize("name", FIXTURES)
def test_an_old_failed_run_resumes_with_its_own_rendering(alice, gateway, name):
    session = load_session(name, user=alice)
    failed = _runs(session)[-1]
    assert failed.status == "failed"
    before = full_checkpoint(failed)["messages"]
    gateway.failed.add(failed.question)  # its provider failure happened once, when it was made
    run_resume(user=alice, run=failed)
    run_execute(run_id=failed.pk)
    failed.refresh_from_db()
    assert failed.status == "succeeded", failed.error
    assert _rendering(failed) == fixture(name)["rendering"]
    after = full_checkpoint(failed)["messages"]
    assert after[: len(before)] == before
    report = replay_run(failed)
    assert report.ok, report.differences


def test_an_old_session_answers_a_new_question(alice, gateway):
    session = load_session("rendering_v1_local", user=alice)
    run = ask(session, alice, '/tool echo {"text": "NONCE-NEW"}')
    assert run.status == "succeeded", run.error
    assert "NONCE-NEW" in run.answer
    assert replay_run(run).ok


def test_a_new_question_of_a_rendering_3_session_renders_with_the_current_version(alice, gateway):
    session = load_session("rendering_v3_local", user=alice)
    gateway.requests.clear()
    run = ask(session, alice, "NONCE-NEW what now?")
    assert run.status == "succeeded", run.error
    assert _rendering(run) == CURRENT_RENDERING
    first = gateway.action_requests()[0]
    # read_record is offered from the first request.
    assert "read_record" in [tool["function"]["name"] for tool in first.tools]
    # The adopted legacy stop note is the run's state, not the user's words.
    inherited = history_for_new_run(session, version_binding(session.agent_version), as_of=run)
    users = [m["content"] for m in inherited.messages if m["role"] == "user"]
    assert not any("NONCE-LEGACY-STOP" in text for text in users)
    assert any(text.startswith("[feedback] tool echo (c1) failed") for text in users)
    note = {"role": "system", "content": "[run note] run 1 failed: upstream (s:4)"}
    assert note in inherited.messages
    # The plan run 2 set carries over, though no run of rendering 3 passed it on.
    assert run.checkpoint["state"]["plan"].startswith("1. [in_progress] NONCE-PLAN-A read")
    assert replay_run(run).ok
