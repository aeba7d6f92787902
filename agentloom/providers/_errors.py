"""The provider layer's error: a `GatewayError` whose message is fixed text chosen here."""

from __future__ import annotations

import math

from agentloom.engine import GatewayError

__all__ = ["KINDS", "RETRYABLE_KINDS", "ProviderError"]

# Every message is fixed text: a provider's body, headers, the URL's secrets or the key never reach
# an exception, so the Django side may show `str(exc)` to an administrator as it is.
_MESSAGES = {
    "auth": "The provider rejected the credentials.",
    "quota": (
        "The provider account has no balance or quota left: top it up or raise its limit in the "
        "provider's billing settings."
    ),
    "rate_limit": "The provider is limiting the request rate.",
    "context_length": (
        "The request is longer than the model's context window: check the connection's context "
        "window and safety margin against the provider's model page."
    ),
    "reasoning_missing": (
        "The provider refused a thinking-mode request whose earlier assistant messages lack the "
        "reasoning_content it returned: turn thinking off on the connection, or publish a new "
        "version and start a new session."
    ),
    "bad_request": "The provider rejected the request.",
    "model_unknown": (
        "The provider does not serve this model ID: check the connection's model ID against the "
        "provider's model list."
    ),
    "not_found": "The provider does not know this endpoint or model.",
    "upstream": "The provider failed to answer.",
    "redirect": "The provider answered with a redirect, which is never followed.",
    "too_large": "The provider's answer is larger than the size limit.",
    "network": "The provider could not be reached.",
    "timeout": "The provider did not answer in time.",
    "address_refused": "The provider address is not allowed.",
    "protocol": "The provider's answer could not be understood.",
    "cancelled": "The call was stopped because the run was cancelled.",
}

KINDS = tuple(_MESSAGES)

# Kinds where the same request may succeed a moment later.
RETRYABLE_KINDS = frozenset({"rate_limit", "upstream", "network", "timeout"})


class ProviderError(GatewayError):
    """A provider call failed; `kind` says how, `status` is the HTTP status when there was one.

    `message` defaults to the fixed text of the kind, which says what an operator can do about
    it; callers that pass one pass fixed text too. `retry_after` is the provider's `Retry-After`
    in seconds when it sent a usable one, and a rate limit's message names it.

    A `context_length` refusal may carry what the server said about it: `window`, the context
    window its words name, `requested`, the tokens it says the request needed (None: not said),
    `input_tokens`, the tokens it counted in the request's input alone (None: not said apart),
    and `evidence`, a short phrase rebuilt here from fixed text and those numbers (never the
    server's own text).
    """

    def __init__(
        self,
        kind: str,
        message: str | None = None,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        retryable: bool | None = None,
        window: int | None = None,
        requested: int | None = None,
        evidence: str | None = None,
        input_tokens: int | None = None,
    ):
        if kind not in _MESSAGES:
            raise ValueError(f"unknown provider error kind {kind!r}")
        self._given_message = message
        text = message or _MESSAGES[kind]
        if kind == "rate_limit" and message is None and retry_after is not None:
            text = f"{text[:-1]}; it asks to retry after {math.ceil(retry_after)} s."
        if status is not None:
            text = f"{text} (HTTP {status})"
        super().__init__(kind, text, status=status)
        self.retry_after = retry_after
        self.retryable = kind in RETRYABLE_KINDS if retryable is None else retryable
        self.window = window
        self.requested = requested
        self.evidence = evidence
        self.input_tokens = input_tokens

    def __repr__(self) -> str:
        return (
            f"ProviderError(kind={self.kind!r}, status={self.status!r}, message={self.message!r})"
        )

    def __reduce__(self):
        # Celery and multiprocessing pickle exceptions; rebuild from the same fixed parts.
        parts = (
            self.kind,
            self._given_message,
            self.status,
            self.retry_after,
            self.retryable,
            self.window,
            self.requested,
            self.evidence,
            self.input_tokens,
        )
        return (_rebuild, parts)


def _rebuild(
    kind,
    message,
    status,
    retry_after,
    retryable,
    window=None,
    requested=None,
    evidence=None,
    input_tokens=None,
) -> ProviderError:
    return ProviderError(
        kind,
        message,
        status=status,
        retry_after=retry_after,
        retryable=retryable,
        window=window,
        requested=requested,
        evidence=evidence,
        input_tokens=input_tokens,
    )
