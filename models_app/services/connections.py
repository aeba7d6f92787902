"""Writes on model connections, and the rules every way of writing one (API, admin) goes through.

`connection_validate` applies the rules without writing, so the admin form shows the same errors
the API gives; `connection_create` and `connection_update` apply them again inside the write.

The writes are durable actions (`transaction.atomic(durable=True)`): one outermost transaction,
committed when it returns, and an error inside another atomic block. Each `<action>_nested` is
the same write as part of the caller's transaction (a savepoint there), for the admin's pages,
which Django runs in one transaction. An update that changes a connection's key keeps the old
key for redaction only (`models_app.services.redaction`).
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError
from django.utils import timezone

from agentloom.engine import ConfigurationError, ModelBudget
from agentloom.errors import Conflict, InvalidInput
from agentloom.providers import (
    DEFAULT_MAX_OUTPUT_TOKENS,
    ESTIMATOR_NAMES,
    LOCAL_DEMO_MODEL_ID,
    METADATA_HOSTNAMES,
    OFFICIAL_ENDPOINTS,
    PROVIDERS,
    WINDOW_SOURCES,
    DiscoveredModel,
    ProviderError,
    address_refusal,
    is_chat_model_id,
    is_official_endpoint,
    model_defaults,
    normalise_base_url,
    numeric_host,
    thinking_output_floor,
)
from agentloom.spaces.models import Space
from agentloom.spaces.selectors import require_space_admin
from agentloom.validation import clean_text
from models_app.models import ModelConnection
from models_app.services.redaction import keys_after_change

__all__ = [
    "CONNECTION_FIELDS",
    "DEFAULT_BASE_URLS",
    "DEFAULT_SAFETY_MARGIN_TOKENS",
    "MAX_API_KEY_CHARS",
    "MAX_TOKENS",
    "WINDOW_VALUES",
    "clean_api_key",
    "clean_base_url",
    "clean_provider",
    "connection_create",
    "connection_create_nested",
    "connection_delete",
    "connection_delete_nested",
    "connection_learn",
    "connection_update",
    "connection_update_nested",
    "connection_validate",
    "same_endpoint",
]

CONNECTION_FIELDS = (
    "name",
    "provider",
    "base_url",
    "api_key",
    "model_id",
    "context_window",
    "max_output_tokens",
    "max_output_cap",
    "safety_margin_tokens",
    "window_source",
    "source_url",
    "verified_on",
    "estimator",
    "estimator_source",
    "num_ctx",
    "thinking",
    "reasoning_effort",
    "reasoning_passback",
    "prices",
)
# The estimators a connection may measure with: the provider layer's, and the server's own
# tokenizer on a self-hosted server.
SERVER_ESTIMATOR = ModelConnection.Estimator.SERVER
ESTIMATORS = tuple(dict.fromkeys((*ESTIMATOR_NAMES, *ModelConnection.Estimator.values)))
# The values a window source vouches for; sending any of them without a source makes it manual.
WINDOW_VALUES = ("context_window", "max_output_tokens", "max_output_cap")
DEFAULT_SAFETY_MARGIN_TOKENS = 1_024
# Far above any real window; the column is a 32-bit integer on PostgreSQL.
MAX_TOKENS = 100_000_000
MAX_API_KEY_CHARS = 4_096
MAX_NAME_CHARS = 120
MAX_MODEL_ID_CHARS = 200
MAX_URL_CHARS = 500
# Far above any real price per million tokens; anything above is a typo.
MAX_PRICE = Decimal("100000")

# The official endpoint a connection gets when no base URL is given (both are in
# OFFICIAL_ENDPOINTS, so the manifest applies to them).
DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "deepseek": "https://api.deepseek.com",
}
assert all(url in OFFICIAL_ENDPOINTS[name] for name, url in DEFAULT_BASE_URLS.items())

# Hosted providers answer nothing without a key; a self-hosted compatible server may not need one.
KEY_REQUIRED = frozenset({"openai", "deepseek"})
_REQUIRED = "This field is required."


# --- field cleaning (shared with discovery) ----------------------------------------------------


def clean_provider(value: Any) -> str:
    """Return `value` if it names a provider, else raise InvalidInput naming `provider`."""
    if value is None or value == "":
        raise InvalidInput(_REQUIRED, field="provider")
    if not isinstance(value, str) or value not in PROVIDERS:
        raise InvalidInput(f"Must be one of: {', '.join(PROVIDERS)}.", field="provider")
    return value


def clean_base_url(provider: str, value: Any) -> str:
    """Return the normalised base URL for `provider`, its official URL when blank, "" for local."""
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise InvalidInput("Must be a string.", field="base_url")
    value = value.strip()
    if provider == "local":
        return ""
    if not value:
        if provider in DEFAULT_BASE_URLS:
            return DEFAULT_BASE_URLS[provider]
        if provider in ("ollama", "lmstudio"):
            raise InvalidInput(
                "A local server connection needs the server's base URL, such as "
                "http://127.0.0.1:11434 (Ollama) or http://127.0.0.1:1234 (LM Studio).",
                field="base_url",
            )
        raise InvalidInput(
            "An OpenAI-compatible connection needs the server's base URL.", field="base_url"
        )
    if len(value) > MAX_URL_CHARS:
        raise InvalidInput(f"At most {MAX_URL_CHARS} characters.", field="base_url")
    try:
        url = normalise_base_url(value)
    except ProviderError as error:
        raise InvalidInput(error.message, field="base_url") from None
    _refuse_known_unreachable(url)
    return url


def _refuse_known_unreachable(url: str) -> None:
    # Names are resolved and checked on every call; a literal address or a metadata name can be
    # refused now, so a connection that could never be used is not saved.
    host = (urlsplit(url).hostname or "").rstrip(".")
    if host in METADATA_HOSTNAMES:
        raise InvalidInput("The provider host is a cloud metadata service.", field="base_url")
    literal = numeric_host(host)
    if literal is not None:
        reason = address_refusal(literal, allow_private_hosts=settings.ALLOW_PRIVATE_MODEL_HOSTS)
        if reason:
            raise InvalidInput(f"The provider address is refused: {reason}.", field="base_url")


def clean_api_key(value: Any) -> str:
    """Return the key stripped ("" when blank); the message never repeats the key."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput("Must be a string.", field="api_key")
    value = value.strip()
    if len(value) > MAX_API_KEY_CHARS:
        raise InvalidInput(f"At most {MAX_API_KEY_CHARS} characters.", field="api_key")
    # It is sent in an HTTP header, which carries visible ASCII only (a line break would even
    # inject headers); refusing here names the field instead of failing at the provider call.
    if not all("!" <= char <= "~" for char in value):
        raise InvalidInput(
            "An API key is visible ASCII characters only, without spaces.", field="api_key"
        )
    return value


def same_endpoint(connection: ModelConnection, provider: str, base_url: str) -> bool:
    """Return whether `provider` at `base_url` is the endpoint `connection` stores a key for."""
    return connection.provider == provider and _normalised(connection.base_url) == _normalised(
        base_url
    )


def _normalised(base_url: str) -> str:
    try:
        return normalise_base_url(base_url) if base_url else ""
    except ProviderError:
        return base_url


def _clean_model_id(value: Any, provider: str) -> str:
    if provider == "local":
        if value is None or value == "":
            return LOCAL_DEMO_MODEL_ID
        if value != LOCAL_DEMO_MODEL_ID:
            raise InvalidInput(
                f"The local demo provider serves only {LOCAL_DEMO_MODEL_ID!r}.", field="model_id"
            )
        return value
    model_id = clean_text(value, field="model_id", max_chars=MAX_MODEL_ID_CHARS, single_line=True)
    if not is_chat_model_id(provider, model_id):
        raise InvalidInput(
            "This model does not serve chat completions; choose a chat model.", field="model_id"
        )
    return model_id


def _clean_tokens(value: Any, *, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput("Must be a whole number.", field=field)
    if value < minimum:
        raise InvalidInput(f"Must be at least {minimum}.", field=field)
    if value > MAX_TOKENS:
        raise InvalidInput(f"Must be at most {MAX_TOKENS}.", field=field)
    return value


# A person or discovery may name these; `learned` is written by runs only (`connection_learn`).
CHOOSABLE_WINDOW_SOURCES = tuple(
    dict.fromkeys(
        source
        for source in (*WINDOW_SOURCES, *ModelConnection.WindowSource.values)
        if source != ModelConnection.WindowSource.LEARNED
    )
)


def _clean_window_source(value: Any, *, derived: str = "") -> str:
    if value == derived:
        return value
    if not isinstance(value, str) or value not in CHOOSABLE_WINDOW_SOURCES:
        raise InvalidInput(
            f"Must be one of: {', '.join(CHOOSABLE_WINDOW_SOURCES)}.", field="window_source"
        )
    return value


def _clean_source_url(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidInput("Must be a string.", field="source_url")
    value = value.strip()
    if not value:
        return ""
    if len(value) > MAX_URL_CHARS:
        raise InvalidInput(f"At most {MAX_URL_CHARS} characters.", field="source_url")
    try:
        parts = urlsplit(value)
    except ValueError:
        parts = None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or any(char.isspace() or not char.isprintable() for char in value)
    ):
        raise InvalidInput("Must be an http or https URL.", field="source_url")
    return value


def _clean_date(value: Any) -> datetime.date:
    if isinstance(value, datetime.datetime) or not isinstance(value, datetime.date | str):
        raise InvalidInput("Must be a date (YYYY-MM-DD).", field="verified_on")
    if isinstance(value, str):
        try:
            value = datetime.date.fromisoformat(value.strip())
        except ValueError:
            raise InvalidInput("Must be a date (YYYY-MM-DD).", field="verified_on") from None
    return value


def _default_output(window: int, cap: int | None) -> int:
    # As discovery fills it in: the default reservation, never above the cap or half the window.
    limit = DEFAULT_MAX_OUTPUT_TOKENS if cap is None else min(DEFAULT_MAX_OUTPUT_TOKENS, cap)
    return max(1, min(limit, window // 2))


def _above_thinking_floor(
    provider: str, tokens: int, *, thinking: str, chosen: bool, cap: int | None
) -> int:
    """Return the output limit raised to the thinking floor; a chosen limit below it is refused.

    A thinking model counts its chain of thought in the limit (`THINKING_OUTPUT_FLOOR`); with
    thinking disabled there is none, so no floor.
    """
    floor = thinking_output_floor(provider, thinking=thinking)
    if floor is None or tokens >= floor or (cap is not None and cap < floor):
        return tokens
    if chosen:
        raise InvalidInput(
            f"A thinking model counts its chain of thought in this limit: at least {floor}.",
            field="max_output_tokens",
        )
    return floor


# --- resolving one connection's values ----------------------------------------------------------


def _resolve(
    *, space_id: int, current: ModelConnection | None, fields: dict[str, Any]
) -> dict[str, Any]:
    """Return every stored value of the connection `fields` describe (over `current` on update)."""
    if "space" in fields and current is not None:
        raise InvalidInput("A connection cannot move to another space.", field="space")
    unknown = sorted(set(fields) - set(CONNECTION_FIELDS))
    if unknown:
        raise InvalidInput("Unknown field.", field=unknown[0])

    def given(name: str) -> bool:
        return name in fields

    if given("provider") or current is None:
        provider = clean_provider(fields.get("provider"))
    else:
        provider = current.provider
    provider_changed = current is not None and provider != current.provider

    if given("base_url") or current is None:
        base_url = clean_base_url(provider, fields.get("base_url"))
    elif provider_changed and (
        not current.base_url or is_official_endpoint(current.provider, current.base_url)
    ):
        # The old provider's own endpoint means nothing to the new one.
        base_url = clean_base_url(provider, "")
    else:
        base_url = clean_base_url(provider, current.base_url)

    if given("name") or current is None:
        name = clean_text(
            fields.get("name"), field="name", max_chars=MAX_NAME_CHARS, single_line=True
        )
    else:
        name = current.name
    clash = ModelConnection.objects.filter(space_id=space_id, name=name)
    if current is not None:
        clash = clash.exclude(pk=current.pk)
    if clash.exists():
        raise InvalidInput(
            "A model connection with this name already exists in this space.", field="name"
        )

    if given("model_id") and fields["model_id"] not in (None, ""):
        model_id = _clean_model_id(fields["model_id"], provider)
    elif (
        current is not None
        and not given("model_id")
        and "local" not in (provider, current.provider)
    ):
        model_id = _clean_model_id(current.model_id, provider)
    else:
        model_id = _clean_model_id(None, provider)

    api_key = _resolve_key(current, fields, provider=provider, base_url=base_url)
    num_ctx = _resolve_num_ctx(current, fields, provider=provider)
    thinking = _resolve_thinking(current, fields, provider=provider)
    window = _resolve_window(
        current,
        fields,
        provider=provider,
        base_url=base_url,
        model_id=model_id,
        num_ctx=num_ctx,
        thinking=thinking["thinking"],
    )
    estimator = _resolve_estimator(
        current, fields, provider=provider, base_url=base_url, model_id=model_id
    )
    same_model = current is not None and (
        current.provider,
        _normalised(current.base_url),
        current.model_id,
    ) == (provider, base_url, model_id)
    prices = _resolve_prices(
        current if same_model else None, fields, provider=provider, base_url=base_url
    )
    reasoning = _resolve_reasoning(current, fields, provider=provider)
    learned = _resolve_learned(
        current if same_model else None, fields, same_window=window["same_window"]
    )
    del window["same_window"]
    return {
        "name": name,
        "provider": provider,
        "base_url": base_url,
        "api_key": api_key,
        "model_id": model_id,
        "num_ctx": num_ctx,
        **window,
        **estimator,
        **thinking,
        "reasoning_passback": reasoning,
        **learned,
        "prices": prices,
    }


def _resolve_reasoning(
    current: ModelConnection | None, fields: dict[str, Any], *, provider: str
) -> str:
    """Return whether reasoning goes back ("" learned, `never`, `tool_spans`); kept if omitted."""
    choices = ModelConnection.ReasoningPassback.values
    if "reasoning_passback" in fields:
        value = fields["reasoning_passback"] or ""
    else:
        value = current.reasoning_passback if current is not None else ""
    if value not in choices:
        raise InvalidInput(f"Must be one of: {', '.join(choices[1:])}.", field="reasoning_passback")
    if value and provider == "local":
        raise InvalidInput("The demo model has no reasoning.", field="reasoning_passback")
    return value


def _resolve_learned(
    current: ModelConnection | None, fields: dict[str, Any], *, same_window: bool
) -> dict[str, Any]:
    """Return what runs learned, kept while the model stays the same (`current` is None else).

    A person who edits the window (any window value sent, a value or null) overrides the
    learned one: it is cleared, and the audit rows keep what was learned and when.
    """
    keep_window = (
        current is not None and same_window and not any(name in fields for name in WINDOW_VALUES)
    )
    return {
        "learned_window": current.learned_window if keep_window else None,
        "learned_window_evidence": current.learned_window_evidence if keep_window else "",
        "learned_window_at": current.learned_window_at if keep_window else None,
        "learned_reasoning": current.learned_reasoning if current is not None else "",
    }


def _resolve_thinking(
    current: ModelConnection | None, fields: dict[str, Any], *, provider: str
) -> dict[str, str]:
    """Return DeepSeek's thinking mode and effort ("" for the provider's default).

    Only DeepSeek takes them; an effort applies to thinking mode, so it is refused beside
    `thinking: disabled`. Omitted values are kept on update while the provider stays DeepSeek.
    """
    values = {}
    for name, choices in (
        ("thinking", ModelConnection.Thinking.values),
        ("reasoning_effort", ModelConnection.ReasoningEffort.values),
    ):
        value = fields.get(name)
        if name not in fields:
            value = getattr(current, name) if current and current.provider == provider else ""
        value = value or ""
        if value not in choices:
            raise InvalidInput(f"Must be one of: {', '.join(choices[1:])}.", field=name)
        if value and provider != "deepseek":
            raise InvalidInput("Only a DeepSeek connection sends this setting.", field=name)
        values[name] = value
    if values["thinking"] == "disabled" and values["reasoning_effort"]:
        raise InvalidInput(
            "A reasoning effort applies in thinking mode only; leave it blank when thinking is "
            "disabled.",
            field="reasoning_effort",
        )
    return values


_PRICE_KEYS = ("input", "cached_input", "output")


def _resolve_prices(
    current: ModelConnection | None, fields: dict[str, Any], *, provider: str, base_url: str
) -> dict[str, Any] | None:
    """Return the operator's prices of a custom endpoint, with the date they were entered.

    The official endpoints' prices come from the manifest, so none may be entered there. Omitted
    prices are kept on update while provider, base URL and model stay the same; null clears them.
    """
    if "prices" not in fields:
        kept = current.prices if current is not None else None
        if kept and (provider == "local" or is_official_endpoint(provider, base_url)):
            return None
        return kept
    value = fields["prices"]
    if value is None:
        return None
    if provider == "local" or is_official_endpoint(provider, base_url):
        raise InvalidInput(
            "Prices of a provider's official endpoint come from the manifest; enter prices only "
            "for a custom endpoint.",
            field="prices",
        )
    if not isinstance(value, dict):
        raise InvalidInput(
            "Must be an object {input, cached_input, output, currency}.", field="prices"
        )
    unknown = sorted(set(value) - {*_PRICE_KEYS, "currency"})
    if unknown:
        raise InvalidInput(f"Unknown field {unknown[0]}.", field="prices")
    currency = value.get("currency")
    if not isinstance(currency, str) or not re.fullmatch(r"[A-Z]{3}", currency):
        raise InvalidInput("currency must be a three-letter code such as USD.", field="prices")
    cleaned: dict[str, Any] = {"currency": currency}
    for key in _PRICE_KEYS:
        cleaned[key] = _clean_price(value.get(key), key, optional=key == "cached_input")
    same = (
        current is not None
        and current.prices
        and all(current.prices.get(key) == cleaned[key] for key in cleaned)
    )
    cleaned["entered_on"] = (
        current.prices["entered_on"] if same else datetime.date.today().isoformat()
    )
    return cleaned


def _clean_price(value: Any, key: str, *, optional: bool) -> str | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidInput(f"{key} must be a price per million tokens.", field="prices")
    try:
        price = Decimal(str(value).strip())
    except InvalidOperation:
        raise InvalidInput(f"{key} must be a price per million tokens.", field="prices") from None
    if not price.is_finite() or price < 0 or price > MAX_PRICE:
        raise InvalidInput(f"{key} must be between 0 and {MAX_PRICE}.", field="prices")
    return format(price.normalize(), "f")


def _resolve_num_ctx(
    current: ModelConnection | None, fields: dict[str, Any], *, provider: str
) -> int | None:
    """Return the num_ctx an Ollama connection sends (None: Ollama's server default).

    Only Ollama takes one; an omitted value is kept on update while the provider stays Ollama.
    """
    if "num_ctx" in fields and fields["num_ctx"] is not None:
        if provider != "ollama":
            raise InvalidInput("Only an Ollama connection sends num_ctx.", field="num_ctx")
        return _clean_tokens(fields["num_ctx"], field="num_ctx", minimum=1)
    if "num_ctx" in fields or provider != "ollama" or current is None:
        return None
    return current.num_ctx if current.provider == "ollama" else None


def _resolve_estimator(
    current: ModelConnection | None,
    fields: dict[str, Any],
    *,
    provider: str,
    base_url: str,
    model_id: str,
) -> dict[str, str]:
    """Return the estimator and whether it was chosen by hand.

    An estimator sent is `manual`; `estimator_source: auto` (or a new model) takes what the
    manifest knows for this exact model on its official endpoint, else `bytes`; an update that
    changes neither keeps a hand-picked estimator. `server` (the server's own tokenizer) may
    also come with `auto`: a connection test or a listing found that the server tokenizes
    (`models_app.services.discovery`), and it stays while the model does.
    """
    requested = fields.get("estimator")
    source = fields.get("estimator_source")
    if source not in (None, "", *ModelConnection.EstimatorSource.values):
        raise InvalidInput(
            f"Must be one of: {', '.join(ModelConnection.EstimatorSource.values)}.",
            field="estimator_source",
        )
    same_model = current is not None and (
        current.provider,
        _normalised(current.base_url),
        current.model_id,
    ) == (provider, base_url, model_id)
    if requested not in (None, ""):
        if requested not in ESTIMATORS:
            raise InvalidInput(f"Must be one of: {', '.join(ESTIMATORS)}.", field="estimator")
        if requested == SERVER_ESTIMATOR:
            _require_tokenizing_server(provider, base_url)
        elif source == "auto":
            raise InvalidInput(
                "An estimator picked by hand is `manual`; send estimator_source auto alone to "
                "go back to the automatic choice.",
                field="estimator_source",
            )
        return {"estimator": requested, "estimator_source": source or "manual"}
    if source != "auto" and same_model and current.estimator_source == "manual":
        return {"estimator": current.estimator, "estimator_source": "manual"}
    if source == "manual":
        raise InvalidInput("Send the estimator you pick.", field="estimator")
    if source != "auto" and same_model and current.estimator == SERVER_ESTIMATOR:
        return {"estimator": SERVER_ESTIMATOR, "estimator_source": "auto"}
    automatic = model_defaults(provider, base_url, model_id).estimator
    return {"estimator": automatic, "estimator_source": "auto"}


def _require_tokenizing_server(provider: str, base_url: str) -> None:
    """Refuse the `server` estimator where no server of ours tokenizes: the demo model and the
    hosted providers' official endpoints."""
    if provider == "local" or is_official_endpoint(provider, base_url):
        raise InvalidInput(
            "Only a self-hosted server counts with its own tokenizer; this endpoint has none.",
            field="estimator",
        )


def _resolve_key(
    current: ModelConnection | None, fields: dict[str, Any], *, provider: str, base_url: str
) -> str:
    key = clean_api_key(fields.get("api_key"))
    if provider == "local":
        return ""
    if not key and current is not None and current.api_key:
        # A stored key goes only to the endpoint it was entered for.
        if not same_endpoint(current, provider, base_url):
            raise InvalidInput(
                "Enter the API key again: a stored key is reused only while the provider "
                "and base URL stay the same.",
                field="api_key",
            )
        key = current.api_key
    if not key and provider in KEY_REQUIRED:
        raise InvalidInput("This provider needs an API key.", field="api_key")
    return key


def _resolve_window(
    current: ModelConnection | None,
    fields: dict[str, Any],
    *,
    provider: str,
    base_url: str,
    model_id: str,
    num_ctx: int | None = None,
    thinking: str,
) -> dict[str, Any]:
    """Return the window values, their source, source link and verification date.

    An Ollama connection that sends num_ctx runs every request with that window, so it is the
    default window (source `num_ctx`).

    A value sent is used as sent; null means "the default" (what the manifest or the fallback
    gives, never asking the provider); an omitted value is kept on update while the model stays
    the same, else it is the default too.
    """
    defaults = _window_defaults(provider, base_url, model_id, num_ctx)
    sent = _sent_tokens(fields)
    # A changed num_ctx changes the window the server runs with, as another model would.
    same_model = current is not None and (
        current.provider,
        _normalised(current.base_url),
        current.model_id,
        current.num_ctx,
    ) == (provider, base_url, model_id, num_ctx)
    kept = {
        name: getattr(current, name) for name in WINDOW_VALUES if same_model and name not in fields
    }
    sizes = _window_sizes(provider, defaults, sent=sent, kept=kept, thinking=thinking)
    margin = _safety_margin(current, fields, sent=sent)
    _require_input_budget(sizes, margin, sent=sent)
    source, source_url, verified_on = _resolve_source(
        current, fields, defaults=defaults, sent=sent, kept=kept
    )
    return {
        "same_window": same_model,
        "context_window": sizes["context_window"],
        "max_output_tokens": sizes["max_output_tokens"],
        "max_output_cap": sizes["max_output_cap"],
        "safety_margin_tokens": margin,
        "window_source": source,
        "source_url": source_url,
        "verified_on": verified_on,
    }


def _window_defaults(
    provider: str, base_url: str, model_id: str, num_ctx: int | None
) -> DiscoveredModel:
    """Return the model's default window values; an Ollama num_ctx is the window it runs with."""
    defaults = model_defaults(provider, base_url, model_id)
    if num_ctx is None:
        return defaults
    return dataclasses.replace(
        defaults,
        context_window=num_ctx,
        max_output_tokens=_default_output(num_ctx, None),
        window_source="num_ctx",
        source_url=None,
        verified_on=None,
        warning=None,
    )


def _sent_tokens(fields: dict[str, Any]) -> dict[str, int]:
    """Return the window values and safety margin `fields` sends (null ones are not sent)."""
    sent: dict[str, int] = {}
    for name in (*WINDOW_VALUES, "safety_margin_tokens"):
        if fields.get(name) is not None:
            minimum = 0 if name == "safety_margin_tokens" else 1
            sent[name] = _clean_tokens(fields[name], field=name, minimum=minimum)
    return sent


def _window_sizes(
    provider: str,
    defaults: DiscoveredModel,
    *,
    sent: dict[str, int],
    kept: dict[str, Any],
    thinking: str,
) -> dict[str, Any]:
    """Return the context window, output cap and output reservation: each as sent, else as kept,
    else its default; the reservation stays under the cap and at a thinking model's floor."""
    chosen = {**kept, **sent}
    context_window = chosen.get("context_window", defaults.context_window)
    max_output_cap = chosen.get("max_output_cap", defaults.max_output_cap)
    if "max_output_cap" in sent and max_output_cap > context_window:
        raise InvalidInput(
            f"The output cap cannot exceed the context window ({context_window}).",
            field="max_output_cap",
        )
    max_output_tokens = chosen.get(
        "max_output_tokens", _default_output(context_window, max_output_cap)
    )
    if max_output_cap is not None and max_output_tokens > max_output_cap:
        if "max_output_tokens" in sent:
            raise InvalidInput(
                f"Must not exceed max_output_cap ({max_output_cap}).", field="max_output_tokens"
            )
        # Not chosen in this request (a default, or the old value under a lowered cap).
        max_output_tokens = max_output_cap
    max_output_tokens = _above_thinking_floor(
        provider,
        max_output_tokens,
        thinking=thinking,
        chosen="max_output_tokens" in sent,
        cap=max_output_cap,
    )
    return {
        "context_window": context_window,
        "max_output_tokens": max_output_tokens,
        "max_output_cap": max_output_cap,
    }


def _safety_margin(
    current: ModelConnection | None, fields: dict[str, Any], *, sent: dict[str, int]
) -> int:
    """Return the margin sent, else the stored one on update, else the default."""
    if "safety_margin_tokens" in sent:
        return sent["safety_margin_tokens"]
    if current is not None and "safety_margin_tokens" not in fields:
        return current.safety_margin_tokens
    return DEFAULT_SAFETY_MARGIN_TOKENS


def _require_input_budget(sizes: dict[str, Any], margin: int, *, sent: dict[str, int]) -> None:
    """Refuse values that leave no input budget, naming the first value sent."""
    context_window, max_output_tokens = sizes["context_window"], sizes["max_output_tokens"]
    budget = context_window - max_output_tokens - margin
    if budget <= 0:
        named = [name for name in (*WINDOW_VALUES, "safety_margin_tokens") if name in sent]
        raise InvalidInput(
            "The effective input budget (context_window - max_output_tokens - "
            f"safety_margin_tokens = {context_window} - {max_output_tokens} - {margin} = "
            f"{budget}) must be positive.",
            field=named[0] if named else "context_window",
        )


def _resolve_source(current, fields, *, defaults, sent, kept) -> tuple[str, str, Any]:
    sent_window = any(name in sent for name in WINDOW_VALUES)
    if sent_window:
        derived = ("manual", "", None)
    elif not kept:
        derived = (
            defaults.window_source,
            defaults.source_url or "",
            defaults.verified_on and _clean_date(defaults.verified_on),
        )
    elif len(kept) == len(WINDOW_VALUES) or current.window_source == defaults.window_source:
        derived = (current.window_source, current.source_url, current.verified_on)
    else:
        # Some values kept, some reset to defaults of another source: nobody vouches for the mix.
        derived = ("manual", "", None)

    requested = fields.get("window_source")
    if requested in (None, ""):
        source, source_url, verified_on = derived
    else:
        source = _clean_window_source(requested, derived=derived[0])
        if not sent_window and source not in ("manual", derived[0]):
            raise InvalidInput(
                f"Send the window values that come from {source}; without them the values "
                f"come from {derived[0]}.",
                field="window_source",
            )
        source_url, verified_on = derived[1:] if source == derived[0] else ("", None)

    if fields.get("source_url") is not None:
        source_url = _clean_source_url(fields["source_url"])
    if fields.get("verified_on") not in (None, ""):
        verified_on = _clean_date(fields["verified_on"])
    return source, source_url, verified_on


# --- writes -------------------------------------------------------------------------------------


def connection_validate(
    *,
    user,
    space: Space | None = None,
    connection: ModelConnection | None = None,
    fields: dict[str, Any],
) -> dict[str, Any]:
    """Return the values a create in `space` (or an update of `connection`) would store.

    Raise what the write would raise; write nothing.
    """
    if connection is not None:
        require_space_admin(user, connection.space_id)
        return _resolve(space_id=connection.space_id, current=connection, fields=fields)
    if space is None:
        raise InvalidInput(_REQUIRED, field="space")
    require_space_admin(user, space)
    return _resolve(space_id=space.pk, current=None, fields=fields)


@transaction.atomic(durable=True)
def connection_create(*, user, space: Space, **fields: Any) -> ModelConnection:
    """Create a model connection in `space` (space admins only)."""
    return connection_create_nested(user=user, space=space, **fields)


@transaction.atomic
def connection_create_nested(*, user, space: Space, **fields: Any) -> ModelConnection:
    """`connection_create` as part of the caller's transaction."""
    values = connection_validate(user=user, space=space, fields=fields)
    connection = ModelConnection(space=space, **values)
    _save(connection)
    return connection


@transaction.atomic(durable=True)
def connection_update(*, user, connection: ModelConnection, **changes: Any) -> ModelConnection:
    """Change a model connection (space admins only); a blank key keeps the stored one."""
    return connection_update_nested(user=user, connection=connection, **changes)


@transaction.atomic
def connection_update_nested(
    *, user, connection: ModelConnection, **changes: Any
) -> ModelConnection:
    """`connection_update` as part of the caller's transaction."""
    require_space_admin(user, connection.space_id)
    # Compare with the stored row, not with whatever the caller's instance holds in memory.
    current = ModelConnection.objects.select_for_update().get(pk=connection.pk)
    values = _resolve(space_id=current.space_id, current=current, fields=changes)
    current.previous_api_keys = keys_after_change(current, values["api_key"])
    for name, value in values.items():
        setattr(current, name, value)
    _save(current)
    return current


@transaction.atomic(durable=True)
def connection_delete(*, user, connection: ModelConnection) -> None:
    """Delete a connection no agent uses (space admins only); else raise Conflict."""
    connection_delete_nested(user=user, connection=connection)


@transaction.atomic
def connection_delete_nested(*, user, connection: ModelConnection) -> None:
    """`connection_delete` as part of the caller's transaction."""
    require_space_admin(user, connection.space_id)
    versions = list(
        connection.agent_versions.select_related("agent").order_by("agent_id", "number")[:6]
    )
    if versions:
        raise Conflict(
            f"Published agent versions use this connection ({_listing(versions)}); a published "
            "version is frozen, so the connection cannot be deleted."
        )
    agents = list(connection.agents.order_by("id")[:6])
    if agents:
        raise Conflict(
            f"Draft agents use this connection ({_listing(agents)}); choose another connection "
            "for them first."
        )
    try:
        connection.delete()
    except ProtectedError:
        # Something started using it between the check and the delete.
        raise Conflict("Agents use this connection; it cannot be deleted.") from None


LEARNED_KINDS = ("context_window", "reasoning")
MAX_EVIDENCE_CHARS = 200


@transaction.atomic(durable=True)
def connection_learn(
    *,
    connection_id: int,
    kind: str,
    value: Any,
    evidence: str,
    user_id: int,
    origin: str,
    serves: tuple[str, str] | None = None,
) -> bool:
    """Record on the connection what a run learned from its server; return whether it changed.

    A window (`context_window`) is recorded only when it is smaller than the connection's: it
    becomes the window (source `learned`), with the server's words, the date and an audit row,
    and the output reservation and margin keep their shares of the window
    (`ModelBudget.within`). A
    reasoning rule (`reasoning`) is recorded once. `user_id` is the person whose run learned it
    and `origin` names the run, both for the audit row; `serves` is the (provider, model) the
    run called: nothing is recorded on a connection that now serves another. A run's own steps
    call this, never a person; a person overrides a learned window by editing the window
    (`connection_update`).
    """
    if kind not in LEARNED_KINDS:
        raise InvalidInput(f"Must be one of: {', '.join(LEARNED_KINDS)}.", field="kind")
    evidence = " ".join(str(evidence or "").split())[:MAX_EVIDENCE_CHARS]
    connection = ModelConnection.objects.select_for_update().filter(pk=connection_id).first()
    if connection is None or (serves and (connection.provider, connection.model_id) != serves):
        return False
    if kind == "reasoning":
        if value not in ModelConnection.ReasoningPassback.values or not value:
            raise InvalidInput("Not a reasoning rule.", field="value")
        if connection.learned_reasoning == value:
            return False
        connection.learned_reasoning = value
        message = f"Learned that reasoning goes back ({value}) from the server: {evidence}"
        changed = ["learned_reasoning"]
    else:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInput("Must be a whole number.", field="value")
        if value >= connection.context_window:
            return False  # a learned window never raises the connection's
        try:
            fitted = ModelBudget(
                connection.context_window,
                connection.max_output_tokens,
                connection.safety_margin_tokens,
            ).within(value)
        except ConfigurationError:
            return False  # a window too small to hold any reservation is not a window
        connection.context_window = value
        connection.max_output_tokens = fitted.max_output_tokens
        connection.safety_margin_tokens = fitted.safety_margin_tokens
        connection.window_source = ModelConnection.WindowSource.LEARNED
        connection.source_url = ""
        connection.verified_on = datetime.date.today()
        connection.learned_window = value
        connection.learned_window_evidence = evidence
        connection.learned_window_at = timezone.now()
        message = f"Learned the context window {value:,} from the server: {evidence}"
        changed = [
            "context_window",
            "max_output_tokens",
            "safety_margin_tokens",
            "window_source",
            "source_url",
            "verified_on",
            "learned_window",
            "learned_window_evidence",
            "learned_window_at",
        ]
    connection.save(update_fields=[*changed, "updated_at"])
    _audit(connection, user_id=user_id, message=f"{message} ({origin}).")
    return True


def _audit(connection: ModelConnection, *, user_id: int, message: str) -> None:
    """Write the change into the connection's history (the admin's history page shows it)."""
    LogEntry.objects.create(
        user_id=user_id,
        content_type=ContentType.objects.get_for_model(ModelConnection),
        object_id=str(connection.pk),
        object_repr=str(connection)[:200],
        action_flag=CHANGE,
        change_message=message,
    )


def _listing(rows: list) -> str:
    names = ", ".join(str(row) for row in rows[:5])
    return names + (", …" if len(rows) > 5 else "")


def _save(connection: ModelConnection) -> None:
    try:
        # Base and source URLs were checked by the provider layer's parser above; Django's
        # URLValidator would refuse single-label hosts (`http://vllm:8000/v1`) that it accepts.
        connection.full_clean(
            exclude=["space", "base_url", "source_url"],
            validate_unique=False,
            validate_constraints=False,
        )
    except DjangoValidationError as error:
        field, messages = next(iter(error.message_dict.items()))
        raise InvalidInput(" ".join(messages), field=field) from None
    try:
        with transaction.atomic():
            connection.save()
    except IntegrityError:
        # Another request saved the same name since the check.
        raise InvalidInput(
            "A model connection with this name already exists in this space.", field="name"
        ) from None
