"""Model discovery: list shapes, metadata spellings, the exact-ID manifest rule, chat flags."""

from __future__ import annotations

import datetime
import json

import httpx
import pytest

from agentloom.providers import (
    GuardedTransport,
    ProviderError,
    discover_models,
    is_chat_model_id,
    is_official_endpoint,
    load_manifest,
    model_defaults,
    secure_client,
)

KEY = "sk-test-discovery"
TODAY = datetime.date(2026, 10, 7)


def discover(double, provider="openai_compatible", base_url=None, **options):
    return discover_models(
        provider,
        base_url or double.base_url,
        KEY,
        allow_private_hosts=True,
        today=TODAY,
        **options,
    )


def by_id(models):
    return {model.id: model for model in models}


class RedirectToDouble(httpx.BaseTransport):
    """Send every request for an official host to the double, through the guarded transport."""

    def __init__(self, double):
        self.double = double
        self.inner = GuardedTransport(allow_private_hosts=True)

    def handle_request(self, request):
        path = request.url.path
        if not path.startswith("/v1/"):
            path = "/v1" + path
        request.url = httpx.URL(self.double.origin + path)
        return self.inner.handle_request(request)

    def close(self):
        self.inner.close()


def through_double(double):
    return lambda: secure_client(transport=RedirectToDouble(double))


@pytest.mark.parametrize("provider", ["openai", "deepseek", "openai_compatible"])
def test_each_provider_lists_models_over_http(provider_double, provider):
    provider_double.models = [{"id": "model-b"}, {"id": "model-a", "context_window": 65536}]
    models = discover(provider_double, provider)
    assert [m.id for m in models] == ["model-a", "model-b"]
    # The list is asked first; an OpenAI-compatible endpoint is then asked for its own props.
    request = provider_double.requests[0]
    assert (request.method, request.path) == ("GET", "/v1/models")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert models[0].window_source == "provider"
    assert models[0].source_url == provider_double.base_url + "/models"
    assert models[0].verified_on == "2026-10-07"
    # A custom endpoint never gets manifest values, whatever the provider.
    assert models[1].window_source == "platform_default"
    assert models[1].context_window == 32_768


def test_local_is_the_offline_demo_model_without_http(provider_double):
    [model] = discover_models("local", "", None)
    assert (model.id, model.chat, model.demo) == ("local-demo", True, True)
    assert model.to_dict()["demo"] is True
    assert provider_double.requests == []


@pytest.mark.parametrize(
    "document",
    [
        {"object": "list", "data": [{"id": "alpha", "object": "model"}, {"id": "beta"}]},
        [{"id": "alpha"}, {"id": "beta"}],
        {"models": [{"name": "alpha"}, {"model": "beta"}]},
        ["alpha", "beta"],
        {"data": [{"id": "beta"}, {"id": "alpha"}, {"id": "alpha"}, 7, None, {"x": 1}, {"id": ""}]},
    ],
)
def test_list_shapes(provider_double, document):
    provider_double.models_body = document
    assert [m.id for m in discover(provider_double)] == ["alpha", "beta"]


@pytest.mark.parametrize("document", [{"object": "list"}, {"data": "nope"}, 42, "models"])
def test_an_answer_that_is_not_a_list_is_a_protocol_error(provider_double, document):
    provider_double.models_body = document
    with pytest.raises(ProviderError) as caught:
        discover(provider_double)
    assert caught.value.kind == "protocol"


@pytest.mark.parametrize(
    ("fields", "window", "cap"),
    [
        ({"context_window": 65536}, 65536, None),
        ({"context_length": 131072}, 131072, None),
        ({"max_model_len": 32000}, 32000, None),
        ({"max_context_length": 200000}, 200000, None),
        (
            {"top_provider": {"context_length": 400000, "max_completion_tokens": 128000}},
            400000,
            128000,
        ),
        ({"context_window": 128000, "max_output_tokens": 8192}, 128000, 8192),
        ({"context_length": 128000, "max_completion_tokens": 16384}, 128000, 16384),
        ({"max_input_tokens": 200000, "max_output_tokens": 64000}, 264000, 64000),
        ({"max_input_tokens": 200000, "max_tokens": 64000}, 264000, 64000),
        ({"max_input_tokens": 100000}, 100000, None),
        ({"max_tokens": 8192}, 8192, None),
        ({"context_length": 32768, "max_tokens": 4096}, 32768, 4096),
        ({"context_length": 128000.0}, 128000, None),
        ({"context_window": 8192, "max_output_tokens": 100000}, 8192, None),
    ],
)
def test_metadata_field_spellings(provider_double, fields, window, cap):
    provider_double.models = [{"id": "m", **fields}]
    [model] = discover(provider_double)
    assert (model.context_window, model.max_output_cap) == (window, cap)
    assert model.window_source == "provider"


@pytest.mark.parametrize(
    "fields",
    [
        {"context_window": -1},
        {"context_window": 0},
        {"context_window": "128000"},
        {"context_window": 1.5},
        {"context_window": True},
        {"context_window": None},
        {"context_window": 10**12},
        {"context_length": [128000]},
        {"top_provider": "big"},
    ],
)
def test_junk_sizes_are_ignored(provider_double, fields):
    provider_double.models = [{"id": "m", **fields}]
    [model] = discover(provider_double)
    assert (model.context_window, model.window_source) == (32_768, "platform_default")


def test_max_output_tokens_defaults_to_4096_within_cap_and_window(provider_double):
    provider_double.models = [
        {"id": "big", "context_window": 1_000_000, "max_output_tokens": 100_000},
        {"id": "capped", "context_window": 128_000, "max_output_tokens": 2_048},
        {"id": "small", "max_tokens": 4_096},
    ]
    models = by_id(discover(provider_double))
    assert models["big"].max_output_tokens == 4_096
    assert models["capped"].max_output_tokens == 2_048
    assert models["small"].max_output_tokens == 2_048
    assert all(
        m.max_output_tokens <= (m.max_output_cap or m.max_output_tokens) for m in models.values()
    )


OFFICIAL_LIST = [
    {"id": "gpt-4.1", "object": "model", "owned_by": "system"},
    {"id": "gpt-4o", "object": "model"},
    {"id": "gpt-4o-2024-99-99", "object": "model"},
    {"id": "gpt-4o-mini-foo", "object": "model"},
    {"id": "o3", "object": "model"},
    {"id": "text-embedding-3-small", "object": "model"},
    {"id": "o1-pro", "object": "model"},
    {"id": "gpt-4o-mini", "object": "model", "context_window": 64000},
]


def test_the_official_endpoint_gets_manifest_values_for_exact_ids_only(provider_double):
    provider_double.models = OFFICIAL_LIST
    models = by_id(
        discover_models(
            "openai",
            "https://api.openai.com/v1",
            KEY,
            client_factory=through_double(provider_double),
            today=TODAY,
        )
    )
    assert provider_double.requests[-1].headers["host"] == "api.openai.com"
    gpt41 = models["gpt-4.1"]
    assert (gpt41.context_window, gpt41.max_output_cap, gpt41.window_source) == (
        1_047_576,
        32_768,
        "official_manifest",
    )
    assert gpt41.source_url == "https://platform.openai.com/docs/models/gpt-4.1"
    assert gpt41.verified_on == load_manifest().lookup("openai", "gpt-4.1").verified_on
    assert (models["gpt-4o"].context_window, models["gpt-4o"].max_output_cap) == (128_000, 16_384)
    assert (models["o3"].context_window, models["o3"].max_output_cap) == (200_000, 100_000)
    for near_miss in ("gpt-4o-2024-99-99", "gpt-4o-mini-foo"):
        assert models[near_miss].window_source == "platform_default"
        assert models[near_miss].context_window == 32_768
        assert models[near_miss].max_output_cap is None
    # What the provider says wins; the manifest still supplies the cap it did not send.
    assert models["gpt-4o-mini"].window_source == "provider"
    assert models["gpt-4o-mini"].context_window == 64_000
    assert models["gpt-4o-mini"].max_output_cap == 16_384
    assert not models["text-embedding-3-small"].chat
    assert not models["o1-pro"].chat
    # The tokenizer family too comes from the manifest, for exact IDs only.
    assert (models["gpt-4.1"].tokenizer, models["gpt-4.1"].estimator) == ("o200k", "o200k")
    assert (models["gpt-4o-mini"].tokenizer, models["gpt-4o-mini"].estimator) == ("o200k", "o200k")
    for near_miss in ("gpt-4o-2024-99-99", "gpt-4o-mini-foo"):
        assert (models[near_miss].tokenizer, models[near_miss].estimator) == (None, "bytes")


def test_deepseek_official_endpoint_uses_the_manifest(provider_double):
    provider_double.models = [
        {"id": "deepseek-chat", "object": "model", "owned_by": "deepseek"},
        {"id": "deepseek-reasoner", "object": "model", "owned_by": "deepseek"},
    ]
    for base_url in ("https://api.deepseek.com", "https://api.deepseek.com/v1/"):
        models = by_id(
            discover_models(
                "deepseek", base_url, KEY, client_factory=through_double(provider_double)
            )
        )
        chat = models["deepseek-chat"]
        # The aliases of deepseek-v4-flash: 1M window, 384K output cap.
        assert (chat.context_window, chat.max_output_cap, chat.window_source) == (
            1_000_000,
            384_000,
            "official_manifest",
        )
        assert models["deepseek-reasoner"].max_output_cap == 384_000
        assert chat.source_url.startswith("https://api-docs.deepseek.com/")
        assert (chat.tokenizer, chat.estimator) == ("deepseek", "deepseek")


def test_a_custom_endpoint_never_gets_manifest_values(provider_double):
    provider_double.models = OFFICIAL_LIST
    for provider in ("openai", "openai_compatible"):
        models = by_id(discover(provider_double, provider))
        assert models["gpt-4.1"].window_source == "platform_default"
        assert (models["gpt-4.1"].tokenizer, models["gpt-4.1"].estimator) == (None, "bytes")
        assert models["gpt-4.1"].context_window == 32_768
        assert models["gpt-4.1"].max_output_cap is None
        assert models["gpt-4o-mini"].max_output_cap is None


@pytest.mark.parametrize(
    ("provider", "base_url", "official"),
    [
        ("openai", "https://api.openai.com/v1", True),
        ("openai", "https://API.OpenAI.com/v1/", True),
        ("openai", "https://api.openai.com:443/v1", True),
        ("deepseek", "https://api.deepseek.com", True),
        ("deepseek", "https://api.deepseek.com/", True),
        ("deepseek", "https://api.deepseek.com/v1", True),
        ("openai", "http://api.openai.com/v1", False),
        ("openai", "https://api.openai.com", False),
        ("openai", "https://api.openai.com/v1/proxy", False),
        ("openai", "https://api.openai.com.evil.example/v1", False),
        ("openai", "https://api.openai.com:8443/v1", False),
        ("openai", "https://user@api.openai.com/v1", False),
        ("openai", "https://api.openai.com/v1?x=1", False),
        ("openai", "https://api.deepseek.com", False),
        ("deepseek", "https://api.openai.com/v1", False),
        ("deepseek", "https://api.deepseek.com/v2", False),
        ("openai_compatible", "https://api.openai.com/v1", False),
        ("local", "https://api.openai.com/v1", False),
        ("openai", "not a url", False),
    ],
)
def test_official_endpoint_decision(provider, base_url, official):
    assert is_official_endpoint(provider, base_url) is official


@pytest.mark.parametrize(
    ("model_id", "chat"),
    [
        ("gpt-4o", True),
        ("text-embedding-3-large", False),
        ("nomic-embed-text", False),
        ("tts-1-hd", False),
        ("whisper-large-v3", False),
        ("gpt-4o-mini-transcribe", False),
        ("dall-e-3", False),
        ("gpt-image-1", False),
        ("omni-moderation-latest", False),
        ("gpt-4o-realtime-preview-2099-01-01", False),
        ("gpt-4o-audio-preview", False),
        ("codex-mini-latest", False),
        ("computer-use-preview", False),
        ("gpt-4o-search-preview", False),
        ("llama-3.1-8b-instruct", True),
        ("some-unknown-model", True),
    ],
)
def test_chat_flag(model_id, chat):
    assert is_chat_model_id("openai", model_id) is chat


def test_non_chat_models_are_listed_after_chat_models(provider_double):
    provider_double.models = [
        {"id": "a-embedding"},
        {"id": "zeta"},
        {"id": "alpha"},
        {"id": "bge-reranker", "type": "rerank"},
        {"id": "vision-gen", "type": "image"},
    ]
    models = discover(provider_double)
    assert [(m.id, m.chat) for m in models] == [
        ("alpha", True),
        ("zeta", True),
        ("a-embedding", False),
        ("bge-reranker", False),
        ("vision-gen", False),
    ]


def test_model_defaults_need_no_provider_call(provider_double):
    official = model_defaults("openai", "https://api.openai.com/v1", "gpt-4.1-mini")
    assert (official.context_window, official.window_source) == (1_047_576, "official_manifest")
    custom = model_defaults("openai", provider_double.base_url, "gpt-4.1-mini")
    assert (custom.context_window, custom.window_source) == (32_768, "platform_default")
    assert model_defaults("local", "", "local-demo").demo
    assert provider_double.requests == []


def test_discovered_models_serialise_to_the_api_shape(provider_double):
    [model] = discover(provider_double)
    assert set(model.to_dict()) >= {
        "id",
        "chat",
        "context_window",
        "max_output_tokens",
        "max_output_cap",
        "window_source",
        "source_url",
        "verified_on",
    }
    json.dumps(model.to_dict())


def test_an_unknown_provider_is_a_value_error():
    with pytest.raises(ValueError):
        discover_models("anthropic", "https://example.com", KEY)


def test_redirects_during_discovery_are_refused(provider_double):
    provider_double.redirect("/v1/models", to="/v1/elsewhere")
    with pytest.raises(ProviderError) as caught:
        discover(provider_double)
    assert caught.value.kind == "redirect"
    assert provider_double.hits("/v1/elsewhere") == 0


def test_the_bundled_manifest_is_valid_and_exact():
    manifest = load_manifest()
    assert manifest.version
    assert manifest.lookup("openai", "gpt-4o").context_window == 128_000
    assert manifest.lookup("openai", "gpt-4o-2024-99-99") is None
    assert manifest.lookup("openai", "GPT-4O") is None
    assert manifest.lookup("deepseek", "gpt-4o") is None
    for entry in manifest.entries.values():
        datetime.date.fromisoformat(entry.verified_on)
        assert entry.source_url.startswith("https://")
        if entry.chat:
            assert entry.context_window and entry.max_output_cap <= entry.context_window


@pytest.mark.parametrize(
    "document",
    [
        {"models": {}},
        {"version": "1", "models": {"openai": {"m": {"chat": True}}}},
        {"version": "1", "models": {"openai": {"m": {"chat": "yes"}}}},
        {
            "version": "1",
            "models": {
                "openai": {
                    "m": {
                        "chat": True,
                        "context_window": 1000,
                        "max_output_cap": 2000,
                        "source_url": "https://example.com",
                        "verified_on": "2026-01-01",
                    }
                }
            },
        },
        {
            "version": "1",
            "models": {
                "openai": {
                    "m": {
                        "chat": True,
                        "context_window": 1000,
                        "source_url": "https://example.com",
                        "verified_on": "yesterday",
                    }
                }
            },
        },
    ],
)
def test_a_malformed_manifest_fails_loudly(tmp_path, document):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError):
        load_manifest(path)


# --- what an OpenAI-compatible server says it runs the model with -------------------------------

SMOL = "/models/SmolLM2-135M-Instruct-Q8_0.gguf"
# llama.cpp's `GET /props` (tools/server/README.md, read 2026-12-02), shortened.
PROPS = {
    "default_generation_settings": {"n_ctx": 4096, "params": {}},
    "total_slots": 1,
    "model_path": SMOL,
}


def test_llama_cpp_props_give_the_window_of_its_one_model(provider_double, caplog):
    provider_double.models = [{"id": SMOL, "object": "model"}]
    provider_double.props = PROPS
    [model] = discover(provider_double)
    assert (model.context_window, model.window_source) == (4096, "server_props")
    assert model.source_url == provider_double.origin + "/props"
    assert model.verified_on == "2026-10-07"
    assert model.max_output_tokens == 2048
    # llama.cpp started with --api-key asks for it on /props as on the chat route.
    props = [request for request in provider_double.requests if request.path == "/props"]
    assert props and props[0].headers["authorization"] == f"Bearer {KEY}"
    # Found at /props: LM Studio's route is not asked.
    assert provider_double.hits("/api/v0/models") == 0


def test_props_apply_to_the_model_they_name_only(provider_double):
    provider_double.models = [{"id": "smol"}, {"id": "other", "context_window": 8192}]
    provider_double.props = {**PROPS, "model_alias": "smol"}
    models = by_id(discover(provider_double))
    assert (models["smol"].context_window, models["smol"].window_source) == (4096, "server_props")
    assert (models["other"].context_window, models["other"].window_source) == (8192, "provider")


def test_props_of_an_unnamed_model_among_several_are_not_guessed(provider_double):
    provider_double.models = [{"id": "a"}, {"id": "b"}]
    provider_double.props = PROPS
    assert {m.window_source for m in discover(provider_double)} == {"platform_default"}


@pytest.mark.parametrize(
    "props",
    [
        {"default_generation_settings": {"n_ctx": 0}},
        {"default_generation_settings": {"n_ctx": "4096"}},
        {"n_ctx": 4096},
        {"default_generation_settings": None},
        ["not", "props"],
    ],
)
def test_props_without_a_usable_slot_window_are_ignored(provider_double, props):
    provider_double.models = [{"id": SMOL}]
    provider_double.props = props
    [model] = discover(provider_double)
    assert (model.context_window, model.window_source) == (32_768, "platform_default")


def test_lm_studio_behind_an_openai_compatible_endpoint_gives_its_loaded_length(provider_double):
    provider_double.models = [{"id": "qwen2.5-7b-instruct"}, {"id": "idle-model"}]
    provider_double.reply(
        path="/api/v0/models",
        json={
            "object": "list",
            "data": [
                {
                    "id": "qwen2.5-7b-instruct",
                    "type": "llm",
                    "state": "loaded",
                    "max_context_length": 32768,
                    "loaded_context_length": 8192,
                },
                {
                    "id": "idle-model",
                    "type": "llm",
                    "state": "not-loaded",
                    "max_context_length": 131072,
                },
            ],
        },
    )
    models = by_id(discover(provider_double))
    loaded, idle = models["qwen2.5-7b-instruct"], models["idle-model"]
    assert (loaded.context_window, loaded.window_source) == (8192, "provider_loaded")
    assert loaded.source_url == provider_double.origin + "/api/v0/models"
    assert (idle.context_window, idle.window_source) == (131072, "provider_maximum")
    assert idle.warning and "Not loaded" in idle.warning


def test_missing_server_routes_are_silent(provider_double, caplog):
    caplog.set_level("INFO")
    provider_double.models = [{"id": SMOL}]
    [model] = discover(provider_double)
    assert model.window_source == "platform_default"
    assert [r.path for r in provider_double.requests] == ["/v1/models", "/props", "/api/v0/models"]
    assert not [record for record in caplog.records if record.levelname == "WARNING"]


def test_a_failing_props_route_leaves_the_listing_as_it_was(provider_double):
    provider_double.models = [{"id": SMOL, "context_window": 16384}]
    provider_double.reply(path="/props", status=500, json={"error": {"message": "x"}})
    provider_double.reply(path="/api/v0/models", body=b"<html>not json</html>")
    [model] = discover(provider_double)
    assert (model.context_window, model.window_source) == (16384, "provider")


def test_only_openai_compatible_endpoints_are_asked_for_props(provider_double):
    provider_double.props = PROPS
    discover(provider_double, "openai")
    discover(provider_double, "deepseek")
    assert provider_double.hits("/props") == 0


def test_the_props_are_asked_at_the_origin_whatever_the_base_path(provider_double):
    provider_double.models = [{"id": SMOL}]
    provider_double.props = PROPS
    provider_double.reply(path="/deep/v1/models", json={"data": [{"id": SMOL}]})
    [model] = discover(provider_double, base_url=provider_double.origin + "/deep/v1")
    assert model.window_source == "server_props"
    assert provider_double.hits("/deep/props") == 0 and provider_double.hits("/props") == 1
