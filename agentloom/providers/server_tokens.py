"""Count tokens with the model server's own tokenizer, where the server offers one.

Three servers tokenize over HTTP, each at its own root (never under `/v1`):

- llama.cpp's server: `POST /tokenize {"content": text}` answers `{"tokens": [...]}`; special
  tokens such as BOS are added only when `add_special` is true, false by default
  (tools/server/README.md, "POST /tokenize", read 2026-12-02). Route `llama.cpp:/tokenize`.
- llama-cpp-python's server: `POST /extras/tokenize/count {"input": text, "model"?}` answers
  `{"count": n}` (measured here on 0.3.36). Route `llama-cpp-python:/extras/tokenize/count`.
- vLLM: `POST /tokenize {"model", "prompt", "add_special_tokens"}` answers `{"count",
  "max_model_len", "tokens"}`; `add_special_tokens` is true by default, so false is sent
  (`TokenizeCompletionRequest` and `TokenizeResponse` in vLLM's OpenAI protocol module, read
  2026-12-02; its newer builds refuse to tokenize a text longer than `max_model_len`, which is
  then a `context_length` error like any). Route `vllm:/tokenize`.

`count()` counts raw texts, one per request (none of them takes a batch), with no chat
template: what the template adds around messages and tool schemas is for the caller to account
for. `count_request()` counts a whole chat request as the server renders it, template and tool
schemas included, where the server can say: llama.cpp renders it with `POST /apply-template`
(the body of a chat completion; the same parsing, "without inference part", answering
`{"prompt"}`, tools/server/server-context.cpp, read 2026-12-02) and tokenizes that prompt with
special tokens as its chat route does; vLLM takes the messages and tools on `POST /tokenize`
(`TokenizeChatRequest`); llama-cpp-python has no such route. One call reuses one client for
all its requests, counts each distinct text once, and stops with a `ProviderError` once its
time is spent. A text's count on a server's model never changes, so counts are kept for the
whole process (`COUNT_CACHE_ITEMS`, least recently used dropped first), keyed by the origin,
the route, the model id and the SHA-256 of the text: a new run, the publish check and the door
reuse what any earlier count of the process asked. Every call goes through the guarded client, to
the origin of the connection's base URL only (scheme, host and port; its path, such as `/v1`,
dropped). Any failure is a `ProviderError`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from agentloom.providers._errors import ProviderError
from agentloom.providers._http import secure_client
from agentloom.providers._urls import origin_url
from agentloom.providers.chat import CallOptions, ModelEndpoint

__all__ = [
    "COUNT_CACHE_ITEMS",
    "COUNT_SECONDS",
    "MAX_COUNT_CHARS",
    "TOKENIZER_ROUTES",
    "ServerTokenizer",
    "clear_count_cache",
    "probe_tokenizer",
]

TOKENIZER_ROUTES = (
    "llama.cpp:/tokenize",
    "vllm:/tokenize",
    "llama-cpp-python:/extras/tokenize/count",
)
# The most time one `count()` may take, and the most text it sends.
COUNT_SECONDS = 10.0
MAX_COUNT_CHARS = 1_000_000
# A token list is a few bytes a token; an answer above this is not a tokenizer's.
_MAX_ANSWER_BYTES = 8 * 1024 * 1024
_PROBE_TEXT = "Hello, world."
_PROBE_SECONDS = 5.0
_UNREADABLE = "The server's tokenizer answer could not be understood."
_DEFAULT_CALLS = CallOptions()
# The most counts the process keeps (a key and its count take about 270 bytes: about 27 MB).
COUNT_CACHE_ITEMS = 100_000


class _CountCache:
    """The counts of the process, least recently used dropped first; safe across threads."""

    def __init__(self, max_items: int):
        self.max_items = max_items
        self._counts: OrderedDict[tuple[str, str, str, bytes], int] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, str, bytes]) -> int | None:
        with self._lock:
            count = self._counts.get(key)
            if count is not None:
                self._counts.move_to_end(key)
            return count

    def put(self, key: tuple[str, str, str, bytes], count: int) -> None:
        with self._lock:
            self._counts[key] = count
            self._counts.move_to_end(key)
            while len(self._counts) > self.max_items:
                self._counts.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._counts)


_COUNTS = _CountCache(COUNT_CACHE_ITEMS)


def clear_count_cache() -> None:
    """Forget every count the process kept (a server's model was replaced under its name)."""
    _COUNTS.clear()


class ServerTokenizer:
    """Count texts with the tokenizer of the server at `endpoint`, through `route`.

    `route` is one of `TOKENIZER_ROUTES` (as `probe_tokenizer` returns it). `calls` gives the
    private-address permission and, in tests, the client factory; `time_limit` bounds one
    `count()` call. With `shared` (the default) counts are read from and kept in the process's
    cache (module docstring); without, every text is asked.
    """

    def __init__(
        self,
        endpoint: ModelEndpoint,
        route: str,
        *,
        calls: CallOptions = _DEFAULT_CALLS,
        time_limit: float = COUNT_SECONDS,
        shared: bool = True,
    ):
        if route not in TOKENIZER_ROUTES:
            raise ValueError(
                f"unknown tokenizer route {route!r}; expected one of {TOKENIZER_ROUTES}"
            )
        if not time_limit > 0:
            raise ValueError("time_limit must be positive")
        self.route = route
        self.server, path = route.split(":", 1)
        self.url = origin_url(endpoint.base_url, path)
        self.model_id = endpoint.model_id
        self.time_limit = time_limit
        self.shared = shared
        self._origin = origin_url(endpoint.base_url, "")
        self._api_key = endpoint.api_key
        self._client_factory = calls.client_factory or functools.partial(
            secure_client,
            allow_private_hosts=calls.allow_private_hosts,
            connect_timeout=min(5.0, time_limit),
            read_timeout=time_limit,
            total_timeout=time_limit,
            max_response_bytes=_MAX_ANSWER_BYTES,
        )

    def __repr__(self) -> str:
        return f"ServerTokenizer(route={self.route!r}, url={self.url!r})"

    def count(self, texts: Sequence[str]) -> list[int]:
        """Return the number of tokens of each text, in order; raise `ProviderError` on failure.

        An empty text is 0 without a request. The whole call takes at most about `time_limit`
        seconds: each request is given only the time left.
        """
        texts = list(texts)
        if not all(isinstance(text, str) for text in texts):
            raise ProviderError("bad_request", "Only text can be counted.")
        if sum(len(text) for text in texts) > MAX_COUNT_CHARS:
            raise ProviderError("bad_request", "The text to count is larger than the size limit.")
        counts: dict[str, int] = {"": 0}
        deadline = time.monotonic() + self.time_limit
        pending = [text for text in dict.fromkeys(texts) if text not in counts]
        keys = {text: self._key(text) for text in pending} if self.shared else {}
        for text, key in keys.items():
            known = _COUNTS.get(key)
            if known is not None:
                counts[text] = known
        pending = [text for text in pending if text not in counts]
        if pending:
            with self._client_factory() as client:
                for text in pending:
                    counts[text] = self._count_one(client, text, deadline)
                    if self.shared:
                        _COUNTS.put(keys[text], counts[text])
        return [counts[text] for text in texts]

    def _key(self, text: str) -> tuple[str, str, str, bytes]:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        return (self._origin, self.route, self.model_id, digest)

    def count_request(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] = ()
    ) -> int | None:
        """Return the tokens of the prompt the server builds from `messages` and `tools`.

        The chat template and the tool schemas are counted as the server renders them. None
        when this server cannot render a request without answering it (llama-cpp-python).
        """
        if self.server == "llama-cpp-python":
            return None
        body: dict[str, Any] = {"messages": list(messages)}
        if tools:
            body["tools"] = list(tools)
        try:
            size = len(json.dumps(body, ensure_ascii=False))
        except (TypeError, ValueError):
            raise ProviderError(
                "bad_request", "The request could not be encoded as JSON."
            ) from None
        if size > MAX_COUNT_CHARS:
            raise ProviderError("bad_request", "The text to count is larger than the size limit.")
        deadline = time.monotonic() + self.time_limit
        with self._client_factory() as client:
            if self.server == "vllm":
                body = {"model": self.model_id, **body, "add_generation_prompt": True}
                return self._read_count(self._post(client, self.url, body, deadline))
            rendered = self._post(client, origin_url(self.url, "/apply-template"), body, deadline)
            prompt = rendered.get("prompt") if isinstance(rendered, dict) else None
            if not isinstance(prompt, str):
                raise ProviderError("protocol", _UNREADABLE)
            special = {"content": prompt, "add_special": True, "parse_special": True}
            return self._read_tokens(self._post(client, self.url, special, deadline))

    def _post(self, client: Any, url: str, body: dict[str, Any], deadline: float) -> Any:
        """POST within the time left before `deadline`: each request is given only that."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise ProviderError(
                "timeout", "The server's tokenizer did not count in time.", retryable=False
            )
        if hasattr(client, "total_timeout"):
            client.total_timeout = min(client.total_timeout, left)
        return client.post_json(url, body, api_key=self._api_key)

    @staticmethod
    def _read_tokens(answer: Any) -> int:
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        # vLLM answers on the same path with a `count`: that is not this server.
        if not isinstance(tokens, list) or "count" in answer:
            raise ProviderError("protocol", _UNREADABLE)
        return len(tokens)

    @staticmethod
    def _read_count(answer: Any) -> int:
        count = answer.get("count") if isinstance(answer, dict) else None
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ProviderError("protocol", _UNREADABLE)
        return count

    def _count_one(self, client: Any, text: str, deadline: float) -> int:
        answer = self._post(client, self.url, self._body(text), deadline)
        if self.server == "llama.cpp":
            return self._read_tokens(answer)
        return self._read_count(answer)

    def _body(self, text: str) -> dict[str, Any]:
        if self.server == "llama.cpp":
            return {"content": text, "add_special": False}
        if self.server == "vllm":
            return {"model": self.model_id, "prompt": text, "add_special_tokens": False}
        return {"input": text, "model": self.model_id}


def probe_tokenizer(endpoint: ModelEndpoint, *, calls: CallOptions = _DEFAULT_CALLS) -> str | None:
    """Return the route of the tokenizer the server at `endpoint` answers on, or None.

    Each route is tried with a short text, in the order of `TOKENIZER_ROUTES`, within a few
    seconds each (always asked: a cached count says nothing of the server now); the first that
    counts it is the one. A server that answers none of them
    (a missing route, a refusal, an unreadable answer) has no usable tokenizer.
    """
    for route in TOKENIZER_ROUTES:
        tokenizer = ServerTokenizer(
            endpoint, route, calls=calls, time_limit=_PROBE_SECONDS, shared=False
        )
        try:
            counted = tokenizer.count([_PROBE_TEXT])
        except ProviderError as error:
            if error.kind == "address_refused":
                return None
            continue
        if counted[0] > 0:
            return route
    return None
