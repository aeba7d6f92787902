"""Which estimator a connection measures with: the manifest's tokenizer, bytes, or a hand pick."""

from __future__ import annotations

import pytest

from agentloom.errors import InvalidInput
from agentloom.providers import model_defaults
from context_app.services.agents import agent_publish
from models_app.services.connections import connection_create, connection_update
from tests.factories import make_agent
from tests.models_app.conftest import SECRET_KEY

pytestmark = pytest.mark.django_db

OPENAI = "https://api.openai.com/v1"


def create(user, space, **fields):
    fields.setdefault("name", "main")
    fields.setdefault("api_key", SECRET_KEY)
    return connection_create(user=user, space=space, **fields)


@pytest.mark.parametrize(
    ("provider", "model_id", "estimator"),
    [
        ("openai", "gpt-4o", "o200k"),
        ("openai", "gpt-4.1-mini", "o200k"),
        ("openai", "o3", "o200k"),
        ("openai", "gpt-4", "bytes"),  # cl100k: no estimator counts it exactly
        ("deepseek", "deepseek-chat", "deepseek"),
        ("deepseek", "deepseek-reasoner", "deepseek"),
        ("openai", "gpt-4o-2099-01-01", "bytes"),  # a near miss: no prefix matching
        ("openai", "my-gpt-4o-finetune", "bytes"),
    ],
)
def test_the_manifest_chooses_the_estimator_of_exact_official_models(
    alice, space, provider, model_id, estimator
):
    connection = create(alice, space, provider=provider, model_id=model_id)
    assert (connection.estimator, connection.estimator_source) == (estimator, "auto")


def test_a_custom_endpoint_serving_a_known_name_is_measured_in_bytes(alice, space):
    connection = create(
        alice,
        space,
        provider="openai_compatible",
        base_url="https://llm.example.com/v1",
        model_id="deepseek-chat",
    )
    assert connection.estimator == "bytes"
    assert model_defaults(
        "openai_compatible", "https://llm.example.com/v1", "gpt-4o"
    ).estimator == ("bytes")


def test_the_local_demo_model_is_measured_in_bytes(alice, space):
    connection = create(alice, space, provider="local", api_key="")
    assert (connection.estimator, connection.estimator_source) == ("bytes", "auto")


def test_a_hand_picked_estimator_is_manual_and_survives_other_edits(alice, space):
    connection = create(alice, space, provider="openai", model_id="gpt-4", estimator="o200k")
    assert (connection.estimator, connection.estimator_source) == ("o200k", "manual")
    connection = connection_update(user=alice, connection=connection, name="renamed")
    assert (connection.estimator, connection.estimator_source) == ("o200k", "manual")
    connection = connection_update(user=alice, connection=connection, estimator_source="auto")
    assert (connection.estimator, connection.estimator_source) == ("bytes", "auto")


def test_an_automatic_estimator_follows_a_new_model(alice, space):
    connection = create(alice, space, provider="openai", model_id="gpt-4")
    connection = connection_update(user=alice, connection=connection, model_id="gpt-4o")
    assert (connection.estimator, connection.estimator_source) == ("o200k", "auto")


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"estimator": "cl100k"}, "estimator"),
        ({"estimator": 3}, "estimator"),
        ({"estimator_source": "guess"}, "estimator_source"),
        ({"estimator": "o200k", "estimator_source": "auto"}, "estimator_source"),
        ({"estimator_source": "manual"}, "estimator"),
    ],
)
def test_bad_estimator_input_is_refused_naming_its_field(alice, space, fields, named):
    with pytest.raises(InvalidInput) as caught:
        create(alice, space, provider="openai", model_id="gpt-4o", **fields)
    assert caught.value.field == named


def test_publishing_freezes_the_connections_estimator(alice, space):
    connection = create(alice, space, provider="openai", model_id="gpt-4o")
    agent = make_agent(space, alice, connection=connection)
    first = agent_publish(user=alice, agent=agent)
    assert first.snapshot["estimator"]["module_id"].startswith("agentloom.engine.estimators.")
    connection_update(user=alice, connection=connection, estimator="bytes")
    second = agent_publish(user=alice, agent=agent)
    # The old version keeps what it was published with; the new one measures in bytes.
    first.refresh_from_db()
    assert first.snapshot["estimator"]["module_id"] != second.snapshot["estimator"]["module_id"]
    assert second.snapshot["estimator"]["module_id"].endswith("JsonBytesEstimator/1")
