"""Shapes of model connections and discovered models in the REST API.

Input serializers check types and ranges; `models_app.services.connections` owns every other rule.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agentloom.api import StrictSerializer, TextField, id_field
from agentloom.providers import punycode_url, retirement_of
from models_app.models import ModelConnection
from models_app.services.connections import MAX_API_KEY_CHARS, MAX_TOKENS

_NULL_IS_DEFAULT = (
    "Null (or omitted on create) means the default: the official manifest on the provider's "
    "official endpoint, else the 32K platform fallback; the provider is not called."
)


class RetirementSerializer(serializers.Serializer):
    retired_on = serializers.DateField(help_text="The last day the provider served this ID.")
    replacement = serializers.CharField(help_text="What the provider names in its place.")
    source_url = serializers.CharField()


def _tokens(minimum: int, help_text: str) -> serializers.IntegerField:
    return serializers.IntegerField(
        min_value=minimum,
        max_value=MAX_TOKENS,
        required=False,
        allow_null=True,
        help_text=help_text,
    )


class ManualPricesSerializer(serializers.Serializer):
    currency = serializers.CharField(help_text="ISO 4217 code, such as `USD`.")
    input = serializers.CharField(help_text="Per million input tokens, a decimal string.")
    cached_input = serializers.CharField(
        allow_null=True, help_text="Per million cached input tokens; null when none is charged."
    )
    output = serializers.CharField(help_text="Per million output tokens, a decimal string.")
    source = serializers.CharField(help_text="Always `manual`: entered by an operator.")
    entered_on = serializers.DateField(help_text="When the prices were entered.")


class ModelConnectionSerializer(serializers.Serializer):
    """A model connection; the API key is never returned, only whether one is stored."""

    id = serializers.IntegerField()
    space = serializers.IntegerField(source="space_id")
    name = serializers.CharField()
    provider = serializers.ChoiceField(choices=ModelConnection.Provider.choices)
    demo = serializers.SerializerMethodField(
        help_text="True for the built-in offline demo model (provider `local`), not a real LLM."
    )
    base_url = serializers.CharField(help_text="Empty for the local demo model.")
    base_url_punycode = serializers.SerializerMethodField(
        help_text="The base URL with its host in punycode (as it is called) when the host has "
        "non-ASCII letters, which can pass for another host's; null otherwise."
    )
    has_api_key = serializers.SerializerMethodField()
    model_id = serializers.CharField()
    context_window = serializers.IntegerField()
    max_output_tokens = serializers.IntegerField(
        help_text="Output reserved in the input budget and sent as the request's output limit."
    )
    max_output_cap = serializers.IntegerField(
        allow_null=True, help_text="The provider's own output cap, when known."
    )
    safety_margin_tokens = serializers.IntegerField()
    num_ctx = serializers.IntegerField(
        allow_null=True,
        help_text="Ollama only: the context length sent as options.num_ctx with every request "
        "(then the window); null leaves Ollama's server default in force.",
    )
    window_source = serializers.ChoiceField(choices=ModelConnection.WindowSource.choices)
    source_url = serializers.SerializerMethodField()
    verified_on = serializers.DateField(allow_null=True)
    estimator = serializers.ChoiceField(
        choices=ModelConnection.Estimator.choices,
        help_text="How requests are measured against the budget.",
    )
    estimator_source = serializers.ChoiceField(choices=ModelConnection.EstimatorSource.choices)
    effective_input_budget = serializers.IntegerField(
        help_text="context_window - max_output_tokens - safety_margin_tokens."
    )
    thinking = serializers.CharField(
        help_text="DeepSeek: `enabled`, `disabled`, or empty for DeepSeek's default (enabled)."
    )
    reasoning_effort = serializers.CharField(
        help_text="DeepSeek thinking mode: `low`, `high`, `max`, or empty for the default."
    )
    reasoning_passback = serializers.CharField(
        help_text="Whether a reply's reasoning goes back in later requests: `never`, "
        "`tool_spans` (DeepSeek's rule), or empty: learned from a refusal that says reasoning "
        "is missing (DeepSeek's official endpoint keeps its own rule). Frozen at publish."
    )
    learned_reasoning = serializers.CharField(
        read_only=True,
        help_text="The rule runs learned from the server's refusal (`tool_spans`), or empty; "
        "used by versions published later while reasoning_passback is empty.",
    )
    learned_window = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="The window runs learned from the server's length refusals (then the "
        "context_window, source `learned`); editing the window clears it.",
    )
    learned_window_evidence = serializers.CharField(
        read_only=True, help_text="The server's words the window was learned from."
    )
    learned_window_at = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text="When the window was learned."
    )
    prices = serializers.SerializerMethodField(
        help_text="Operator-entered prices of a custom endpoint; null: from the manifest on an "
        "official endpoint, else unknown (no cost is computed)."
    )
    retired = serializers.SerializerMethodField(
        help_text="The provider's retirement of this model ID on its official endpoint, "
        "{retired_on, replacement}, or null."
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def get_demo(self, connection: ModelConnection) -> bool:
        return connection.provider == ModelConnection.Provider.LOCAL

    def get_base_url_punycode(self, connection: ModelConnection) -> str | None:
        return punycode_url(connection.base_url)

    def get_has_api_key(self, connection: ModelConnection) -> bool:
        return bool(connection.api_key)

    def get_source_url(self, connection: ModelConnection) -> str | None:
        return connection.source_url or None

    @extend_schema_field(ManualPricesSerializer(allow_null=True))
    def get_prices(self, connection: ModelConnection) -> dict | None:
        if not connection.prices:
            return None
        return {**connection.prices, "source": "manual"}

    @extend_schema_field(RetirementSerializer(allow_null=True))
    def get_retired(self, connection: ModelConnection) -> dict | None:
        retirement = retirement_of(connection.provider, connection.base_url, connection.model_id)
        return retirement.to_dict() if retirement else None


class _ConnectionInput(StrictSerializer):
    base_url = TextField(
        max_length=500,
        required=False,
        allow_blank=True,
        help_text="Required for openai_compatible; blank means the official URL for openai and "
        "deepseek; ignored for local.",
    )
    api_key = TextField(
        max_length=MAX_API_KEY_CHARS,
        required=False,
        allow_blank=True,
        write_only=True,
        style={"input_type": "password"},
        help_text="Write-only; stored encrypted. Blank on update keeps the stored key, but only "
        "while provider and base_url stay the same.",
    )
    model_id = TextField(
        max_length=200,
        required=False,
        allow_blank=True,
        single_line=True,
        help_text="A chat model ID; `local-demo` (the default) for local, required for every "
        "other provider.",
    )
    context_window = _tokens(1, _NULL_IS_DEFAULT)
    max_output_tokens = _tokens(
        1, "Defaults to 4096, never above max_output_cap. " + _NULL_IS_DEFAULT
    )
    max_output_cap = _tokens(1, _NULL_IS_DEFAULT)
    safety_margin_tokens = _tokens(0, "Defaults to 1024.")
    num_ctx = _tokens(
        1,
        "Ollama only: sent as options.num_ctx through Ollama's native chat API, and then the "
        "window. Null: Ollama's server default (the window is then the 32K platform default).",
    )
    window_source = serializers.ChoiceField(
        choices=ModelConnection.WindowSource.choices,
        required=False,
        allow_null=True,
        help_text="Where the window values come from; values sent without it are `manual`.",
    )
    source_url = TextField(max_length=500, required=False, allow_blank=True, allow_null=True)
    verified_on = serializers.DateField(required=False, allow_null=True)
    estimator = serializers.ChoiceField(
        choices=ModelConnection.Estimator.choices,
        required=False,
        allow_null=True,
        help_text="Pick how requests are measured (then `manual`); omitted: `o200k` or "
        "`deepseek` when the manifest lists this exact model on its official endpoint, else "
        "`bytes`. `server` (the server's own tokenizer, self-hosted servers only) may come with "
        "estimator_source `auto` when a connection test or a listing suggested it.",
    )
    estimator_source = serializers.ChoiceField(
        choices=ModelConnection.EstimatorSource.choices,
        required=False,
        allow_null=True,
        help_text="`auto` alone returns to the automatic choice.",
    )
    thinking = serializers.ChoiceField(
        choices=ModelConnection.Thinking.choices,
        required=False,
        allow_blank=True,
        help_text="DeepSeek only: thinking mode, frozen into each version published.",
    )
    reasoning_effort = serializers.ChoiceField(
        choices=ModelConnection.ReasoningEffort.choices,
        required=False,
        allow_blank=True,
        help_text="DeepSeek thinking mode only: `low`, `high` or `max`.",
    )
    reasoning_passback = serializers.ChoiceField(
        choices=ModelConnection.ReasoningPassback.choices,
        required=False,
        allow_blank=True,
        help_text="`never`, `tool_spans`, or empty to learn it; frozen into each version "
        "published.",
    )
    prices = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text="Custom endpoints only: `{input, cached_input, output, currency}` per million "
        "tokens, entered by an operator (source `manual`); null clears them.",
    )


class ModelConnectionCreateSerializer(_ConnectionInput):
    space = id_field(help_text="A space the caller administers.")
    name = TextField(
        max_length=120, single_line=True, help_text="Unique among the space's connections."
    )
    provider = serializers.ChoiceField(choices=ModelConnection.Provider.choices)


class ModelConnectionUpdateSerializer(_ConnectionInput):
    name = TextField(
        max_length=120,
        required=False,
        single_line=True,
        help_text="Unique among the space's connections.",
    )
    provider = serializers.ChoiceField(choices=ModelConnection.Provider.choices, required=False)


class DiscoverSerializer(StrictSerializer):
    provider = serializers.ChoiceField(choices=ModelConnection.Provider.choices)
    base_url = TextField(
        max_length=500,
        required=False,
        allow_blank=True,
        help_text="Required for openai_compatible; blank means the official URL.",
    )
    api_key = TextField(
        max_length=MAX_API_KEY_CHARS,
        required=False,
        allow_blank=True,
        write_only=True,
        style={"input_type": "password"},
        help_text="Used for this request only, never stored.",
    )
    resource_id = id_field(
        required=False,
        allow_null=True,
        help_text="A connection of the caller's spaces whose stored key is used when api_key "
        "is blank and provider and base_url are unchanged.",
    )


class DiscoveredModelSerializer(serializers.Serializer):
    id = serializers.CharField()
    chat = serializers.BooleanField(help_text="False for models known not to serve chat.")
    context_window = serializers.IntegerField()
    max_output_tokens = serializers.IntegerField()
    max_output_cap = serializers.IntegerField(allow_null=True)
    window_source = serializers.ChoiceField(choices=ModelConnection.WindowSource.choices)
    source_url = serializers.CharField(allow_null=True)
    verified_on = serializers.DateField(allow_null=True)
    demo = serializers.BooleanField(help_text="The built-in offline demo model.")
    tokenizer = serializers.CharField(
        allow_null=True, help_text="The manifest's tokenizer family for this exact model."
    )
    estimator = serializers.ChoiceField(
        choices=ModelConnection.Estimator.choices,
        help_text="The estimator a connection to this model gets automatically.",
    )
    warning = serializers.CharField(
        allow_null=True,
        help_text="Why the window may not be the one the server runs the model with.",
    )
    retired = RetirementSerializer(
        allow_null=True,
        help_text="On the official endpoint: when the provider retired this ID and its "
        "replacement; null otherwise.",
    )


class DiscoverResultSerializer(serializers.Serializer):
    models = DiscoveredModelSerializer(many=True)


class ConnectionTestRequestSerializer(DiscoverSerializer):
    model_id = TextField(
        max_length=200,
        required=False,
        allow_blank=True,
        help_text="The model asked; required except for the local demo model.",
    )


class ConnectionTestResultSerializer(serializers.Serializer):
    ok = serializers.BooleanField(help_text="True when the provider answered the test request.")
    latency_ms = serializers.IntegerField(help_text="How long the one request took.")
    model = serializers.CharField(allow_null=True, help_text="The model that answered.")
    kind = serializers.CharField(
        allow_null=True, help_text="How the request failed (a provider error kind)."
    )
    detail = serializers.CharField(
        allow_null=True, help_text="Why it failed, in words; never the provider's body."
    )
    status = serializers.IntegerField(
        allow_null=True, help_text="The provider's HTTP status, when it answered one."
    )
    tokenizer = serializers.CharField(
        allow_null=True,
        help_text="The route the server counts tokens on (`llama.cpp:/tokenize`, "
        "`llama-cpp-python:/extras/tokenize/count`, `vllm:/tokenize`); null when it does not.",
    )
    estimator = serializers.ChoiceField(
        choices=ModelConnection.Estimator.choices,
        allow_null=True,
        help_text="`server` when the server tokenizes: send it with estimator_source `auto`.",
    )
