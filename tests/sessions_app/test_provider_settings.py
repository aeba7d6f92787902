"""Provider settings at the application level: thinking frozen at publish, retired models,
manual and time-of-day prices copied onto each call."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from django.utils import timezone

from agentloom.engine import ModelGateway, ModelRequest
from agentloom.engine.testing import text_response
from agentloom.errors import InvalidInput
from context_app import engine_adapter
from context_app.services.agents import agent_create, agent_publish, version_snapshot
from models_app.services.connections import connection_update
from sessions_app.models import ModelCall, Run
from sessions_app.services.runs import session_create
from tests.api.factories import client_for
from tests.factories import ask, make_connection, make_space, make_version

pytestmark = pytest.mark.django_db

OFFICIAL = "https://api.deepseek.com"
PROXY = "https://llm-proxy.example.com/v1"
USAGE = {
    "prompt_tokens": 10_000,
    "completion_tokens": 1_000,
    "prompt_cache_hit_tokens": 8_000,
    "prompt_cache_miss_tokens": 2_000,
}


class UsageGateway(ModelGateway):
    provider, model_id = "double", "double"

    def complete(self, request):
        return text_response("done", usage=USAGE)


@pytest.fixture
def usage_gateway():
    engine_adapter.set_gateway_factory(lambda version, connection: UsageGateway())
    yield
    engine_adapter.set_gateway_factory(None)


def publish(user, connection):
    agent = agent_create(
        user=user,
        space=connection.space,
        name=f"agent-{connection.pk}",
        system_prompt="You are brief.",
        model_connection=connection.pk,
        tools=[],
    )
    return agent_publish(user=user, agent=agent)


def deepseek_connection(user, *, model_id="deepseek-flash", base_url=OFFICIAL, **fields):
    space = make_space(admin=user)
    return make_connection(
        space,
        provider="deepseek",
        base_url=base_url,
        api_key="sk-deepseek-test-key",
        model_id=model_id,
        context_window=1_000_000,
        max_output_tokens=4_096,
        **fields,
    )


# --- 1. thinking settings frozen at publish ----------------------------------------------------


def test_thinking_settings_are_frozen_at_publish(alice):
    connection = deepseek_connection(alice, thinking="disabled")
    first = publish(alice, connection)
    connection_update(user=alice, connection=connection, thinking="enabled", reasoning_effort="max")
    second = publish(alice, connection)
    request = ModelRequest(purpose="action", messages=[{"role": "user", "content": "hi"}])
    old = engine_adapter.gateway_for(first)
    new = engine_adapter.gateway_for(second)
    assert old.payload(request)["thinking"] == {"type": "disabled"}
    assert "reasoning_effort" not in old.payload(request)
    assert (new.payload(request)["thinking"], new.payload(request)["reasoning_effort"]) == (
        {"type": "enabled"},
        "max",
    )


def test_versions_published_before_the_settings_send_deepseeks_default(alice):
    connection = deepseek_connection(alice, thinking="enabled")
    version = publish(alice, connection)
    snapshot = dict(version.snapshot)
    del snapshot["thinking"]
    legacy = make_version(version.agent, snapshot=snapshot)
    gateway = engine_adapter.gateway_for(legacy)
    body = gateway.payload(ModelRequest(purpose="action", messages=[]))
    assert "thinking" not in body and "reasoning_effort" not in body


# --- 4. retired model IDs ----------------------------------------------------------------------


def test_a_retired_id_is_refused_for_a_new_version_on_the_official_endpoint(alice):
    connection = deepseek_connection(alice, model_id="deepseek-chat")
    with pytest.raises(InvalidInput) as caught:
        publish(alice, connection)
    assert caught.value.field == "model_connection"
    assert "deepseek-flash (thinking disabled)" in caught.value.detail
    assert "2026-07-24" in caught.value.detail


@pytest.mark.parametrize("provider", ["deepseek", "openai_compatible"])
def test_a_proxy_serving_a_retired_name_is_accepted(alice, provider):
    connection = deepseek_connection(alice, model_id="deepseek-reasoner", base_url=PROXY)
    connection.provider = provider
    connection.save()
    assert publish(alice, connection).number == 1


def test_a_version_published_on_a_retired_id_fails_its_run_naming_the_fix(alice):
    connection = deepseek_connection(alice, model_id="deepseek-chat")
    agent = agent_create(
        user=alice,
        space=connection.space,
        name="old",
        system_prompt="x",
        model_connection=connection.pk,
        tools=[],
    )
    # Published before the retirement (the snapshot is as a publish then wrote it).
    version = make_version(agent, snapshot=version_snapshot(agent))
    session = session_create(user=alice, agent_version=version)
    run = ask(session, alice, "hello")
    assert run.status == Run.Status.FAILED
    assert "retired the model ID deepseek-chat" in run.error
    assert "publish a new version" in run.error and "new session" in run.error


def test_the_connection_api_marks_a_retired_id(alice):
    connection = deepseek_connection(alice, model_id="deepseek-reasoner")
    data = client_for(alice).get(f"/api/v1/model-connections/{connection.pk}/").json()
    assert data["retired"]["replacement"] == "deepseek-flash (thinking enabled)"


# --- 3. and 5. prices copied onto each call ---------------------------------------------------


def test_manual_prices_are_copied_onto_each_call(alice, usage_gateway):
    space = make_space(admin=alice)
    connection = make_connection(
        space,
        provider="openai_compatible",
        base_url=PROXY,
        model_id="qwen-72b",
        prices={
            "currency": "EUR",
            "input": "1",
            "cached_input": "0.1",
            "output": "4",
            "entered_on": "2026-11-20",
        },
    )
    session = session_create(user=alice, agent_version=publish(alice, connection))
    run = ask(session, alice, "hello")
    call = ModelCall.objects.get(run=run)
    assert (call.price_source, call.price_verified_on) == ("manual", datetime.date(2026, 11, 20))
    # 2,000 x 1 + 8,000 x 0.1 + 1,000 x 4, per million tokens
    assert call.cost == Decimal("0.0068")
    connection.prices = None
    connection.save()
    assert ModelCall.objects.get(pk=call.pk).cost == Decimal("0.0068")
    (listed,) = client_for(alice).get(f"/api/v1/runs/{run.pk}/model-calls").json()["results"]
    assert listed["cost"]["price_source"] == "manual"
    assert listed["cost"]["price_date"] == "2026-11-20"


def test_a_custom_endpoint_without_prices_has_no_cost(alice, usage_gateway):
    space = make_space(admin=alice)
    connection = make_connection(
        space, provider="openai_compatible", base_url=PROXY, model_id="qwen-72b"
    )
    session = session_create(user=alice, agent_version=publish(alice, connection))
    call = ModelCall.objects.get(run=ask(session, alice, "hello"))
    assert call.cost is None and call.price_source == ""


@pytest.mark.parametrize(
    ("beijing", "band", "cost"),
    [
        # 2,000 x 0.3 + 8,000 x 0.006 + 1,000 x 1.2, per million tokens, and half off-peak
        ("2026-12-01T10:00:00", "peak", Decimal("0.001848")),
        ("2026-12-05T10:00:00", "off_peak", Decimal("0.000924")),
    ],
)
def test_the_schedule_in_force_at_the_calls_start_is_copied(
    alice, usage_gateway, monkeypatch, beijing, band, cost
):
    start = datetime.datetime.fromisoformat(beijing + "+08:00")
    monkeypatch.setattr(timezone, "now", lambda: start)
    session = session_create(user=alice, agent_version=publish(alice, deepseek_connection(alice)))
    call = ModelCall.objects.get(run=ask(session, alice, "hello"))
    assert (call.price_source, call.price_band, call.price_currency) == ("manifest", band, "USD")
    assert call.cached_tokens == 8_000
    assert call.cost == cost


def test_the_context_page_names_the_band_of_a_calls_price(alice, usage_gateway, monkeypatch):
    from django.test import Client
    from django.urls import reverse

    start = datetime.datetime.fromisoformat("2026-12-01T10:00:00+08:00")
    monkeypatch.setattr(timezone, "now", lambda: start)
    session = session_create(user=alice, agent_version=publish(alice, deepseek_connection(alice)))
    run = ask(session, alice, "hello")
    browser = Client()
    browser.force_login(alice)
    page = browser.get(reverse("console-run-context", args=[run.pk])).content.decode()
    assert '<td class="nowrap call-cost">0.001848 USD (peak)</td>' in page
