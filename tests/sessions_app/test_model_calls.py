"""Every model call records its estimate beside what the provider reported, cache hits included."""

from __future__ import annotations

import pytest

from agentloom.engine import (
    ModelGateway,
    cached_prompt_tokens,
    estimate_error,
    reported_prompt_tokens,
)
from agentloom.engine.testing import text_response
from context_app import engine_adapter
from sessions_app.models import ModelCall
from sessions_app.selectors.context import run_context
from tests.factories import ask

pytestmark = pytest.mark.django_db

OPENAI_USAGE = {
    "prompt_tokens": 200,
    "completion_tokens": 5,
    "total_tokens": 205,
    "prompt_tokens_details": {"cached_tokens": 128},
}
DEEPSEEK_USAGE = {
    "prompt_tokens": 300,
    "completion_tokens": 5,
    "total_tokens": 305,
    "prompt_cache_hit_tokens": 256,
    "prompt_cache_miss_tokens": 44,
}


class UsageGateway(ModelGateway):
    provider, model_id = "double", "local-demo"

    def __init__(self, usage):
        self.usage = usage
        self.requests = []

    def complete(self, request):
        self.requests.append(request)
        return text_response("done", usage=self.usage)


@pytest.fixture
def usage_gateway():
    def install(usage):
        engine_adapter.set_gateway_factory(lambda version, connection: UsageGateway(usage))

    yield install
    engine_adapter.set_gateway_factory(None)


@pytest.mark.parametrize(("usage", "cached"), [(OPENAI_USAGE, 128), (DEEPSEEK_USAGE, 256)])
def test_reported_and_cached_tokens_are_read_from_both_usage_shapes(
    alice, make_demo_session, usage_gateway, usage, cached
):
    usage_gateway(usage)
    run = ask(make_demo_session(), alice, "hello")
    call = ModelCall.objects.get(run=run)
    assert call.estimator == "bytes"
    assert call.reported_prompt_tokens == usage["prompt_tokens"]
    assert call.cached_tokens == cached
    assert call.estimate_error == pytest.approx(
        (call.request_estimate - usage["prompt_tokens"]) / usage["prompt_tokens"]
    )
    assert call.latency_ms > 0
    context = run_context(run)
    assert context["estimator"] == "bytes"
    assert context["last_reported"]["tokens"] == usage["prompt_tokens"]


def test_each_session_s_calls_carry_its_own_cache_key(alice, make_demo_session):
    gateway = UsageGateway(OPENAI_USAGE)
    engine_adapter.set_gateway_factory(lambda version, connection: gateway)
    try:
        first, second = make_demo_session(), make_demo_session()
        ask(first, alice, "hello")
        ask(first, alice, "again")
        ask(second, alice, "hello")
    finally:
        engine_adapter.set_gateway_factory(None)
    keys = [request.cache_key for request in gateway.requests]
    assert keys == [f"agentloom-session-{first.pk}"] * 2 + [f"agentloom-session-{second.pk}"]


def test_a_call_without_usage_reports_nothing_rather_than_zero(
    alice, make_demo_session, usage_gateway
):
    usage_gateway(None)
    run = ask(make_demo_session(), alice, "hello")
    call = ModelCall.objects.get(run=run)
    assert (call.reported_prompt_tokens, call.cached_tokens, call.estimate_error) == (None,) * 3
    assert run_context(run)["last_reported"] is None


def test_usage_parsing_refuses_junk():
    assert reported_prompt_tokens({"prompt_tokens": -1}) is None
    assert reported_prompt_tokens({"prompt_tokens": True}) is None
    assert (
        reported_prompt_tokens({"prompt_cache_hit_tokens": 3, "prompt_cache_miss_tokens": 4}) == 7
    )
    assert cached_prompt_tokens({"prompt_tokens_details": {"cached_tokens": "9"}}) is None
    assert estimate_error(500, 0) is None
    assert estimate_error(500, 100) == 4.0


def test_the_model_calls_api_lists_the_new_fields(alice, make_demo_session, usage_gateway):
    from rest_framework.test import APIClient

    usage_gateway(OPENAI_USAGE)
    run = ask(make_demo_session(), alice, "hello")
    client = APIClient()
    client.force_authenticate(alice)
    body = client.get(f"/api/v1/runs/{run.pk}/model-calls").json()
    item = body["results"][0] if isinstance(body, dict) else body[0]
    assert item["estimator"] == "bytes"
    assert item["reported_prompt_tokens"] == 200
    assert item["cached_tokens"] == 128
    assert isinstance(item["estimate_error"], float)
    assert item["latency_ms"] > 0


def test_new_byte_versions_calibrate_from_the_connections_recent_calls(
    alice, make_demo_session, usage_gateway
):
    usage_gateway(DEEPSEEK_USAGE)
    session = make_demo_session(provider="openai_compatible")
    assert session.agent_version.snapshot["calibration"] == {"samples": 5}
    first = ask(session, alice, "hello")
    learned = ModelCall.objects.get(run=first)
    assert learned.calibration["ratio"] is None  # nothing learned yet: plain bytes
    second = ask(session, alice, "hello again")
    call = ModelCall.objects.get(run=second)
    expected = DEEPSEEK_USAGE["prompt_tokens"] / learned.calibration["raw"]
    assert call.calibration["ratio"] == pytest.approx(expected)
    assert call.request_estimate == round(expected * call.calibration["raw"])
    assert second.checkpoint["state"]["calibration"]["start"] == pytest.approx(expected)


def test_versions_published_before_calibration_keep_plain_bytes(
    alice, make_demo_session, usage_gateway, monkeypatch
):
    from context_app.services import agents as services

    frozen = services.version_snapshot

    def as_before(agent):
        snapshot = frozen(agent)
        del snapshot["calibration"]  # what versions published before calibration froze
        return snapshot

    monkeypatch.setattr(services, "version_snapshot", as_before)
    usage_gateway(OPENAI_USAGE)
    session = make_demo_session(provider="openai_compatible")
    ask(session, alice, "hello")
    run = ask(session, alice, "hello again")
    call = ModelCall.objects.get(run=run)
    assert call.calibration is None
    assert "calibration" not in run.checkpoint["binding"]
    raw = ModelCall.objects.filter(run__session=session).first()
    assert raw.request_estimate > OPENAI_USAGE["prompt_tokens"]  # bytes, not the reported size


def test_the_demo_model_is_not_calibrated(alice, make_demo_session):
    assert make_demo_session().agent_version.snapshot["calibration"] is None


def test_a_calibrated_run_replays_exactly(alice, make_demo_session, usage_gateway):
    from sessions_app.services.replay import replay_run

    usage_gateway(DEEPSEEK_USAGE)
    session = make_demo_session(provider="openai_compatible")
    ask(session, alice, "hello")
    run = ask(session, alice, "hello again")
    assert ModelCall.objects.get(run=run).calibration["ratio"] is not None
    report = replay_run(run)
    assert report.ok, "\n".join(report.differences)
