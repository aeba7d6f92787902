"""List a provider's models and work out each one's window, output cap and where they came from.

Window parameters come, in order, from what the server says it runs the model with (an
`openai_compatible` endpoint that is llama.cpp's server: `server_props`; LM Studio's:
`provider_loaded`, see `local_servers.compatible_windows`), from the provider's own list
(`provider`), from the manifest of exact model IDs when the base URL is the provider's official
endpoint (`official_manifest`), or from the platform fallback (`platform_default`). The Django
side adds `manual`.

The estimator a connection measures its requests with follows the same rule: a tokenizer is
chosen only for an exact model ID the manifest lists on the provider's official endpoint (no
name prefixes, nothing for custom endpoints, where the same name may be another model); every
other model is measured in `bytes`.
"""

from __future__ import annotations

import datetime
import functools
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from agentloom.providers._errors import ProviderError
from agentloom.providers._http import ProviderClient, secure_client
from agentloom.providers._urls import PROVIDERS, endpoint_url, is_official_endpoint
from agentloom.providers.local_servers import (
    LOCAL_SERVER_PROVIDERS,
    OLLAMA_DEFAULT_WARNING,
    compatible_windows,
    lmstudio_windows,
    ollama_windows,
)
from agentloom.providers.manifest import Manifest, ManifestEntry, Retirement, load_manifest

__all__ = [
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "ESTIMATOR_NAMES",
    "LOCAL_DEMO_MODEL_ID",
    "PLATFORM_DEFAULT_WINDOW",
    "WINDOW_SOURCES",
    "ClientFactory",
    "DiscoveredModel",
    "discover_models",
    "is_chat_model_id",
    "model_defaults",
    "retirement_of",
]

PLATFORM_DEFAULT_WINDOW = 32_768
DEFAULT_MAX_OUTPUT_TOKENS = 4_096
LOCAL_DEMO_MODEL_ID = "local-demo"
WINDOW_SOURCES = (
    "provider",
    "provider_loaded",
    "provider_maximum",
    "server_props",
    "num_ctx",
    "official_manifest",
    "platform_default",
    "manual",
)
# The estimators a connection may measure with; `bytes` is the conservative default.
ESTIMATOR_NAMES = ("bytes", "o200k", "deepseek")
# The manifest's tokenizer families that an estimator counts exactly.
_ESTIMATOR_OF_TOKENIZER = {"o200k": "o200k", "deepseek": "deepseek"}

# Return a fresh client for one discovery or one model call.
ClientFactory = Callable[[], ProviderClient]

# Larger than any real window; anything above is junk, not a size.
_MAX_SANE_TOKENS = 100_000_000
_MAX_ID_LENGTH = 256

# Substrings of model IDs that name a kind of model the chat-completions API does not serve.
_NON_CHAT_MARKERS = (
    "embed",
    "tts",
    "whisper",
    "transcribe",
    "dall-e",
    "image",
    "moderation",
    "realtime",
    "audio",
    "rerank",
)
_NON_CHAT_MARKER = re.compile("|".join(re.escape(marker) for marker in _NON_CHAT_MARKERS))
# Values of a list entry's `type` (or `mode`) that some servers use for non-chat models.
_NON_CHAT_TYPES = frozenset(
    {
        "embedding",
        "embeddings",
        "image",
        "images",
        "image_generation",
        "audio",
        "audio_transcription",
        "audio_speech",
        "transcription",
        "tts",
        "moderation",
        "rerank",
        "video",
    }
)


@dataclass(frozen=True)
class DiscoveredModel:
    """A model a connection may use, with its budget parameters and where they came from.

    `max_output_tokens` is the configured output reservation and request limit; `max_output_cap`
    is the provider's own cap (None when unknown). `demo` marks the built-in offline model.
    """

    id: str
    chat: bool
    context_window: int
    max_output_tokens: int
    max_output_cap: int | None
    window_source: str
    source_url: str | None
    verified_on: str | None
    demo: bool = False
    # The manifest's tokenizer family (exact ID, official endpoint), and the estimator it gives.
    tokenizer: str | None = None
    estimator: str = "bytes"
    # Said beside the window when it may not be the one the server runs the model with.
    warning: str | None = None
    # On the official endpoint: {retired_on, replacement, source_url} of a retired model ID.
    retired: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def discover_models(
    provider: str,
    base_url: str,
    api_key: str | None,
    *,
    allow_private_hosts: bool = False,
    client_factory: ClientFactory | None = None,
    manifest: Manifest | None = None,
    today: datetime.date | None = None,
) -> list[DiscoveredModel]:
    """Return the models `provider` at `base_url` offers, chat models first, then by ID.

    GET `{base_url}/models` with the key as a bearer token; `local` answers without HTTP. For
    an `openai_compatible` endpoint the server is also asked, at its origin, what window it
    runs each model with (`compatible_windows`); a route it lacks changes nothing.
    Raise `ProviderError` when the call fails or the answer is not a model list.
    """
    _check_provider(provider)
    if provider == "local":
        return [_local_demo()]
    if provider in LOCAL_SERVER_PROVIDERS:
        return _discover_local_server(
            provider, base_url, allow_private_hosts=allow_private_hosts, factory=client_factory
        )
    manifest = manifest or load_manifest()
    official = is_official_endpoint(provider, base_url)
    url = endpoint_url(base_url, "/models")
    factory = client_factory or functools.partial(
        secure_client,
        allow_private_hosts=allow_private_hosts,
        read_timeout=30.0,
        total_timeout=60.0,
    )
    with factory() as client:
        document = client.get_json(url, api_key=api_key)
        entries: dict[str, Any] = {}
        for entry in _list_entries(document):
            model_id = _entry_id(entry)
            if model_id is not None and model_id not in entries:
                entries[model_id] = entry if isinstance(entry, dict) else {}
        served = (
            compatible_windows(client, base_url, entries, api_key=api_key)
            if provider == "openai_compatible" and entries
            else {}
        )
    checked_on = (today or datetime.date.today()).isoformat()
    models = [
        _describe(
            provider,
            model_id,
            entry,
            official=official,
            manifest=manifest,
            list_url=url,
            checked_on=checked_on,
            served=served.get(model_id),
        )
        for model_id, entry in entries.items()
    ]
    return sorted(models, key=lambda model: (not model.chat, model.id))


def model_defaults(
    provider: str, base_url: str, model_id: str, *, manifest: Manifest | None = None
) -> DiscoveredModel:
    """Return the parameters a connection to `model_id` gets without asking the provider.

    From the manifest on the official endpoint, else the platform fallback.
    """
    _check_provider(provider)
    if provider == "local":
        return _local_demo()
    if provider in LOCAL_SERVER_PROVIDERS:
        return _local_server_model(
            model_id,
            (None, "platform_default", OLLAMA_DEFAULT_WARNING if provider == "ollama" else None),
            chat=True,
            list_url=None,
        )
    return _describe(
        provider,
        model_id,
        {},
        official=is_official_endpoint(provider, base_url),
        manifest=manifest or load_manifest(),
        list_url=None,
        checked_on=None,
    )


def is_chat_model_id(provider: str, model_id: str, *, manifest: Manifest | None = None) -> bool:
    """Return False for a model ID known not to serve chat completions, else True."""
    return _is_chat(provider, model_id, {}, manifest or load_manifest())


def _check_provider(provider: str) -> None:
    if provider not in PROVIDERS:
        raise ValueError(f"unknown provider {provider!r}; expected one of {PROVIDERS}")


def _discover_local_server(
    provider: str,
    base_url: str,
    *,
    allow_private_hosts: bool,
    factory: ClientFactory | None,
) -> list[DiscoveredModel]:
    """List an Ollama or LM Studio server's models with the windows they really run with."""
    factory = factory or functools.partial(
        secure_client,
        allow_private_hosts=allow_private_hosts,
        read_timeout=30.0,
        total_timeout=60.0,
    )
    read = ollama_windows if provider == "ollama" else lmstudio_windows
    with factory() as client:
        listed = read(client, base_url)
    list_url = endpoint_url(base_url, "/api/ps" if provider == "ollama" else "/api/v0/models")
    models = [
        _local_server_model(model_id, window, chat=chat, list_url=list_url)
        for model_id, (window, chat) in listed.items()
    ]
    return sorted(models, key=lambda model: (not model.chat, model.id))


def _local_server_model(
    model_id: str,
    window: tuple[int | None, str, str | None],
    *,
    chat: bool,
    list_url: str | None,
) -> DiscoveredModel:
    size, source, warning = window
    reported = size is not None
    size = size if reported else PLATFORM_DEFAULT_WINDOW
    return DiscoveredModel(
        id=model_id,
        chat=chat,
        context_window=size,
        max_output_tokens=_configured_output(size, None),
        max_output_cap=None,
        window_source=source,
        source_url=list_url if reported else None,
        verified_on=None,
        warning=warning,
    )


def _local_demo() -> DiscoveredModel:
    return DiscoveredModel(
        id=LOCAL_DEMO_MODEL_ID,
        chat=True,
        context_window=PLATFORM_DEFAULT_WINDOW,
        max_output_tokens=DEFAULT_MAX_OUTPUT_TOKENS,
        max_output_cap=None,
        window_source="platform_default",
        source_url=None,
        verified_on=None,
        demo=True,
    )


def _list_entries(document: Any) -> list[Any]:
    if isinstance(document, list):
        return document
    if isinstance(document, dict):
        for key in ("data", "models"):
            if isinstance(document.get(key), list):
                return document[key]
    raise ProviderError("protocol", "The provider's answer is not a list of models.")


def _entry_id(entry: Any) -> str | None:
    if isinstance(entry, str):
        candidate: Any = entry
    elif isinstance(entry, dict):
        candidate = entry.get("id") or entry.get("model") or entry.get("name")
    else:
        return None
    if not isinstance(candidate, str):
        return None
    candidate = candidate.strip()
    if not candidate or len(candidate) > _MAX_ID_LENGTH or not candidate.isprintable():
        return None
    return candidate


def _describe(
    provider: str,
    model_id: str,
    entry: dict[str, Any],
    *,
    official: bool,
    manifest: Manifest,
    list_url: str | None,
    checked_on: str | None,
    served: tuple[tuple[int | None, str, str | None], str] | None = None,
) -> DiscoveredModel:
    window, cap = _listed_sizes(entry)
    listed = manifest.lookup(provider, model_id) if official else None
    warning = None
    if served is not None:
        # What the server runs the model with beats what a list says it could take.
        (window, source, warning), source_url = served
        verified_on = checked_on
    elif window is not None:
        source, source_url, verified_on = "provider", list_url, checked_on
    elif listed is not None and listed.context_window is not None:
        window, source = listed.context_window, "official_manifest"
        source_url, verified_on = listed.source_url, listed.verified_on
    else:
        window, source, source_url, verified_on = (
            PLATFORM_DEFAULT_WINDOW,
            "platform_default",
            None,
            None,
        )
    if cap is None and listed is not None:
        cap = listed.max_output_cap
    tokenizer = listed.tokenizer if listed is not None else None
    retirement = listed.retirement() if listed is not None else None
    return DiscoveredModel(
        id=model_id,
        chat=_is_chat(provider, model_id, entry, manifest),
        context_window=window,
        max_output_tokens=_configured_output(window, cap),
        max_output_cap=cap,
        window_source=source,
        source_url=source_url,
        verified_on=verified_on,
        tokenizer=tokenizer,
        estimator=_ESTIMATOR_OF_TOKENIZER.get(tokenizer or "", "bytes"),
        warning=warning,
        retired=retirement.to_dict() if retirement is not None else None,
    )


def retirement_of(
    provider: str,
    base_url: str,
    model_id: str,
    *,
    today: datetime.date | None = None,
    manifest: Manifest | None = None,
) -> Retirement | None:
    """Return the provider's retirement of exactly `model_id` if it is past on `today`.

    On the official endpoint only: a proxy or a self-hosted server may go on serving a name the
    provider retired, so the manifest's retirements never apply to one.
    """
    if provider not in PROVIDERS or not is_official_endpoint(provider, base_url):
        return None
    entry = (manifest or load_manifest()).lookup(provider, model_id)
    retirement = entry.retirement() if entry is not None else None
    if retirement is None or (today or datetime.date.today()).isoformat() <= retirement.retired_on:
        return None
    return retirement


def _configured_output(window: int, cap: int | None) -> int:
    # The default reservation, never above the provider's cap, and never the whole window.
    limit = DEFAULT_MAX_OUTPUT_TOKENS
    if cap is not None:
        limit = min(limit, cap)
    return max(1, min(limit, window // 2))


def _listed_sizes(entry: dict[str, Any]) -> tuple[int | None, int | None]:
    """Return the (window, output cap) a list entry states, ignoring junk values."""
    top = entry.get("top_provider") if isinstance(entry.get("top_provider"), dict) else {}
    window = _first_size(
        entry.get("context_window"),
        entry.get("context_length"),
        entry.get("max_model_len"),
        entry.get("max_context_length"),
        top.get("context_length"),
    )
    cap = _first_size(
        entry.get("max_output_tokens"),
        entry.get("max_completion_tokens"),
        top.get("max_completion_tokens"),
    )
    max_input = _size(entry.get("max_input_tokens"))
    max_tokens = _size(entry.get("max_tokens"))
    if window is None and max_input is not None:
        # Input and output limits listed apart (some gateways): `max_tokens` is then the output.
        cap = cap if cap is not None else max_tokens
        window = max_input + cap if cap is not None else max_input
    elif max_tokens is not None:
        if window is None and (cap is None or max_tokens > cap):
            # The only size a server gives is its window (several self-hosted servers do this).
            window = max_tokens
        elif window is not None and cap is None and max_tokens < window:
            cap = max_tokens
    if window is not None and cap is not None and cap > window:
        cap = None
    return window, cap


def _first_size(*values: Any) -> int | None:
    for value in values:
        size = _size(value)
        if size is not None:
            return size
    return None


def _size(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 < value <= _MAX_SANE_TOKENS:
        return value
    return None


def _is_chat(provider: str, model_id: str, entry: dict[str, Any], manifest: Manifest) -> bool:
    listed: ManifestEntry | None = manifest.lookup(provider, model_id)
    if listed is not None:
        return listed.chat
    # A proxy serving an exact ID the manifest knows as non-chat serves the same kind of model.
    if any(not other.chat for other in manifest.lookup_any(model_id)):
        return False
    for key in ("type", "mode"):
        kind = entry.get(key)
        if isinstance(kind, str) and kind.strip().lower() in _NON_CHAT_TYPES:
            return False
    return not _NON_CHAT_MARKER.search(model_id.lower())
