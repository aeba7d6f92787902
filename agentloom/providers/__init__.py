"""Model providers: the secure HTTP client, model discovery, the manifest and chat gateways.

Plain Python: the Django side passes settings such as `ALLOW_PRIVATE_MODEL_HOSTS` in as
arguments, and gets dataclasses and `ProviderError`s back. Where each rule lives:

- `_errors`: the fixed message of each error kind; `_http`: which provider answer is which kind;
- `_core_request`: the checked request both guarded transports (httpx, httpx2) hand their pool;
- `manifest`: exact model IDs, their windows, prices and retirements; `_schedule`: prices by
  the time of day (dated peak-hour rules, holiday calendars);
- `pricing`: the price a call is billed at (manifest on official endpoints, an operator's
  prices elsewhere) and its cost; `discovery`: model lists, defaults and `retirement_of`;
- `chat`: the gateways, their retry policy and timeouts, DeepSeek's thinking settings;
  `_stream`: how a streamed answer is assembled and how a broken one is classified;
  `_refusals`: how each server words a length refusal and the numbers read from it;
- `server_tokens`: counting with a model server's own tokenizer (`ServerTokenizer`).

The names below are the providers' public surface: the apps import them from
`agentloom.providers`, never from its modules (an import-linter contract holds this).
"""

from agentloom.providers._addresses import (
    METADATA_HOSTNAMES,
    Resolver,
    address_refusal,
    numeric_host,
    resolve_checked,
    system_resolver,
)
from agentloom.providers._core_request import guarded_core_request
from agentloom.providers._errors import KINDS, RETRYABLE_KINDS, ProviderError
from agentloom.providers._http import (
    DEFAULT_MAX_RESPONSE_BYTES,
    GuardedTransport,
    ProviderClient,
    secure_client,
)
from agentloom.providers._urls import (
    OFFICIAL_ENDPOINTS,
    PROVIDERS,
    checked_url,
    endpoint_url,
    is_official_endpoint,
    normalise_base_url,
    punycode_url,
)
from agentloom.providers.chat import (
    REASONING_OPTIONS,
    THINKING_OUTPUT_FLOOR,
    CallOptions,
    DeepSeekChatGateway,
    LMStudioChatGateway,
    ModelEndpoint,
    OllamaChatGateway,
    OpenAIChatGateway,
    OpenAICompatibleChatGateway,
    OutputLimits,
    RetryPolicy,
    Timeouts,
    gateway_for_provider,
    parse_chat_completion,
    thinking_output_floor,
)
from agentloom.providers.discovery import (
    DEFAULT_MAX_OUTPUT_TOKENS,
    ESTIMATOR_NAMES,
    LOCAL_DEMO_MODEL_ID,
    PLATFORM_DEFAULT_WINDOW,
    WINDOW_SOURCES,
    ClientFactory,
    DiscoveredModel,
    discover_models,
    is_chat_model_id,
    model_defaults,
    retirement_of,
)
from agentloom.providers.manifest import (
    MANIFEST_MAX_AGE_DAYS,
    Manifest,
    ManifestEntry,
    Prices,
    Retirement,
    load_manifest,
)
from agentloom.providers.pricing import PriceInForce, call_cost, price_in_force
from agentloom.providers.server_tokens import TOKENIZER_ROUTES, ServerTokenizer, probe_tokenizer

__all__ = [
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "ESTIMATOR_NAMES",
    "KINDS",
    "LOCAL_DEMO_MODEL_ID",
    "MANIFEST_MAX_AGE_DAYS",
    "METADATA_HOSTNAMES",
    "OFFICIAL_ENDPOINTS",
    "PLATFORM_DEFAULT_WINDOW",
    "PROVIDERS",
    "REASONING_OPTIONS",
    "RETRYABLE_KINDS",
    "THINKING_OUTPUT_FLOOR",
    "TOKENIZER_ROUTES",
    "WINDOW_SOURCES",
    "CallOptions",
    "ClientFactory",
    "DeepSeekChatGateway",
    "DiscoveredModel",
    "GuardedTransport",
    "LMStudioChatGateway",
    "Manifest",
    "ManifestEntry",
    "ModelEndpoint",
    "OllamaChatGateway",
    "OpenAIChatGateway",
    "OpenAICompatibleChatGateway",
    "OutputLimits",
    "PriceInForce",
    "Prices",
    "ProviderClient",
    "ProviderError",
    "Resolver",
    "Retirement",
    "RetryPolicy",
    "ServerTokenizer",
    "Timeouts",
    "address_refusal",
    "call_cost",
    "checked_url",
    "discover_models",
    "endpoint_url",
    "gateway_for_provider",
    "guarded_core_request",
    "is_chat_model_id",
    "is_official_endpoint",
    "load_manifest",
    "model_defaults",
    "normalise_base_url",
    "numeric_host",
    "parse_chat_completion",
    "price_in_force",
    "probe_tokenizer",
    "punycode_url",
    "resolve_checked",
    "retirement_of",
    "secure_client",
    "system_resolver",
    "thinking_output_floor",
]
