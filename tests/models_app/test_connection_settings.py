"""Thinking settings and operator-entered prices on model connections, through the API too."""

from __future__ import annotations

import datetime

import pytest

from models_app.services.connections import connection_create, connection_update
from tests.api.factories import client_for
from tests.models_app.conftest import SECRET_KEY
from tests.models_app.test_services import refused

pytestmark = pytest.mark.django_db

PROXY = "https://llm.example.com/v1"
PRICES = {"input": "0.40", "cached_input": "0.1", "output": 1.6, "currency": "EUR"}


def create(user, space, **fields):
    fields.setdefault("name", "main")
    fields.setdefault("api_key", SECRET_KEY)
    fields.setdefault("model_id", "deepseek-flash")
    return connection_create(user=user, space=space, **fields)


def test_a_deepseek_connection_keeps_its_thinking_settings(alice, space):
    connection = create(
        alice, space, provider="deepseek", thinking="enabled", reasoning_effort="max"
    )
    assert (connection.thinking, connection.reasoning_effort) == ("enabled", "max")
    connection = connection_update(user=alice, connection=connection, name="renamed")
    assert (connection.thinking, connection.reasoning_effort) == ("enabled", "max")
    connection = connection_update(
        user=alice, connection=connection, thinking="disabled", reasoning_effort=""
    )
    assert (connection.thinking, connection.reasoning_effort) == ("disabled", "")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"provider": "openai", "thinking": "enabled"}, "thinking"),
        ({"provider": "openai_compatible", "base_url": PROXY, "reasoning_effort": "low"}, None),
        ({"provider": "deepseek", "thinking": "sometimes"}, "thinking"),
        ({"provider": "deepseek", "reasoning_effort": "medium"}, "reasoning_effort"),
        ({"provider": "deepseek", "thinking": "disabled", "reasoning_effort": "high"}, None),
    ],
)
def test_settings_deepseek_does_not_take_are_refused(alice, space, fields, field):
    refused(field or "reasoning_effort", create, alice, space, **fields)


def test_a_custom_endpoint_carries_manual_prices_dated_when_entered(alice, space):
    connection = create(alice, space, provider="openai_compatible", base_url=PROXY, prices=PRICES)
    today = datetime.date.today().isoformat()
    assert connection.prices == {
        "currency": "EUR",
        "input": "0.4",
        "cached_input": "0.1",
        "output": "1.6",
        "entered_on": today,
    }
    kept = connection_update(user=alice, connection=connection, name="renamed")
    assert kept.prices == connection.prices
    cleared = connection_update(user=alice, connection=kept, prices=None)
    assert cleared.prices is None


def test_a_new_model_on_the_endpoint_drops_the_old_prices(alice, space):
    connection = create(alice, space, provider="openai_compatible", base_url=PROXY, prices=PRICES)
    moved = connection_update(user=alice, connection=connection, model_id="another-model")
    assert moved.prices is None


@pytest.mark.parametrize(
    ("fields", "prices"),
    [
        ({"provider": "deepseek"}, PRICES),  # the official endpoint: prices from the manifest
        ({"provider": "openai", "base_url": "https://api.openai.com/v1"}, PRICES),
        ({"provider": "openai_compatible", "base_url": PROXY}, {**PRICES, "currency": "euro"}),
        ({"provider": "openai_compatible", "base_url": PROXY}, {**PRICES, "input": "-1"}),
        ({"provider": "openai_compatible", "base_url": PROXY}, {**PRICES, "output": "lots"}),
        ({"provider": "openai_compatible", "base_url": PROXY}, {**PRICES, "discount": "1"}),
        ({"provider": "openai_compatible", "base_url": PROXY}, {"currency": "USD"}),
        ({"provider": "openai_compatible", "base_url": PROXY}, ["0.4", "1.6"]),
    ],
)
def test_bad_or_misplaced_prices_are_refused(alice, space, fields, prices):
    refused("prices", create, alice, space, prices=prices, **fields)


def test_the_api_shows_manual_prices_and_thinking_and_never_500s(alice, space):
    api = client_for(alice)
    body = {
        "space": space.pk,
        "name": "proxy",
        "provider": "openai_compatible",
        "base_url": PROXY,
        "model_id": "qwen-72b",
        "prices": PRICES,
    }
    response = api.post("/api/v1/model-connections/", body, format="json")
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["prices"]["source"] == "manual"
    assert data["prices"]["entered_on"] == datetime.date.today().isoformat()
    assert (data["thinking"], data["reasoning_effort"], data["retired"]) == ("", "", None)
    bad = api.patch(
        f"/api/v1/model-connections/{data['id']}/", {"prices": {"input": []}}, format="json"
    )
    assert bad.status_code == 400 and "prices" in bad.json()
    bad = api.patch(
        f"/api/v1/model-connections/{data['id']}/", {"thinking": "enabled"}, format="json"
    )
    assert bad.status_code == 400 and "thinking" in bad.json()


def test_the_thinking_floor_applies_only_while_thinking_is_on(alice, space):
    from agentloom.providers import THINKING_OUTPUT_FLOOR

    api = client_for(alice)
    body = {
        "space": space.pk,
        "name": "no thinking",
        "provider": "deepseek",
        "api_key": SECRET_KEY,
        "model_id": "deepseek-chat",
        "thinking": "disabled",
        "max_output_tokens": 4_096,
    }
    response = api.post("/api/v1/model-connections/", body, format="json")
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["max_output_tokens"] == 4_096
    # Thinking switched back on: a chosen small limit is refused, naming the field.
    on = api.patch(
        f"/api/v1/model-connections/{data['id']}/",
        {"thinking": "enabled", "max_output_tokens": 4_096},
        format="json",
    )
    assert on.status_code == 400 and str(THINKING_OUTPUT_FLOOR) in on.json()["max_output_tokens"][0]
    # Switched on without a limit sent, the kept one rises to the floor as a default would.
    on = api.patch(
        f"/api/v1/model-connections/{data['id']}/", {"thinking": "enabled"}, format="json"
    )
    assert on.status_code == 200 and on.json()["max_output_tokens"] == THINKING_OUTPUT_FLOOR
    # The provider's default thinks, so it keeps the floor too.
    refused("max_output_tokens", create, alice, space, provider="deepseek", max_output_tokens=4_096)
