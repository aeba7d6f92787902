"""Writes on model connections: defaults, window sources, budgets, keys, access and deletion."""

from __future__ import annotations

import datetime

import pytest
from django.db import connection as db_connection

from agentloom.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from models_app.models import ModelConnection
from models_app.services.connections import connection_create, connection_delete, connection_update
from tests.factories import make_agent, make_connection, make_version
from tests.models_app.conftest import SECRET_KEY

pytestmark = pytest.mark.django_db

OPENAI = "https://api.openai.com/v1"
PROXY = "https://llm.example.com/v1"


def create(user, space, **fields):
    fields.setdefault("name", "main")
    return connection_create(user=user, space=space, **fields)


def refused(field: str, call, *args, **kwargs) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        call(*args, **kwargs)
    assert caught.value.field == field, caught.value.as_json()
    return caught.value


# --- defaults without calling the provider -----------------------------------------------------


def test_openai_defaults_come_from_the_manifest_without_calling_the_provider(alice, space):
    connection = create(alice, space, provider="openai", api_key=SECRET_KEY, model_id="gpt-4o")
    assert connection.base_url == OPENAI
    assert connection.context_window == 128_000
    assert connection.max_output_cap == 16_384
    assert connection.max_output_tokens == 4_096
    assert connection.safety_margin_tokens == 1_024
    assert connection.window_source == "official_manifest"
    assert connection.source_url.startswith("https://platform.openai.com/")
    assert connection.verified_on == datetime.date(2026, 11, 30)
    assert connection.effective_input_budget == 128_000 - 4_096 - 1_024


def test_defaults_never_call_the_provider(alice, space, monkeypatch):
    import httpx

    def refuse(*args, **kwargs):
        raise AssertionError("a connection write called a provider")

    monkeypatch.setattr(httpx.Client, "send", refuse)
    monkeypatch.setattr("socket.getaddrinfo", refuse)
    create(alice, space, provider="openai", api_key=SECRET_KEY, model_id="gpt-4.1")
    create(alice, space, name="p", provider="openai_compatible", base_url=PROXY, model_id="m")


def test_deepseek_defaults_to_its_official_url(alice, space):
    connection = create(
        alice, space, provider="deepseek", api_key=SECRET_KEY, model_id="deepseek-chat"
    )
    assert connection.base_url == "https://api.deepseek.com"
    assert (connection.window_source, connection.context_window) == ("official_manifest", 1_000_000)


def test_a_custom_endpoint_never_takes_the_manifest(alice, space):
    connection = create(
        alice, space, provider="openai_compatible", base_url=PROXY, model_id="gpt-4o"
    )
    assert connection.window_source == "platform_default"
    assert connection.context_window == 32_768
    assert connection.max_output_cap is None
    assert (connection.source_url, connection.verified_on) == ("", None)


def test_local_is_the_demo_model_with_no_url_or_key(alice, space):
    connection = create(alice, space, provider="local", base_url="http://x.test", api_key="k")
    assert (connection.base_url, connection.api_key, connection.model_id) == ("", "", "local-demo")
    assert connection.window_source == "platform_default"
    refused("model_id", create, alice, space, name="other", provider="local", model_id="gpt-4o")


def test_the_base_url_is_normalised(alice, space):
    connection = create(
        alice,
        space,
        provider="openai_compatible",
        base_url=" HTTPS://LLM.Example.com:443/v1/ ",
        model_id="m",
    )
    assert connection.base_url == "https://llm.example.com/v1"


# --- window sources and budgets ----------------------------------------------------------------


def test_values_sent_without_a_source_are_manual(alice, space):
    connection = create(
        alice,
        space,
        provider="openai",
        api_key=SECRET_KEY,
        model_id="gpt-4o",
        context_window=100_000,
    )
    assert connection.window_source == "manual"
    assert (connection.context_window, connection.max_output_cap) == (100_000, 16_384)
    assert (connection.source_url, connection.verified_on) == ("", None)


def test_values_sent_with_their_source_keep_it(alice, space):
    connection = create(
        alice,
        space,
        provider="openai_compatible",
        base_url=PROXY,
        model_id="m",
        context_window=65_536,
        max_output_tokens=4_096,
        max_output_cap=8_192,
        window_source="provider",
        source_url=PROXY + "/models",
        verified_on="2026-12-01",
    )
    assert connection.window_source == "provider"
    assert connection.source_url == PROXY + "/models"
    assert connection.verified_on == datetime.date(2026, 12, 1)


def test_a_source_without_its_values_is_refused(alice, space):
    refused(
        "window_source",
        create,
        alice,
        space,
        provider="openai_compatible",
        base_url=PROXY,
        model_id="m",
        window_source="official_manifest",
    )


def test_max_output_is_clamped_to_the_cap_when_filled_in(alice, space):
    connection = create(
        alice,
        space,
        provider="openai_compatible",
        base_url=PROXY,
        model_id="m",
        max_output_cap=2_000,
    )
    assert (connection.max_output_tokens, connection.window_source) == (2_000, "manual")


def test_max_output_above_the_cap_is_refused(alice, space):
    error = refused(
        "max_output_tokens",
        create,
        alice,
        space,
        provider="openai",
        api_key=SECRET_KEY,
        model_id="gpt-4o",
        max_output_tokens=20_000,
    )
    assert "16384" in error.detail


def test_a_cap_above_the_window_is_refused(alice, space):
    refused(
        "max_output_cap",
        create,
        alice,
        space,
        provider="openai_compatible",
        base_url=PROXY,
        model_id="m",
        context_window=8_000,
        max_output_cap=9_000,
    )


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"context_window": 2_000}, "context_window"),
        ({"context_window": 10_000, "max_output_tokens": 9_000}, "context_window"),
        ({"max_output_tokens": 32_000}, "max_output_tokens"),
        ({"safety_margin_tokens": 40_000}, "safety_margin_tokens"),
    ],
)
def test_a_budget_that_is_not_positive_is_refused(alice, space, fields, named):
    error = refused(
        named,
        create,
        alice,
        space,
        provider="openai_compatible",
        base_url=PROXY,
        model_id="m",
        **fields,
    )
    assert "effective input budget" in error.detail


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("context_window", "128000"),
        ("context_window", 1.5),
        ("context_window", True),
        ("context_window", -1),
        ("context_window", 0),
        ("max_output_tokens", [4096]),
        ("max_output_tokens", 0),
        ("max_output_cap", {"x": 1}),
        ("safety_margin_tokens", -5),
        ("context_window", 10**12),
        ("name", 7),
        ("name", "   "),
        ("name", "x" * 121),
        ("provider", "anthropic"),
        ("provider", ["openai"]),
        ("base_url", 5),
        ("base_url", "ftp://files.example.com"),
        ("base_url", "https://user:pw@llm.example.com/v1"),
        ("base_url", "https://llm.example.com/v1?key=1"),
        ("base_url", "not a url"),
        ("api_key", 12345),
        ("api_key", "sk-with\nnewline"),
        ("api_key", "sk-ключ"),
        ("model_id", 4),
        ("model_id", "text-embedding-3-small"),
        ("window_source", "guess"),
        ("source_url", "javascript:alert(1)"),
        ("source_url", 3),
        ("verified_on", "yesterday"),
        ("verified_on", 20261130),
        ("colour", "blue"),
    ],
)
def test_each_bad_input_is_refused_naming_its_field(alice, space, field, value):
    fields = {"provider": "openai_compatible", "base_url": PROXY, "model_id": "m", field: value}
    refused(field, create, alice, space, **fields)


def test_required_fields(alice, space):
    refused("provider", create, alice, space, model_id="m")
    refused("base_url", create, alice, space, provider="openai_compatible", model_id="m")
    refused("model_id", create, alice, space, provider="openai_compatible", base_url=PROXY)
    refused("api_key", create, alice, space, provider="openai", model_id="gpt-4o")
    refused("name", connection_create, user=alice, space=space, provider="local")


def test_names_are_unique_in_a_space(alice, space):
    create(alice, space, provider="local")
    refused("name", create, alice, space, provider="local")


def test_metadata_and_refused_literal_hosts_are_not_saved(alice, space, settings):
    for url in ("http://169.254.169.254/v1", "http://metadata.google.internal/v1"):
        refused(
            "base_url",
            create,
            alice,
            space,
            provider="openai_compatible",
            base_url=url,
            model_id="m",
        )
    settings.ALLOW_PRIVATE_MODEL_HOSTS = False
    refused(
        "base_url",
        create,
        alice,
        space,
        provider="openai_compatible",
        base_url="http://127.0.0.1:8000/v1",
        model_id="m",
    )
    settings.ALLOW_PRIVATE_MODEL_HOSTS = True
    assert (
        create(
            alice,
            space,
            provider="openai_compatible",
            base_url="http://127.0.0.1:8000/v1",
            model_id="m",
        ).base_url
        == "http://127.0.0.1:8000/v1"
    )


def test_a_single_label_host_is_accepted(alice, space):
    # In-cluster model servers are often reached by a bare service name.
    connection = create(
        alice, space, provider="openai_compatible", base_url="http://vllm:8000/v1", model_id="m"
    )
    assert connection.base_url == "http://vllm:8000/v1"


# --- the key -----------------------------------------------------------------------------------


def test_the_key_is_stored_encrypted(alice, space):
    connection = create(
        alice, space, provider="openai", api_key=f"  {SECRET_KEY} ", model_id="gpt-4o"
    )
    assert ModelConnection.objects.get(pk=connection.pk).api_key == SECRET_KEY
    with db_connection.cursor() as cursor:
        cursor.execute(
            "SELECT api_key FROM models_app_modelconnection WHERE id = %s", [connection.pk]
        )
        (raw,) = cursor.fetchone()
    raw = bytes(raw) if not isinstance(raw, str) else raw.encode()
    assert SECRET_KEY.encode() not in raw


def test_a_blank_key_keeps_the_stored_one_while_the_endpoint_stays(alice, space):
    connection = create(alice, space, provider="openai", api_key=SECRET_KEY, model_id="gpt-4o")
    updated = connection_update(user=alice, connection=connection, api_key="", name="renamed")
    assert (updated.api_key, updated.name) == (SECRET_KEY, "renamed")
    updated = connection_update(user=alice, connection=connection, model_id="gpt-4.1")
    assert updated.api_key == SECRET_KEY
    # The same URL spelled differently is the same endpoint.
    updated = connection_update(
        user=alice, connection=connection, base_url="https://API.openai.com/v1/"
    )
    assert updated.api_key == SECRET_KEY


@pytest.mark.parametrize(
    "changes",
    [
        {"base_url": "https://evil.example.com/v1"},
        {"base_url": "https://evil.example.com/v1", "api_key": ""},
        {"provider": "openai_compatible", "base_url": OPENAI},
        {"provider": "deepseek", "model_id": "deepseek-chat"},
    ],
)
def test_a_changed_endpoint_needs_the_key_again(alice, space, changes):
    connection = create(alice, space, provider="openai", api_key=SECRET_KEY, model_id="gpt-4o")
    error = refused("api_key", connection_update, user=alice, connection=connection, **changes)
    assert SECRET_KEY not in error.detail
    assert ModelConnection.objects.get(pk=connection.pk).base_url == OPENAI


def test_a_changed_endpoint_with_a_new_key_is_accepted(alice, space):
    connection = create(alice, space, provider="openai", api_key=SECRET_KEY, model_id="gpt-4o")
    updated = connection_update(
        user=alice,
        connection=connection,
        provider="openai_compatible",
        base_url=PROXY,
        api_key="sk-new",
    )
    assert (updated.api_key, updated.base_url) == ("sk-new", PROXY)
    # Another model at a custom endpoint: the manifest window no longer applies.
    assert (updated.window_source, updated.context_window) == ("platform_default", 32_768)


def test_a_new_provider_keeps_a_custom_url_but_not_an_official_one(alice, space):
    proxy = create(alice, space, provider="openai_compatible", base_url=PROXY, model_id="m")
    updated = connection_update(user=alice, connection=proxy, provider="openai", api_key="sk-1")
    assert updated.base_url == PROXY
    official = create(alice, space, name="o", provider="openai", api_key="sk-1", model_id="gpt-4o")
    updated = connection_update(
        user=alice,
        connection=official,
        provider="deepseek",
        api_key="sk-2",
        model_id="deepseek-chat",
    )
    assert updated.base_url == "https://api.deepseek.com"


def test_switching_to_local_drops_the_key(alice, space):
    connection = create(alice, space, provider="openai", api_key=SECRET_KEY, model_id="gpt-4o")
    updated = connection_update(user=alice, connection=connection, provider="local")
    assert (updated.api_key, updated.model_id, updated.base_url) == ("", "local-demo", "")


# --- updates of the window ---------------------------------------------------------------------


def test_an_update_keeps_the_window_while_the_model_stays(alice, space):
    connection = create(alice, space, provider="openai", api_key=SECRET_KEY, model_id="gpt-4o")
    updated = connection_update(user=alice, connection=connection, safety_margin_tokens=2_000)
    assert (updated.window_source, updated.context_window) == ("official_manifest", 128_000)
    assert updated.safety_margin_tokens == 2_000


def test_an_edited_window_value_makes_the_source_manual(alice, space):
    connection = create(alice, space, provider="openai", api_key=SECRET_KEY, model_id="gpt-4o")
    updated = connection_update(user=alice, connection=connection, context_window=64_000)
    assert (updated.window_source, updated.context_window) == ("manual", 64_000)
    assert (updated.source_url, updated.verified_on) == ("", None)
    assert updated.max_output_cap == 16_384


def test_a_new_model_takes_its_own_defaults(alice, space):
    connection = create(alice, space, provider="openai", api_key=SECRET_KEY, model_id="gpt-4o")
    updated = connection_update(user=alice, connection=connection, model_id="gpt-3.5-turbo")
    assert (updated.context_window, updated.max_output_cap) == (16_385, 4_096)
    assert updated.window_source == "official_manifest"


def test_null_resets_a_value_to_its_default(alice, space):
    connection = create(
        alice,
        space,
        provider="openai",
        api_key=SECRET_KEY,
        model_id="gpt-4o",
        context_window=64_000,
    )
    updated = connection_update(
        user=alice,
        connection=connection,
        context_window=None,
        max_output_cap=None,
        max_output_tokens=None,
    )
    assert (updated.context_window, updated.window_source) == (128_000, "official_manifest")


def test_a_lowered_cap_clamps_the_kept_output(alice, space):
    connection = create(alice, space, provider="openai", api_key=SECRET_KEY, model_id="gpt-4o")
    updated = connection_update(user=alice, connection=connection, max_output_cap=1_000)
    assert (updated.max_output_tokens, updated.window_source) == (1_000, "manual")


def test_the_space_cannot_change(alice, space, other_space):
    connection = create(alice, space, provider="local")
    refused("space", connection_update, user=alice, connection=connection, space=other_space)


def test_an_update_of_a_stale_instance_compares_with_the_stored_row(alice, space):
    connection = create(alice, space, provider="openai", api_key=SECRET_KEY, model_id="gpt-4o")
    stale = ModelConnection.objects.get(pk=connection.pk)
    connection_update(user=alice, connection=connection, api_key="sk-rotated")
    stale.api_key = "sk-forged-in-memory"
    updated = connection_update(user=alice, connection=stale, name="renamed")
    assert updated.api_key == "sk-rotated"


# --- access ------------------------------------------------------------------------------------


def test_only_space_admins_write(alice, carol, bob, space):
    with pytest.raises(PermissionDenied):
        create(carol, space, provider="local")
    with pytest.raises(NotFound):
        create(bob, space, provider="local")
    connection = create(alice, space, provider="local")
    for call in (
        lambda user: connection_update(user=user, connection=connection, name="x"),
        lambda user: connection_delete(user=user, connection=connection),
    ):
        with pytest.raises(PermissionDenied):
            call(carol)
        with pytest.raises(NotFound):
            call(bob)
    assert ModelConnection.objects.get(pk=connection.pk).name == "main"


# --- deletion ----------------------------------------------------------------------------------


def test_an_unused_connection_is_deleted(alice, space):
    connection = create(alice, space, provider="local")
    connection_delete(user=alice, connection=connection)
    assert not ModelConnection.objects.filter(pk=connection.pk).exists()


def test_a_connection_used_by_a_published_version_is_kept(alice, space):
    connection = make_connection(space)
    agent = make_agent(space, alice, connection=connection, name="Helper")
    make_version(agent)
    with pytest.raises(Conflict) as caught:
        connection_delete(user=alice, connection=connection)
    assert "Published" in caught.value.detail and "Helper v1" in caught.value.detail
    assert ModelConnection.objects.filter(pk=connection.pk).exists()


def test_a_connection_used_by_a_draft_is_kept(alice, space):
    connection = make_connection(space)
    make_agent(space, alice, connection=connection, name="Drafty")
    with pytest.raises(Conflict) as caught:
        connection_delete(user=alice, connection=connection)
    assert "Draft" in caught.value.detail and "Drafty" in caught.value.detail


# --- local servers -----------------------------------------------------------------------------

# Local servers listen on loopback, which a deployment must allow explicitly.
local_servers = pytest.mark.usefixtures("private_hosts")


@local_servers
def test_an_ollama_connection_without_num_ctx_gets_the_platform_default(alice, space):
    connection = create(
        alice, space, provider="ollama", base_url="http://127.0.0.1:11434", model_id="qwen3:8b"
    )
    assert (connection.window_source, connection.context_window) == ("platform_default", 32_768)
    assert (connection.api_key, connection.num_ctx) == ("", None)


@local_servers
def test_num_ctx_is_the_window_of_an_ollama_connection(alice, space):
    connection = create(
        alice,
        space,
        provider="ollama",
        base_url="http://127.0.0.1:11434",
        model_id="qwen3:8b",
        num_ctx=16_384,
    )
    assert (connection.window_source, connection.context_window) == ("num_ctx", 16_384)
    updated = connection_update(user=alice, connection=connection, num_ctx=8_192)
    assert (updated.window_source, updated.context_window) == ("num_ctx", 8_192)
    cleared = connection_update(user=alice, connection=updated, num_ctx=None)
    assert (cleared.window_source, cleared.num_ctx) == ("platform_default", None)


@local_servers
def test_only_ollama_takes_num_ctx(alice, space):
    with pytest.raises(InvalidInput) as caught:
        create(
            alice,
            space,
            provider="lmstudio",
            base_url="http://127.0.0.1:1234",
            model_id="qwen2-vl-7b-instruct",
            num_ctx=4_096,
        )
    assert caught.value.field == "num_ctx"


@local_servers
def test_a_local_server_needs_its_base_url(alice, space):
    with pytest.raises(InvalidInput) as caught:
        create(alice, space, provider="lmstudio", model_id="qwen2-vl-7b-instruct")
    assert caught.value.field == "base_url"


def test_a_thinking_connection_keeps_an_output_floor(alice, space):
    from agentloom.providers import THINKING_OUTPUT_FLOOR

    connection = create(
        alice, space, provider="deepseek", api_key=SECRET_KEY, model_id="deepseek-chat"
    )
    assert connection.max_output_tokens >= THINKING_OUTPUT_FLOOR
    error = refused(
        "max_output_tokens",
        create,
        alice,
        space,
        provider="deepseek",
        api_key=SECRET_KEY,
        model_id="deepseek-chat",
        max_output_tokens=4_096,
        name="small",
    )
    assert str(THINKING_OUTPUT_FLOOR) in str(error.detail)
    # Models that do not think keep the usual default.
    custom = create(
        alice, space, provider="openai_compatible", base_url=PROXY, model_id="m", name="other"
    )
    assert custom.max_output_tokens < THINKING_OUTPUT_FLOOR
