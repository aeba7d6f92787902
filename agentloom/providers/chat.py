"""Chat-completions gateways for OpenAI, DeepSeek and any server speaking the same API."""

from __future__ import annotations

import functools
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from agentloom.engine import (
    CallStream,
    GatewayError,
    LearnedLimit,
    ModelGateway,
    ModelRequest,
    ModelResponse,
    PayloadRules,
)
from agentloom.providers._errors import ProviderError
from agentloom.providers._http import secure_client
from agentloom.providers._stream import StreamAssembly, is_empty_end, stream_error
from agentloom.providers._urls import PROVIDERS, endpoint_url
from agentloom.providers.discovery import DEFAULT_MAX_OUTPUT_TOKENS, ClientFactory
from agentloom.providers.local_servers import chat_url, ollama_chat_payload, parse_ollama_chat

__all__ = [
    "REASONING_OPTIONS",
    "THINKING_OUTPUT_FLOOR",
    "CallOptions",
    "DeepSeekChatGateway",
    "LMStudioChatGateway",
    "ModelEndpoint",
    "OllamaChatGateway",
    "OpenAIChatGateway",
    "OpenAICompatibleChatGateway",
    "OutputLimits",
    "RetryPolicy",
    "Timeouts",
    "gateway_for_provider",
    "parse_chat_completion",
    "thinking_output_floor",
]

logger = logging.getLogger("agentloom.providers")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass(frozen=True)
class RetryPolicy:
    """How a chat gateway retries a failed model call.

    Rate limits, 5xx answers, network failures and connect timeouts are retried up to
    `max_attempts` calls in all, waiting `backoff`, then twice as long each time (at most
    `max_backoff`), or the provider's `Retry-After` if longer and at most `max_retry_after`; a
    longer `Retry-After` ends the retries. A read timeout is not retried.
    """

    max_attempts: int = 3
    backoff: float = 1.0
    max_backoff: float = 8.0
    max_retry_after: float = 30.0

    def __post_init__(self) -> None:
        if not _positive_int(self.max_attempts):
            raise ValueError("max_attempts must be a positive integer")

    def delay(self, error: ProviderError, attempt: int) -> float | None:
        """Return the wait before the call after failed `attempt`, or None to give up."""
        if not error.retryable or attempt >= self.max_attempts:
            return None
        delay = min(self.backoff * 2 ** (attempt - 1), self.max_backoff)
        if error.retry_after is not None:
            if error.retry_after > self.max_retry_after:
                return None
            delay = max(delay, error.retry_after)
        return delay


@dataclass(frozen=True)
class Timeouts:
    """How long one attempt of a chat gateway's call may wait.

    `read` bounds each wait for data; the whole answer is read within `total`, a minute more.
    """

    # A non-streamed answer arrives all at once, after the model has finished: reasoning models
    # can take minutes, so the read timeout is long (and a read timeout is not retried).
    read: float = 300.0

    @property
    def total(self) -> float:
        """Return the time within which one attempt's answer is read whole."""
        return self.read + 60.0


@dataclass(frozen=True)
class ModelEndpoint:
    """Where a model answers: the server's base URL, its API key (None: none) and the model's id."""

    base_url: str
    api_key: str | None = field(repr=False)
    model_id: str


@dataclass(frozen=True)
class OutputLimits:
    """How many tokens an answer may take: the version's `max_output_tokens`, and the
    connection's `max_output_cap` (None: the provider's own limit) that bounds it."""

    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    max_output_cap: int | None = None

    def __post_init__(self) -> None:
        if not _positive_int(self.max_output_tokens):
            raise ValueError("max_output_tokens must be a positive integer")
        if self.max_output_cap is not None and not _positive_int(self.max_output_cap):
            raise ValueError("max_output_cap must be a positive integer or None")


@dataclass(frozen=True)
class CallOptions:
    """How a chat gateway makes its calls; each has a default.

    `allow_private_hosts` lets the client reach private addresses (a local server);
    `client_factory` replaces the secure client (tests); `retry` and `timeouts` bound each call
    (`sleep` waits between attempts); `stream` asks for streamed completions.
    """

    allow_private_hosts: bool = False
    client_factory: ClientFactory | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeouts: Timeouts = field(default_factory=Timeouts)
    sleep: Callable[[float], None] = time.sleep
    stream: bool = True


# Whether a connection's requests pass reasoning back: never, on DeepSeek's tool spans, or learned
# (never until the server refuses a request for lacking it, then on tool spans).
REASONING_OPTIONS = ("never", "tool_spans", "learned")
# The phrase a learned reasoning rule is recorded with (fixed text: never the server's body).
REASONING_EVIDENCE = "reasoning_content must be passed back"


class OpenAICompatibleChatGateway(ModelGateway):
    """Call `POST {base_url}/chat/completions` of a server speaking OpenAI's chat API.

    The output limit sent is the smallest of the request's and the `output` limits (the
    configured `max_output_tokens` and the provider's `max_output_cap`). Failed calls are
    retried as `calls.retry` says (`calls.sleep` waits between them), each attempt within
    `calls.timeouts`.

    With `calls.stream` (the default) the completion is requested streamed, with its usage in the
    stream (`stream_options.include_usage`), and what arrives is reported to the call's
    `CallStream`; the reply returned is assembled from the whole stream (`_stream`). A stream
    that fails after part of the answer was shown is not retried: the model was already working
    and its words were seen. One that ends before its first content is retried like a
    connection that never opened; after a second such end the same payload is sent once more
    without streaming (`_probe`): llama-cpp-python answers a streamed request over its window,
    or one with `tool_choice: "auto"`, with an empty stream, and the same request unstreamed
    with a 400 that names its window, or with the reply. A length refusal is raised with its
    numbers, a reply is the call's reply (its page got no deltas), any other error as it is. A
    request with tools answered that way makes the gateway send requests with tools unstreamed
    for the rest of its life (`tools_unstreamed`).

    Every `reasoning_content` a reply carries is kept in the message it returns. Whether it is
    passed back is `reasoning` (`REASONING_OPTIONS`; None: the provider's `default_reasoning`):
    `never` and `tool_spans` are fixed; `learned` starts at `never`, and `adapt` answers the
    server's first refusal for missing reasoning (`reasoning_missing`) by switching to
    `tool_spans` for the rest of the gateway's life.
    """

    provider = "openai_compatible"
    # What the body is built by and the integrity gate checks it against (`agentloom.engine`
    # `_gate`): compatible servers and DeepSeek read `max_tokens` (many reject the newer OpenAI
    # name). A server behind a compatible endpoint may be any model, DeepSeek's too: it learns.
    payload_rules = PayloadRules(output_limit_field="max_tokens")
    default_reasoning = "learned"
    # Write out what OpenAI's API leaves to its defaults (`spelled_out`): a server of unknown make
    # may read only what a request says. llama-cpp-python's server (0.3.36, chat format
    # `chatml-function-calling`, measured 2026-12-06) leaves the tools out of the prompt unless
    # `tool_choice` is sent, and answers HTTP 500 ("Input should be a valid string") to an
    # assistant message whose `content` is null. OpenAI and DeepSeek document both defaults
    # (tools offered: `auto`; content may be null beside tool calls) and keep their bodies.
    spells_out_defaults = True

    def __init__(
        self,
        endpoint: ModelEndpoint,
        *,
        output: OutputLimits = OutputLimits(),
        calls: CallOptions = CallOptions(),
        reasoning: str | None = None,
    ):
        model_id = endpoint.model_id
        if not isinstance(model_id, str) or not model_id.strip():
            raise ValueError("model_id must be a non-empty string")
        if reasoning not in (None, *REASONING_OPTIONS):
            raise ValueError(f"reasoning must be one of {REASONING_OPTIONS} or None")
        self.reasoning = reasoning or self.default_reasoning
        rule = "tool_spans" if self.reasoning == "tool_spans" else "never"
        self.payload_rules = replace(type(self).payload_rules, reasoning=rule)
        self.url = endpoint_url(endpoint.base_url, "/chat/completions")
        self.model_id = model_id
        self.max_output_cap = cap = output.max_output_cap
        self.max_output_tokens = min(output.max_output_tokens, cap or output.max_output_tokens)
        self.retry = retry = calls.retry
        self.timeouts = timeouts = calls.timeouts
        self._api_key = endpoint.api_key
        self._sleep = calls.sleep
        self.streams = calls.stream
        # Set once a request with tools ended its stream empty and was answered unstreamed
        # (llama-cpp-python: "Automatic streaming tool choice is not supported"): requests with
        # tools are sent unstreamed from then on, one request each instead of three.
        self.tools_unstreamed = False
        # Every attempt may take the whole response time, and the waits between them count too.
        self.deadline_seconds = timeouts.total * retry.max_attempts + retry.max_retry_after * (
            retry.max_attempts - 1
        )
        self._client_factory = calls.client_factory or functools.partial(
            secure_client,
            allow_private_hosts=calls.allow_private_hosts,
            read_timeout=timeouts.read,
            total_timeout=timeouts.total,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={self.url!r}, model_id={self.model_id!r})"

    def complete(self, request: ModelRequest, stream: CallStream | None = None) -> ModelResponse:
        """Return the model's reply to `request`, or raise `ProviderError`."""
        payload = self.payload(request)
        empty_ends = 0
        with self._client_factory() as client:
            for attempt in range(1, self.retry.max_attempts + 1):
                try:
                    document = self._exchange(client, payload, stream)
                except ProviderError as exc:
                    if stream is not None and stream.cancelled.is_set():
                        raise ProviderError("cancelled") from None
                    if is_empty_end(exc):
                        empty_ends += 1
                        if empty_ends > 1:
                            # Some servers answer a request over their window with an empty
                            # stream, and the same request unstreamed with a refusal that names
                            # the window (llama-cpp-python, measured): ask it so, once.
                            document = self._probe(client, payload, stream)
                            self._learn_unstreamed_tools(payload)
                            return self.parse(document)
                    delay = self.retry.delay(exc, attempt)
                    if delay is None:
                        raise
                    logger.warning(
                        "Model call failed (kind=%s, status=%s); retry %d of %d in %.1fs",
                        exc.kind,
                        exc.status,
                        attempt,
                        self.retry.max_attempts - 1,
                        delay,
                    )
                    self._sleep(delay)
                else:
                    return self.parse(document)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _learn_unstreamed_tools(self, payload: dict[str, Any]) -> None:
        """Send requests with tools unstreamed from now on: this one, with tools, was answered
        only unstreamed."""
        if payload.get("tools") and not self.tools_unstreamed:
            self.tools_unstreamed = True
            logger.info(
                "The server answers requests with tools only unstreamed; they are sent "
                "unstreamed from now on (model %s)",
                self.model_id,
            )

    def _probe(self, client: Any, payload: dict[str, Any], stream: CallStream | None) -> Any:
        """Send `payload` once without streaming, after its stream ended empty twice.

        Return the answer document: a whole reply (none of it reached the stream's page), or
        raise the error the server answers, a length refusal naming its window among them.
        """
        body = {key: value for key, value in payload.items() if key != "stream_options"}
        body["stream"] = False
        try:
            document = _not_an_error(client.post_json(self.url, body, api_key=self._api_key))
        except ProviderError:
            if stream is not None and stream.cancelled.is_set():
                raise ProviderError("cancelled") from None
            raise
        if stream is not None and stream.cancelled.is_set():
            raise ProviderError("cancelled")
        return document

    def _exchange(self, client: Any, payload: dict[str, Any], stream: CallStream | None) -> Any:
        """Send one attempt; return the answer document, assembled from the stream if streamed.

        A 2xx JSON answer that is an error object is classified like an error answer.
        """
        if payload.get("stream") is not True:
            return _not_an_error(client.post_json(self.url, payload, api_key=self._api_key))
        assembly = StreamAssembly(stream.delta if stream is not None else None)

        def on_data(data: bytes) -> None:
            if stream is not None and stream.cancelled.is_set():
                raise ProviderError("cancelled")
            assembly.add_data(data)

        document = client.post_stream(
            self.url,
            payload,
            api_key=self._api_key,
            on_data=on_data,
            on_open=stream.on_abort if stream is not None else None,
            shown=lambda: assembly.shown,
        )
        if stream is not None and stream.cancelled.is_set():
            raise ProviderError("cancelled")
        return assembly.document() if document is None else _not_an_error(document)

    def parse(self, document: Any) -> ModelResponse:
        """Return the reply in the provider's answer `document`, its reasoning kept."""
        return parse_chat_completion(document)

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        """Return the JSON body this gateway sends for `request`, reasoning as its rule says."""
        body: dict[str, Any] = {"model": self.model_id, "messages": list(request.messages)}
        if request.tools:
            body["tools"] = list(request.tools)
            if request.tool_choice:
                body["tool_choice"] = request.tool_choice
        body[self.payload_rules.output_limit_field] = self.output_limit(request.max_output_tokens)
        if self.streams and not (request.tools and self.tools_unstreamed):
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        body = self.with_reasoning(request, self.with_settings(body))
        return spelled_out(body) if self.spells_out_defaults else body

    def with_settings(self, body: dict[str, Any]) -> dict[str, Any]:
        """Return `body` with the provider's own settings (none here)."""
        return body

    def adapt(self, error: GatewayError) -> LearnedLimit | None:
        """Answer a refusal by changing this gateway's payload rules; say what was learned.

        Under `learned`, the first refusal for missing reasoning switches the rule to
        `tool_spans` (the same rule DeepSeek's thinking mode states); any other refusal, or a
        second one, changes nothing (None).
        """
        rules = self.payload_rules
        if (
            self.reasoning != "learned"
            or rules is None
            or rules.reasoning != "never"
            or getattr(error, "kind", None) != "reasoning_missing"
        ):
            return None
        self.payload_rules = replace(rules, reasoning="tool_spans")
        return LearnedLimit(
            kind="reasoning",
            value="tool_spans",
            evidence=REASONING_EVIDENCE,
            refused=None,
            largest_ok=None,
        )

    def output_limit(self, requested: int | None) -> int:
        """Return the output limit to send: the request's, within the configured limit and cap."""
        limit = self.max_output_tokens
        if isinstance(requested, int) and not isinstance(requested, bool) and requested > 0:
            limit = min(limit, requested)
        return limit


def _not_an_error(document: Any) -> Any:
    """Return `document`, or raise the error it is when it is an error object and no answer."""
    if not isinstance(document, dict) or document.get("choices"):
        return document
    if "error" in document or document.get("object") == "error":
        raise stream_error(document.get("error", document))
    return document


def spelled_out(body: dict[str, Any]) -> dict[str, Any]:
    """Return `body` with OpenAI's defaults written out: `tool_choice: "auto"` when tools are
    offered and none is named, and `content: ""` on an assistant message whose content is null."""
    messages = [
        {**message, "content": ""}
        if message.get("role") == "assistant" and message.get("content", "") is None
        else message
        for message in body["messages"]
    ]
    body = {**body, "messages": messages}
    if body.get("tools") and "tool_choice" not in body:
        body["tool_choice"] = "auto"
    return body


class OpenAIChatGateway(OpenAICompatibleChatGateway):
    """OpenAI's chat completions, which take the limit as `max_completion_tokens`."""

    provider = "openai"
    # OpenAI deprecated `max_tokens` and reasoning models reject it. Its chat completions take
    # no reasoning back.
    payload_rules = PayloadRules(output_limit_field="max_completion_tokens")
    default_reasoning = "never"
    spells_out_defaults = False

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        """Return the body with the request's cache key as `prompt_cache_key`, which OpenAI
        uses to route a session's calls to one prompt cache."""
        body = super().payload(request)
        if request.cache_key:
            body["prompt_cache_key"] = request.cache_key
        return body


# DeepSeek's thinking settings, as its "Thinking Mode" guide documents them (OpenAI format):
# `{"thinking": {"type": "enabled" | "disabled"}}` and `{"reasoning_effort": "low" | "high" |
# "max"}`; thinking is on by default, with effort `high`.
THINKING_MODES = ("enabled", "disabled")
REASONING_EFFORTS = ("low", "high", "max")
# Parameters the same guide says thinking mode does not support (accepted, without effect).
THINKING_IGNORED = ("temperature", "presence_penalty", "frequency_penalty")


class DeepSeekChatGateway(OpenAICompatibleChatGateway):
    """DeepSeek's chat completions, which take the limit as `max_tokens`.

    `thinking` and `reasoning_effort` (None: DeepSeek's default, nothing sent) are sent with
    every call, whatever its purpose.

    In thinking mode DeepSeek refuses (400) a tool-call continuation whose assistant messages
    lack the `reasoning_content` it returned (its thinking-mode guide,
    api-docs.deepseek.com/guides/thinking_mode, read 2026-12-01), so its rule is known, not
    learned: `tool_spans` with thinking on (`reasoning` None, `learned` or `tool_spans`), none to
    pass back with thinking disabled. `reasoning="never"` with thinking on passes none back
    either: a request with a tool-call span then goes with thinking disabled, where DeepSeek
    requires none.
    """

    provider = "deepseek"
    payload_rules = PayloadRules(output_limit_field="max_tokens", reasoning="tool_spans")
    default_reasoning = "tool_spans"
    spells_out_defaults = False

    def __init__(
        self,
        endpoint: ModelEndpoint,
        *,
        thinking: str | None = None,
        reasoning_effort: str | None = None,
        reasoning: str | None = None,
        **options: Any,
    ):
        if reasoning not in (None, *REASONING_OPTIONS):
            raise ValueError(f"reasoning must be one of {REASONING_OPTIONS} or None")
        if reasoning == "learned":
            reasoning = "tool_spans"
        if thinking == "disabled":
            reasoning = "never"
        super().__init__(endpoint, reasoning=reasoning, **options)
        if thinking not in (None, *THINKING_MODES):
            raise ValueError(f"thinking must be one of {THINKING_MODES} or None")
        if reasoning_effort not in (None, *REASONING_EFFORTS):
            raise ValueError(f"reasoning_effort must be one of {REASONING_EFFORTS} or None")
        if thinking == "disabled" and reasoning_effort is not None:
            raise ValueError("reasoning_effort applies in thinking mode only")
        self.thinking = thinking
        self.reasoning_effort = reasoning_effort

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        """Return the body with the thinking settings and the reasoning rule applied."""
        body = super().payload(request)
        spans = any(m.get("tool_calls") for m in request.messages)
        if self.reasoning == "never" and self.thinking != "disabled" and spans:
            body = {k: v for k, v in body.items() if k != "reasoning_effort"}
            body["thinking"] = {"type": "disabled"}
        return body

    def with_settings(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.with_thinking(body)

    def with_thinking(self, body: dict[str, Any]) -> dict[str, Any]:
        """Return a copy of `body` with the thinking settings, without what thinking mode
        ignores."""
        body = dict(body)
        if self.thinking is not None:
            body["thinking"] = {"type": self.thinking}
        if self.reasoning_effort is not None:
            body["reasoning_effort"] = self.reasoning_effort
        if self.thinking != "disabled":
            for name in THINKING_IGNORED:
                body.pop(name, None)
        return body


class LMStudioChatGateway(OpenAICompatibleChatGateway):
    """LM Studio's OpenAI-compatible chat at `{server}/v1/chat/completions`."""

    provider = "lmstudio"

    def __init__(self, endpoint: ModelEndpoint, **options: Any):
        super().__init__(endpoint, **options)
        self.url = chat_url(self.provider, endpoint.base_url)


class OllamaChatGateway(OpenAICompatibleChatGateway):
    """Ollama: its native `/api/chat` with `options.num_ctx` when the connection sets num_ctx.

    Without num_ctx the OpenAI-compatible `/v1/chat/completions` is used and Ollama runs the
    model with its own server default window.
    """

    provider = "ollama"
    # The native `/api/chat` body (with num_ctx) has no call ids: the gate cannot read it.
    payload_rules: PayloadRules | None = PayloadRules(output_limit_field="max_tokens")

    def __init__(self, endpoint: ModelEndpoint, *, num_ctx: int | None = None, **options: Any):
        super().__init__(endpoint, **options)
        if num_ctx is not None and (
            isinstance(num_ctx, bool) or not isinstance(num_ctx, int) or num_ctx < 1
        ):
            raise ValueError("num_ctx must be a positive integer or None")
        self.num_ctx = num_ctx
        self.url = chat_url(self.provider, endpoint.base_url, num_ctx=num_ctx)
        if num_ctx is not None:
            # The native `/api/chat` streams NDJSON, not events: it is asked for whole answers.
            self.payload_rules = None
            self.streams = False

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        if self.num_ctx is None:
            return super().payload(request)
        return ollama_chat_payload(
            self.model_id,
            request,
            num_ctx=self.num_ctx,
            output_limit=self.output_limit(request.max_output_tokens),
        )

    def parse(self, document: Any) -> ModelResponse:
        """Return the reply; the native answer's reasoning (`message.thinking`, Ollama's
        thinking guide, docs.ollama.com/capabilities/thinking, read 2026-12-02) is kept as
        `reasoning_content`, which the native body never sends back."""
        if self.num_ctx is None:
            return super().parse(document)
        reply = parse_ollama_chat(document)
        thinking = document["message"].get("thinking")
        if isinstance(thinking, str) and thinking:
            reply.message["reasoning_content"] = thinking
        return reply


# The least output limit of a connection to a model that thinks by default: the limit counts the
# chain of thought, so a small one can be spent before the answer begins (DeepSeek's thinking
# mode: "max_tokens counts the reasoning"; its own default is 32K). With thinking disabled there
# is no chain of thought, so no floor.
THINKING_OUTPUT_FLOOR = 8_192
_THINKING_PROVIDERS = ("deepseek",)


def thinking_output_floor(provider: str, *, thinking: str | None) -> int | None:
    """Return the least `max_output_tokens` of a `provider` connection (None: no floor).

    `thinking` is the connection's thinking mode (None or "": the provider's default).
    """
    if provider not in _THINKING_PROVIDERS or thinking == "disabled":
        return None
    return THINKING_OUTPUT_FLOOR


_GATEWAYS: dict[str, type[OpenAICompatibleChatGateway]] = {
    "openai": OpenAIChatGateway,
    "deepseek": DeepSeekChatGateway,
    "openai_compatible": OpenAICompatibleChatGateway,
    "ollama": OllamaChatGateway,
    "lmstudio": LMStudioChatGateway,
}


def gateway_for_provider(provider: str, endpoint: ModelEndpoint, **options: Any) -> ModelGateway:
    """Return the gateway for `provider` at `endpoint`; `options` go to the gateway's
    constructor (`output`, `calls`, `reasoning`, and a provider's own settings such as
    `thinking`).

    `local` returns the engine's offline demo gateway and ignores the endpoint.
    """
    if provider == "local":
        from agentloom.engine import LocalDemoGateway

        return LocalDemoGateway()
    gateway_class = _GATEWAYS.get(provider)
    if gateway_class is None:
        raise ValueError(f"unknown provider {provider!r}; expected one of {PROVIDERS}")
    return gateway_class(endpoint, **options)


def parse_chat_completion(document: Any) -> ModelResponse:
    """Return the assistant message, usage, finish reason, model and id of a chat completion.

    The message holds `role`, `content` and `tool_calls` only, plus the provider's
    `reasoning_content` whenever the reply has one: every message a run receives is journaled
    whole, whatever the provider, and its gateway's rule decides what is sent back.
    """
    if not isinstance(document, dict):
        raise ProviderError("protocol")
    choices = document.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        if "error" in document:
            raise ProviderError("upstream", "The provider answered with an error.")
        raise ProviderError("protocol", "The provider's answer has no choices.")
    choice = choices[0]
    raw = choice.get("message")
    if not isinstance(raw, dict):
        raise ProviderError("protocol", "The provider's answer has no message.")
    message: dict[str, Any] = {"role": "assistant", "content": _content(raw.get("content"))}
    reasoning = raw.get("reasoning_content")
    if isinstance(reasoning, str):
        message["reasoning_content"] = reasoning
    calls = raw.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise ProviderError("protocol", "The provider's tool calls are malformed.")
        message["tool_calls"] = [_tool_call(call) for call in calls]
    usage = document.get("usage")
    finish_reason = choice.get("finish_reason")
    model = document.get("model")
    response_id = document.get("id")
    return ModelResponse(
        message=message,
        usage=usage if isinstance(usage, dict) else None,
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        model=model if isinstance(model, str) else None,
        id=response_id if isinstance(response_id, str) else None,
    )


def _content(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        # Some compatible servers answer with content parts; keep their text in order.
        texts = [
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        ]
        return "".join(texts)
    raise ProviderError("protocol", "The provider's message content is malformed.")


def _tool_call(call: Any) -> dict[str, Any]:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise ProviderError("protocol", "The provider's tool calls are malformed.")
    function = call["function"]
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ProviderError("protocol", "A tool call has no function name.")
    arguments = function.get("arguments")
    if arguments is None:
        arguments = "{}"
    elif not isinstance(arguments, str):
        # A few servers send the arguments as an object; the API contract is a JSON string.
        arguments = json.dumps(arguments, ensure_ascii=False)
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        # Tool results must name their call; give an unnamed call a unique ID.
        call_id = f"call_{uuid.uuid4().hex[:24]}"
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }
