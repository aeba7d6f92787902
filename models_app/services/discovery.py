"""Call a provider for the model page without saving anything: list its models, test a chat.

Both use the key typed on the page once, or with `resource_id` the stored key of that
connection, but only for the provider and base URL it was saved for (`_key_for_call`). A failed
call is told in the provider layer's own words (`ProviderError.message`, fixed text), read in
one place, `_failure_text`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

from django.conf import settings

from agentloom.engine import ModelRequest
from agentloom.errors import InvalidInput, PermissionDenied, UpstreamError
from agentloom.providers import (
    CallOptions,
    ClientFactory,
    DiscoveredModel,
    ModelEndpoint,
    OutputLimits,
    ProviderError,
    RetryPolicy,
    Timeouts,
    discover_models,
    gateway_for_provider,
    is_official_endpoint,
    probe_tokenizer,
)
from agentloom.ratelimit import limit
from agentloom.spaces.selectors import administered_spaces, require_space_admin
from models_app.selectors import connection_get
from models_app.services.connections import (
    KEY_REQUIRED,
    SERVER_ESTIMATOR,
    clean_api_key,
    clean_base_url,
    clean_provider,
    same_endpoint,
)

logger = logging.getLogger(__name__)


def models_discover(
    *,
    user,
    provider: Any,
    base_url: Any = "",
    api_key: Any = None,
    resource_id: int | None = None,
    client_factory: ClientFactory | None = None,
) -> list[DiscoveredModel]:
    """Return the models `provider` at `base_url` offers; the key is used once, never stored.

    With `resource_id` and a blank key, the stored key of that connection is used, but only
    for the provider and base URL it was entered for.
    """
    provider = clean_provider(provider)
    base_url = clean_base_url(provider, base_url)
    key = _key_for_call(
        user=user,
        provider=provider,
        base_url=base_url,
        api_key=api_key,
        resource_id=resource_id,
        missing="Enter the API key first: this provider lists its models only for a key.",
    )
    # Each call is an outbound request to an address an admin typed: counted once the caller
    # may make it, so that refused requests never use up an allowed caller's budget.
    limit("discovery", user.pk, what="model listings")
    try:
        models = discover_models(
            provider,
            base_url,
            key or None,
            allow_private_hosts=settings.ALLOW_PRIVATE_MODEL_HOSTS,
            client_factory=client_factory,
        )
    except ProviderError as error:
        # The kind and status only: the message is fixed text, but say no more than needed.
        logger.info(
            "model discovery failed: provider=%s kind=%s status=%s",
            provider,
            error.kind,
            error.status,
        )
        if error.kind == "address_refused":
            raise InvalidInput(_failure_text(error), field="base_url") from None
        raise UpstreamError(_failure_text(error)) from None
    chat = [model for model in models if model.chat and model.estimator == "bytes"]
    route = _tokenizer(provider, base_url, key, chat[0].id, client_factory) if chat else None
    if route is None:
        return models
    # The server counts with its own tokenizer: measuring with it beats counting bytes.
    return [
        dataclasses.replace(model, estimator=SERVER_ESTIMATOR) if model in chat else model
        for model in models
    ]


def _tokenizer(provider, base_url, key, model, client_factory) -> str | None:
    """Return the route a self-hosted server tokenizes on (None: it does not, or it is not
    self-hosted), asked on the server's own origin through the guarded client."""
    if provider == "local" or is_official_endpoint(provider, base_url):
        return None
    try:
        return probe_tokenizer(
            ModelEndpoint(base_url, key or None, model),
            calls=CallOptions(
                allow_private_hosts=settings.ALLOW_PRIVATE_MODEL_HOSTS,
                client_factory=client_factory,
                retry=RetryPolicy(max_attempts=1),
                timeouts=Timeouts(read=TEST_READ_TIMEOUT_SECONDS),
            ),
        )
    except ProviderError as error:
        logger.info("tokenizer probe failed: provider=%s kind=%s", provider, error.kind)
        return None


def _key_for_call(*, user, provider, base_url, api_key, resource_id, missing: str) -> str:
    """Return the key a call to `provider` at `base_url` is made with ("" for none).

    With `resource_id` and a blank key, that connection's stored key, only for the provider and
    base URL it was saved for; without one, only a space admin may make the server call out.
    """
    key = clean_api_key(api_key)
    if resource_id is not None:
        connection = connection_get(user=user, connection_id=resource_id)
        require_space_admin(user, connection.space_id)
        if not key and connection.api_key and provider != "local":
            if not same_endpoint(connection, provider, base_url):
                raise InvalidInput(
                    "Enter the API key: the saved key is used only with the provider and base "
                    "URL it was saved for.",
                    field="api_key",
                )
            key = connection.api_key
    elif not administered_spaces(user).exists():
        # Only someone who may create a connection has a reason to make the server call out.
        raise PermissionDenied("Only a space admin may call a provider from the model page.")
    if not key and provider in KEY_REQUIRED:
        # Said here rather than by the provider's 401 after a round trip.
        raise InvalidInput(missing, field="api_key")
    return key


def _failure_text(error: ProviderError) -> str:
    """Return what the page says of a failed provider call: the provider layer's words for it."""
    return error.message


# A connection test is one short chat request: no retries, a short wait, a tiny answer.
TEST_PROMPT = "Reply with the single word OK."
TEST_MAX_OUTPUT_TOKENS = 16
TEST_READ_TIMEOUT_SECONDS = 20.0


@dataclass(frozen=True)
class ConnectionTest:
    """What one test chat request showed: whether it answered, how fast, or why not."""

    ok: bool
    latency_ms: int
    model: str | None = None
    kind: str | None = None
    detail: str | None = None
    status: int | None = None
    # The route the server tokenizes on (None: it does not), and the estimator that suggests.
    tokenizer: str | None = None
    estimator: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def connection_test(
    *,
    user,
    provider: Any,
    base_url: Any = "",
    api_key: Any = None,
    model_id: Any = "",
    resource_id: int | None = None,
    client_factory: ClientFactory | None = None,
) -> ConnectionTest:
    """Send one tiny chat request through the guarded client and return how it went.

    Nothing is saved; the key is used for this request only (see `_key_for_call`).
    """
    # An outbound request to an address an admin typed, like a listing: the same count.
    limit("discovery", user.pk, what="connection tests")
    provider = clean_provider(provider)
    base_url = clean_base_url(provider, base_url)
    model = str(model_id or "").strip()
    if not model and provider != "local":
        raise InvalidInput(
            "Enter the model first: the test asks it one short question.", field="model_id"
        )
    key = _key_for_call(
        user=user,
        provider=provider,
        base_url=base_url,
        api_key=api_key,
        resource_id=resource_id,
        missing="Enter the API key first: this provider answers only with a key.",
    )
    gateway = _test_gateway(provider, base_url, key, model, client_factory)
    request = ModelRequest(
        purpose="verification",
        messages=[{"role": "user", "content": TEST_PROMPT}],
        max_output_tokens=TEST_MAX_OUTPUT_TOKENS,
    )
    started = time.monotonic()
    try:
        reply = gateway.complete(request)
    except ProviderError as error:
        logger.info(
            "connection test failed: provider=%s kind=%s status=%s",
            provider,
            error.kind,
            error.status,
        )
        return ConnectionTest(
            ok=False,
            latency_ms=_elapsed_ms(started),
            kind=error.kind,
            detail=_failure_text(error),
            status=error.status,
        )
    latency = _elapsed_ms(started)
    route = _tokenizer(provider, base_url, key, model, client_factory)
    return ConnectionTest(
        ok=True,
        latency_ms=latency,
        model=reply.model or model,
        tokenizer=route,
        estimator=SERVER_ESTIMATOR if route else None,
    )


def _test_gateway(provider, base_url, key, model, client_factory):
    if provider == "local":
        return gateway_for_provider(provider, ModelEndpoint("", None, "local-demo"))
    return gateway_for_provider(
        provider,
        ModelEndpoint(base_url, key or None, model),
        output=OutputLimits(TEST_MAX_OUTPUT_TOKENS),
        calls=CallOptions(
            allow_private_hosts=settings.ALLOW_PRIVATE_MODEL_HOSTS,
            client_factory=client_factory,
            retry=RetryPolicy(max_attempts=1),
            timeouts=Timeouts(read=TEST_READ_TIMEOUT_SECONDS),
        ),
    )


def _elapsed_ms(started: float) -> int:
    return round(1000 * (time.monotonic() - started))
