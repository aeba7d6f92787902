"""A run's context, the session's reusable views and the run's model calls."""

from __future__ import annotations

import math

import pytest
from django.test import Client

from agentloom.engine import JsonBytesEstimator, builtin_tools, measure_context
from agentloom.engine._policy import view_characters
from context_app.engine_adapter import offered_tools, run_measures
from context_app.models import AgentVersion
from sessions_app.models import ModelCall, SessionView
from sessions_app.selectors.checkpoints import full_checkpoint
from tests.api.factories import ask, compacted_frame, make_agent, open_session, publish

pytestmark = pytest.mark.django_db

EFFECTIVE = 32_768 - 4_096 - 1_024  # the default connection's window, output and margin


def _context(api, run):
    response = api.get(f"/api/v1/runs/{run.pk}/context")
    assert response.status_code == 200
    return response.json()


def test_a_run_without_a_checkpoint_is_measured_by_its_version(api, run):
    # Its first request will offer the version's tools: `search_history`, which a new agent
    # has, and `read_record` under its large-record policy, from the first request on.
    schemas = offered_tools(run.session.agent_version.snapshot)
    assert [schema["function"]["name"] for schema in schemas] == ["search_history", "read_record"]
    whole = JsonBytesEstimator().upper_bound([], schemas)
    size = whole - JsonBytesEstimator().upper_bound([], [])
    assert _context(api, run) == {
        "messages": [],
        "estimate": 0,
        "unit": "estimate",
        "ceiling": EFFECTIVE,
        "effective_budget": EFFECTIVE,
        "trigger_at": math.ceil(EFFECTIVE * 0.8),
        "target_at": int(EFFECTIVE * 0.6),
        "compactions": [],
        "estimator": "bytes",
        "last_reported": None,
        "last_call_unreported": False,
        "cost": None,
        "plan": None,
        "tools": {"size": size, "unit": "bytes", "share": round(100 * size / whole)},
    }


def test_the_version_policy_sets_the_thresholds(api, space, alice):
    agent = make_agent(space, alice, context_policy={"context_ratio": 0.5, "target_ratio": 0.25})
    run = ask(open_session(publish(agent, alice), alice), alice)
    context = _context(api, run)
    assert (context["trigger_at"], context["target_at"]) == (
        math.ceil(EFFECTIVE * 0.5),
        int(EFFECTIVE * 0.25),
    )


def test_a_checkpoint_gives_view_estimate_binding_and_every_attempt(api, run):
    frame = compacted_frame(budget=(4_000, 500, 100))
    run.checkpoint = frame
    run.save()
    context = _context(api, run)
    assert context["messages"] == frame["messages"]
    # The checkpoint's binding, not the version's budget, is what the run measures with.
    assert context["effective_budget"] == 3_400
    assert (context["trigger_at"], context["target_at"]) == (
        math.ceil(3_400 * 0.8),
        int(3_400 * 0.6),
    )
    # The view and the version's tools (`search_history`; the frame's binding reads no records).
    tools = offered_tools(run.session.agent_version.snapshot, reading=False)
    assert context["estimate"] == JsonBytesEstimator().estimate(frame["messages"], tools)
    succeeded, failed = context["compactions"]
    assert succeeded == {
        "revision": 1,
        "covered_seq": 17,
        "journal_seq": None,  # not journaled either
        "before": succeeded["before"],
        "after": succeeded["after"],
        "target_reached": True,
        "calls": succeeded["calls"],
        "outcome": "succeeded",
        "reason": "compacted",
        "stage": "summary",
        # The synthetic frame's records were never journaled, so no range can be named.
        "summarised_ranges": [],
        "masked_ranges": [],
        "identifiers": succeeded["identifiers"],
        "form": succeeded["form"],
        "spent": succeeded["spent"],
        "saved": succeeded["saved"],
        # The synthetic frame's calls were never recorded: no money is known either way.
        "spent_cost": None,
        "saved_cost": None,
        "saved_requests": succeeded["saved_requests"],
        "saved_runs": None,
        "net": None,
    }
    assert set(succeeded["identifiers"]) == {"found", "kept", "added"}
    assert succeeded["after"] < succeeded["before"]
    assert failed["revision"] is None
    assert (failed["outcome"], failed["reason"], failed["target_reached"]) == (
        "failed",
        "empty_summary",
        False,
    )
    assert failed["before"] == failed["after"]


def test_the_estimate_includes_the_tools_the_version_offers(api, space, alice):
    sub = {"name": "helper", "description": "Helps.", "system_prompt": "", "tools": []}
    agent = make_agent(space, alice, tools=["echo", "calculator"], sub_agents=[sub])
    run = ask(open_session(publish(agent, alice), alice), alice)
    frame = compacted_frame()
    run.checkpoint = frame
    run.save()
    estimate = _context(api, run)["estimate"]
    tools = builtin_tools()
    plain = JsonBytesEstimator().estimate(frame["messages"], [])
    with_builtins = JsonBytesEstimator().estimate(
        frame["messages"], [tools["echo"].schema(), tools["calculator"].schema()]
    )
    assert estimate > with_builtins > plain


def test_a_frame_without_an_attempt_log_lists_its_successes(api, run):
    frame = compacted_frame()
    frame["state"]["compaction_log"] = []
    run.checkpoint = frame
    run.save()
    (only,) = _context(api, run)["compactions"]
    assert (only["revision"], only["outcome"], only["covered_seq"]) == (1, "succeeded", 17)


def test_a_legacy_version_compacts_by_characters(api, run, settings):
    # Versions published before context policies existed froze none.
    snapshot = dict(run.session.agent_version.snapshot, context_policy=None)
    legacy = AgentVersion.objects.create(
        agent=run.session.agent, number=99, snapshot=snapshot, model_connection=None
    )
    session = open_session(legacy, run.session.created_by)
    legacy_run = ask(session, run.session.created_by)
    context = _context(api, legacy_run)
    assert context["trigger_at"] == settings.LEGACY_CONTEXT_CHARS + 1
    assert context["effective_budget"] == EFFECTIVE
    # The meter measures in the policy's unit: characters of the view, against the threshold.
    assert (context["unit"], context["ceiling"]) == ("characters", context["trigger_at"])
    frame = compacted_frame()
    frame["binding"].pop("policy")
    legacy_run.checkpoint = frame
    legacy_run.save()
    context = _context(api, legacy_run)
    assert context["estimate"] == view_characters(frame["messages"]) > 0


def test_the_context_measure_is_the_engines(api, run):
    """The API's estimate is what the engine's trigger measured for the same request."""
    run.checkpoint = compacted_frame()
    run.save()
    frame = full_checkpoint(run)
    snapshot = run.session.agent_version.snapshot
    policy, budget, estimator = run_measures(snapshot, frame["binding"])
    measure = measure_context(
        policy=policy,
        budget=budget,
        estimator=estimator,
        messages=frame["messages"],
        tools=offered_tools(snapshot, reading=False),
    )
    context = _context(api, run)
    assert (context["estimate"], context["trigger_at"], context["target_at"]) == (
        measure.size,
        measure.trigger_at,
        measure.target_at,
    )


# --- views -------------------------------------------------------------------------------------


def _view(run, revision, watermark):
    return SessionView.objects.create(
        session=run.session,
        revision=revision,
        watermark=watermark,
        messages=[{"role": "user", "content": "NONCE-secret summary"}],
        user_turns=3 * revision,
        model_steps=5 * revision,
        baseline_user_turns=revision,
        baseline_model_steps=2 * revision,
        run=run,
    )


def test_views_are_listed_by_revision(api, run):
    _view(run, 2, 40)
    _view(run, 1, 17)
    page = api.get(f"/api/v1/sessions/{run.session_id}/views/").json()
    assert page["count"] == 2
    first, second = page["results"]
    assert first == {
        "revision": 1,
        "watermark": 17,
        "run": run.pk,
        "user_turns": 3,
        "model_steps": 5,
        "baselines": {"user_turns": 1, "model_steps": 2},
        "created_at": first["created_at"],
        "revoked": False,
        "revoked_by": None,
        "revoked_at": None,
        "derived_from": None,
        "revoked_by_derivation": None,
    }
    assert (second["revision"], second["watermark"]) == (2, 40)
    assert "NONCE" not in str(page)


# --- model calls -------------------------------------------------------------------------------


def test_model_calls_are_listed_without_their_responses(api, run):
    ModelCall.objects.create(
        run=run,
        purpose="action",
        request_estimate=1_234,
        estimator="bytes",
        reported_prompt_tokens=900,
        estimate_error=(1_234 - 900) / 900,
        response={"message": {"content": "NONCE-reply"}},
        usage={"prompt_tokens": 900, "completion_tokens": 12},
        latency_ms=321,
    )
    ModelCall.objects.create(
        run=run, instance="1.1", purpose="compaction", error="gateway_error: timeout"
    )
    page = api.get(f"/api/v1/runs/{run.pk}/model-calls").json()
    assert page["count"] == 2
    first, second = page["results"]
    assert first == {
        "purpose": "action",
        "instance": "main",
        "request_estimate": 1_234,
        "estimator": "bytes",
        "reported_prompt_tokens": 900,
        "estimate_error": (1_234 - 900) / 900,
        "cached_tokens": None,
        "reported_completion_tokens": None,
        "cost": None,
        "calibration": None,
        "counts": None,
        "usage": {"prompt_tokens": 900, "completion_tokens": 12},
        "latency_ms": 321.0,
        "error": "",
        "discarded": False,
        "cost_incomplete": False,
        "created_at": first["created_at"],
    }
    assert (second["purpose"], second["instance"], second["usage"]) == ("compaction", "1.1", None)
    assert "NONCE" not in str(page)


def test_the_context_and_its_meter_say_how_much_the_tool_schemas_take(api, space, alice):
    version = publish(make_agent(space, alice, tools=["echo", "calculator"]), alice)
    run = ask(open_session(version, alice), alice)
    tools = _context(api, run)["tools"]
    _policy, _budget, estimator = run_measures(version.snapshot)
    # `read_record` among them: offered from the first request (rendering 4).
    schemas = offered_tools(version.snapshot)
    whole = estimator.upper_bound([], schemas)
    assert tools == {
        "size": whole - estimator.upper_bound([], []),
        "unit": "bytes",
        "share": round(100 * tools["size"] / whole),
    }
    assert 0 < tools["share"] <= 100
    browser = Client()
    browser.force_login(alice)
    meter = browser.get(f"/runs/{run.pk}/meter/")
    assert meter.status_code == 200
    assert f"tool schemas: <strong>{tools['share']}%</strong>" in meter.content.decode()
