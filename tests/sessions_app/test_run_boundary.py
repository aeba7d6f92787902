"""Rendering 5 on the database journal: a new run's first request starts with the last request
of the run before it, byte for byte, its excerpts named as that run named them; from compaction
version 5 its masked results stay masked."""

from __future__ import annotations

import json

import pytest

from sessions_app.services.replay import replay_run
from tests.factories import ask

pytestmark = pytest.mark.django_db


def test_a_new_run_extends_the_last_request_of_the_run_before_it(alice, gateway, make_demo_session):
    session = make_demo_session(context_window=9_000)
    first = ask(session, alice, '/tool big_output {"chars": 3000} NONCE-1')
    assert first.status == "succeeded", first.error
    last = gateway.action_requests()[-1]
    gateway.requests.clear()
    second = ask(session, alice, "NONCE-2 and now?")
    assert second.status == "succeeded", second.error
    after = gateway.action_requests()[0]
    assert json.dumps(after.tools) == json.dumps(last.tools)
    shown = [json.dumps(message) for message in last.messages]
    assert [json.dumps(message) for message in after.messages[: len(shown)]] == shown
    assert len(after.messages) > len(shown)
    assert 'read_record(ref=\\"r1:' in json.dumps(after.messages)
    assert replay_run(second).ok


def _masking_boundaries(session, alice, gateway, questions: int):
    """Ask `questions` tool questions; return, for each run whose last compaction only masked,
    (its last request, the next run's first request, whether that run compacted before it)."""
    found, masked_last = [], None
    for n in range(questions):
        gateway.requests.clear()
        run = ask(session, alice, f'/tool big_output {{"chars": 1500}} NONCE-{n}')
        assert run.status == "succeeded", run.error
        requests = gateway.action_requests()
        log = run.checkpoint["state"]["compaction_log"]
        if masked_last is not None:
            # A compaction before its first request covers only the question (its record 1).
            found.append((masked_last, requests[0], any(row["covered_seq"] == 1 for row in log)))
        done = [row for row in log if row["outcome"] == "succeeded"]
        masked_last = requests[-1] if done and done[-1]["reason"] == "masked" else None
    return found


def _texts(request) -> list[str]:
    return [json.dumps(message) for message in request.messages]


def test_a_masked_result_stays_masked_in_the_next_runs_first_request(
    alice, gateway, make_demo_session
):
    session = make_demo_session(context_window=9_000)
    boundaries = _masking_boundaries(session, alice, gateway, 10)
    # Where the new question leaves the view under the trigger (elsewhere it summarises first).
    extended = [(last, first) for last, first, compacted in boundaries if not compacted]
    assert extended, "the session was meant to mask"
    for last, first in extended:
        # The next run starts from the masking's view: the prefix as sent, its stubs included.
        shown = _texts(last)
        assert any("hidden to save room" in text for text in shown)
        assert _texts(first)[: len(shown)] == shown


def test_before_compaction_5_the_next_run_shows_masked_results_whole(
    alice, gateway, make_demo_session, monkeypatch
):
    monkeypatch.setattr("agentloom.engine._compaction_versions.CURRENT_COMPACTION", 4)
    session = make_demo_session(context_window=9_000)
    boundaries = _masking_boundaries(session, alice, gateway, 10)
    assert boundaries, "the session was meant to mask"
    # A new run projects the journal, its results whole, so it masks again before its first
    # request, with its own choice of what.
    assert all(compacted for _, _, compacted in boundaries)
