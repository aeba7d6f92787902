"""The `server` estimator: a request counted with the serving model's own tokenizer.

A server that tokenizes (llama.cpp's `/tokenize`, vLLM's `/tokenize`, llama-cpp-python's
`/extras/tokenize/count`) counts raw text, without the chat template. So a request is counted as
the texts the template renders plus stated margins for what the template adds around them:

    request = per_request                            the generation prompt and a BOS token
            + sum(message)
            + tools_preamble + sum(tool)             when any tool is sent
    message = tokens(rendered text) + per_message + per_call * (its tool calls)
    tool    = max(tokens(compact JSON), tokens(spaced JSON)) + per_tool

A message's rendered text is its role, its content (the text of text parts, the JSON of any other
part), each tool call's name and arguments, its `tool_call_id` and any other field's value, one
per line. The margins, in tokens (`config`, frozen in the binding; the figures in brackets were
counted with SmolLM2-135M-Instruct's tokenizer, on llama-cpp-python 0.3.36, 2026-12-02):

- `per_message` 6: ChatML wraps a message as `<|im_start|>role\\n…<|im_end|>\\n`, 3 tokens besides
  the role and text counted (`<|im_start|>user\\nhello there<|im_end|>\\n` is 7, `user\\nhello
  there` 4); Llama 3's header markers and end of turn and Gemma's turn markers are 3 as well;
  the other 3 cover a prefix a template puts on a message (llama-cpp-python's
  `chatml-function-calling` writes `message:\\n` before an assistant's text when tools are sent,
  3); the Hermes and Qwen 2.5 templates' `<tool_response>` lines around a tool result are
  covered by its `tool_call_id`, counted but not rendered;
- `per_call` 24: `chatml-function-calling` writes a call as `functions.NAME:\\nARGUMENTS` (3 more
  than the name and arguments counted); the Qwen 2.5 template writes `<tool_call>\\n{"name": …,
  "arguments": …}\\n</tool_call>` (20 more: 31 against 11 for a calculator call);
- `per_tool` 16 on the larger of the schema's compact JSON and its JSON as a template's `tojson`
  writes it (a space after each `:` and `,`: 72 tokens against 61 for the calculator schema):
  `chatml-function-calling` writes `\\nfunctions.NAME:\\n` and the parameters' JSON, Hermes-style
  templates the whole schema in a `<tools>` block;
- `tools_preamble` 256: the instructions a template adds once when tools are sent
  (`chatml-function-calling`'s are 139 tokens; Hermes and Qwen 2.5 write a shorter block);
- `per_request` 8: the generation prompt `<|im_start|>assistant\\n` (4) and a BOS token.

`escape_html` (on by default): `chatml-function-calling` renders with Jinja's HTML autoescape on
(llama-cpp-python 0.3.36, `llama_chat_format.py`, `select_autoescape(["html", "xml"])`), so a
message's `'`, `"`, `&`, `<` and `>` reach the model as entities (`don't` as `don&#39;t`, each
quote of a call's JSON arguments as `&#34;`), several tokens each. A message's text is therefore
counted HTML-escaped, which is never fewer tokens than the raw text; a connection whose server
renders without escaping (llama.cpp's and vLLM's templates) may turn it off for an exact count.

Checked against the prompt `chatml-function-calling` renders, tokenized by SmolLM2-135M-Instruct's
own tokenizer (2026-12-02): each system, user and assistant message (tool calls included) is
estimated to the token; tool results are not rendered by that template at all (it has no branch
for them), so a 49-message session with 12 tool calls, 1,197 tokens (1,503 with three tools
rendered), is estimated 7.3% above (8.3%) and bounded 41% above (46%).

How a server's template renders tools is not known to the client, so these margins are chosen
to bound it from above: `upper_bound`, what the hard check compares with the budget, uses them.
`estimate`, which moves the triggers and is compared with the prompt tokens a server reports,
uses the markers ChatML itself adds (`ESTIMATE_MARGINS`: 3 a message, 4 for the generation
prompt, 3 a tool call, and `chatml-function-calling`'s 139-token tool instructions once), so it
stays near the server's own count; the triggers also fire whenever the bound is over the budget,
so a request the hard check would refuse is compacted first. Without the tokenizer both are the
bound below.

Counts are cached per content (a hash of each message's and tool's JSON) and by identity, in one
cache per estimator, which is attached to one server model's tokenizer (`attach`). Measuring a
request sends the texts not cached yet in one `count` call; the counter bounds its own time,
and may keep counts beyond one estimator's life (the server tokenizer keeps them for the
process, so a new run's estimator costs no request for a text counted before).
Every count used is recorded (`recorded`), the checkpoint keeps them (`state.token_counts`), and
a resumed or replayed run reads them back (`remember`), so it measures the same way without the
server.

When the counter fails (it raises, or answers something other than one count per text) the
request is measured from what is known: each cached count as it is, each text not counted in
UTF-8 bytes (a token is never fewer than a byte) with the same margins. A request that extends
the last counted one is its exact count plus the bytes appended since (`last_exact_plus_bytes`);
one with nothing counted is all bytes (`bytes`). After a failure the counter is not asked again
for `COUNTER_PAUSE_SECONDS`, so one outage does not cost a timeout per measure.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from agentloom.engine._budget import TokenEstimator
from agentloom.engine._errors import ConfigurationError, EngineError
from agentloom.engine._sizecache import DEFAULT_CACHE_ITEMS, SizeCache, canonical_json

__all__ = [
    "COUNTER_PAUSE_SECONDS",
    "ESTIMATE_MARGINS",
    "FALLBACK_BYTES",
    "FALLBACK_LAST_EXACT",
    "RECORDED_COUNTS",
    "SERVER_ESTIMATOR_ID",
    "SERVER_MARGINS",
    "ServerEstimator",
    "TokenCounter",
    "autoescaped",
    "fallback_note",
    "rendered_text",
    "server_estimator_of",
]

SERVER_ESTIMATOR_ID = "agentloom.engine.estimators.ServerEstimator/1"
# The template margins, in tokens (see the module docstring for each figure).
SERVER_MARGINS: Mapping[str, int] = {
    "per_request": 8,
    "per_message": 6,
    "per_call": 24,
    "per_tool": 16,
    "tools_preamble": 256,
}
# What ChatML adds around the texts counted (SmolLM2-135M-Instruct's tokenizer): the estimate's
# margins. They move triggers only, never the hard check.
ESTIMATE_MARGINS: Mapping[str, int] = {
    "per_request": 4,
    "per_message": 3,
    "per_call": 3,
    "per_tool": 0,
    "tools_preamble": 139,
}
# How long a counter that failed is left alone before it is asked again.
COUNTER_PAUSE_SECONDS = 30.0
# The most per-content counts a run records for its checkpoint (the most recent are kept).
RECORDED_COUNTS = 10_000

FALLBACK_LAST_EXACT = "last_exact_plus_bytes"
FALLBACK_BYTES = "bytes"


@runtime_checkable
class TokenCounter(Protocol):
    """Counts texts with a server model's tokenizer: one count per text, in order.

    It raises when it cannot (the server does not answer, answers late or answers nonsense) and
    bounds the time it takes.
    """

    def count(self, texts: Sequence[str]) -> list[int]: ...


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return canonical_json(content)
    parts = []
    for part in content:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        else:
            parts.append(canonical_json(part))
    return "\n".join(parts)


def rendered_text(message: Any) -> str:
    """Return the text of a message a chat template renders: every field's value, one a line."""
    if not isinstance(message, dict):
        return canonical_json(message)
    lines = []
    for key, value in message.items():
        if value is None:
            continue
        if key == "content":
            lines.append(_content_text(value))
        elif key == "tool_calls" and isinstance(value, list):
            for call in value:
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(function, dict):
                    lines.append(canonical_json(call))
                    continue
                lines.append(_as_text(function.get("name") or ""))
                arguments = function.get("arguments")
                lines.append("" if arguments is None else _as_text(arguments))
        else:
            lines.append(_as_text(value))
    return "\n".join(line for line in lines if line)


# What Jinja's autoescape (MarkupSafe's `escape`) writes for each character it escapes.
_ENTITIES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "'": "&#39;", '"': "&#34;"})


def autoescaped(text: str) -> str:
    """Return `text` as a template with HTML autoescape on renders it."""
    return text.translate(_ENTITIES)


def _tool_texts(tool: Any) -> tuple[str, str]:
    """Return a tool schema's compact JSON and its JSON as a template's `tojson` spaces it."""
    return canonical_json(tool), json.dumps(tool, ensure_ascii=False)


def _calls(message: Any) -> int:
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    return len(calls) if isinstance(calls, list) else 0


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


class ServerEstimator(TokenEstimator):
    """Counts a request with the server's tokenizer plus the template margins (module docstring).

    Without a counter (`attach`), or while it fails, it measures from the counts it holds (read
    back from a checkpoint with `remember`) and bytes for the rest.
    """

    module_id = SERVER_ESTIMATOR_ID
    config_keys = (*SERVER_MARGINS, "escape_html")

    def __init__(
        self,
        *,
        per_request: int = SERVER_MARGINS["per_request"],
        per_message: int = SERVER_MARGINS["per_message"],
        per_call: int = SERVER_MARGINS["per_call"],
        per_tool: int = SERVER_MARGINS["per_tool"],
        tools_preamble: int = SERVER_MARGINS["tools_preamble"],
        escape_html: bool = True,
        counter: TokenCounter | None = None,
        cache_size: int = DEFAULT_CACHE_ITEMS,
        clock: Callable[[], float] = time.monotonic,
    ):
        config = {
            "per_request": per_request,
            "per_message": per_message,
            "per_call": per_call,
            "per_tool": per_tool,
            "tools_preamble": tools_preamble,
        }
        for name, value in config.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(f"estimator.{name}", "must be a whole number >= 0")
        if not isinstance(escape_html, bool):
            raise ConfigurationError("estimator.escape_html", "must be true or false")
        self.config: dict[str, Any] = {**config, "escape_html": escape_html}
        self._cache = SizeCache(max_items=cache_size)
        self._clock = clock
        self._lock = threading.Lock()
        self._recorded: OrderedDict[str, int] = OrderedDict()
        self._paused_until = 0.0
        self.counter: TokenCounter | None = None
        # How the latest measure was made: None (exact), or the fallback it used.
        self.last_fallback: str | None = None
        if counter is not None:
            self.attach(counter)

    # -- the counter and the recorded counts ---------------------------------------------------

    def attach(self, counter: TokenCounter | None) -> ServerEstimator:
        """Measure with `counter` from now on (None: only the counts held, then bytes).

        Counts are the tokenizer's: attaching another counter in place of one forgets those held.
        """
        if counter is not None and not callable(getattr(counter, "count", None)):
            raise ConfigurationError("estimator.counter", "must have a count(texts) method")
        if self.counter is not None and counter is not self.counter:
            self._cache.clear()
            self._recorded.clear()
        self.counter = counter
        self._paused_until = 0.0
        return self

    def for_run(self) -> ServerEstimator:
        """Return an estimator for one run: the same counter and cache, its own record."""
        run = ServerEstimator(**self.config, clock=self._clock)
        run._cache = self._cache
        run.counter = self.counter
        return run

    def recorded(self) -> dict[str, int]:
        """Return the counts this estimator used, by content key (what a checkpoint keeps)."""
        with self._lock:
            return dict(self._recorded)

    def remember(self, counts: Mapping[str, Any] | None) -> None:
        """Take counts recorded earlier (a checkpoint's `state.token_counts`) as known."""
        for key, count in (counts or {}).items():
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                continue
            try:
                raw = bytes.fromhex(key)
            except (TypeError, ValueError):
                continue
            self._cache.store_key(raw, count)
            self._record(raw, count)

    def _record(self, key: bytes, count: int) -> None:
        with self._lock:
            hexkey = key.hex()
            self._recorded[hexkey] = count
            self._recorded.move_to_end(hexkey)
            while len(self._recorded) > RECORDED_COUNTS:
                self._recorded.popitem(last=False)

    # -- measuring -----------------------------------------------------------------------------

    def counts(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict:
        """Return how this request measures: `{server, fallback, upper_bound, estimate}`.

        `server` is the exact count with the bound's margins (None when a text could not be
        counted), `fallback` None or how the bound was made without it, `upper_bound` the figure
        the hard check uses, `estimate` the figure the triggers use.
        """
        items: list[Any] = [*messages, *tools]
        sizes: list[int | None] = []
        keys: list[bytes | None] = []
        for item in items:
            size, key = self._cache.lookup(item)
            sizes.append(size)
            keys.append(key)
        missing = [index for index, size in enumerate(sizes) if size is None]
        if missing and self._may_count():
            self._count_missing(items, len(messages), missing, sizes, keys)
        for size, key in zip(sizes, keys, strict=True):
            if size is not None and key is not None:
                self._record(key, size)
        fixed = self._fixed(messages, tools, self.config)
        if all(size is not None for size in sizes):
            counted = sum(size for size in sizes if size is not None)
            total = fixed + counted
            estimate = self._fixed(messages, tools, ESTIMATE_MARGINS) + counted
            self.last_fallback = None
            return {"server": total, "fallback": None, "upper_bound": total, "estimate": estimate}
        bound = fixed
        for index, size in enumerate(sizes):
            if size is not None:
                bound += size
            elif index < len(messages):
                bound += _utf8(self._text(items[index]))
            else:
                bound += _utf8(_tool_texts(items[index])[1])
        known = any(size is not None for size in sizes)
        fallback = FALLBACK_LAST_EXACT if known else FALLBACK_BYTES
        self.last_fallback = fallback
        return {"server": None, "fallback": fallback, "upper_bound": bound, "estimate": bound}

    @staticmethod
    def _fixed(
        messages: list[dict[str, Any]], tools: list[dict[str, Any]], config: Mapping[str, int]
    ) -> int:
        fixed = config["per_request"] + config["per_message"] * len(messages)
        fixed += config["per_call"] * sum(_calls(message) for message in messages)
        if tools:
            fixed += config["tools_preamble"] + config["per_tool"] * len(tools)
        return fixed

    def _may_count(self) -> bool:
        return self.counter is not None and self._clock() >= self._paused_until

    def _count_missing(
        self,
        items: list[Any],
        message_count: int,
        missing: list[int],
        sizes: list[int | None],
        keys: list[bytes | None],
    ) -> None:
        """Count every missing item's texts in one call; on failure leave them missing."""
        texts: list[str] = []
        spans: list[tuple[int, int]] = []
        for index in missing:
            start = len(texts)
            if index < message_count:
                texts.append(self._text(items[index]))
            else:
                texts.extend(_tool_texts(items[index]))
            spans.append((start, len(texts)))
        try:
            counted = self._ask(texts)
        except Exception:
            # Any failure of the counter (its own errors, a broken connection, a bad answer)
            # is the same to the budget: measure without it for a while.
            self._paused_until = self._clock() + COUNTER_PAUSE_SECONDS
            return
        for index, (start, end) in zip(missing, spans, strict=True):
            # A tool is the larger of its two JSON texts; its margin is added in `_fixed`.
            size = max(counted[start:end])
            sizes[index] = size
            self._cache.store(items[index], size, keys[index])

    def _text(self, message: Any) -> str:
        """Return the text of `message` that is counted (HTML-escaped under `escape_html`)."""
        text = rendered_text(message)
        return autoescaped(text) if self.config["escape_html"] else text

    def _ask(self, texts: list[str]) -> list[int]:
        counter = self.counter
        if counter is None:
            raise EngineError("no counter attached")
        counted = counter.count(list(texts))
        if not isinstance(counted, list | tuple) or len(counted) != len(texts):
            raise EngineError("the counter did not answer one count per text")
        for count in counted:
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise EngineError("the counter answered a count that is not a whole number")
        return list(counted)

    def estimate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        return self.counts(messages, tools)["estimate"]

    def upper_bound(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        return self.counts(messages, tools)["upper_bound"]

    def exact_count(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> int | None:
        """Return the server's count of this request with ChatML's own markers (the estimate),
        or None when a text could not be counted."""
        counts = self.counts(messages, tools)
        return counts["estimate"] if counts["server"] is not None else None


def server_estimator_of(estimator: TokenEstimator) -> ServerEstimator | None:
    """Return the server estimator that measures for `estimator` (itself or the one it wraps)."""
    if isinstance(estimator, ServerEstimator):
        return estimator
    inner = getattr(estimator, "inner", None)
    return inner if isinstance(inner, ServerEstimator) else None


def fallback_note(estimator: TokenEstimator) -> str:
    """Return what a refusal adds when its measure was made without the server's tokenizer."""
    server = server_estimator_of(estimator)
    if server is None or server.last_fallback is None:
        return ""
    how = (
        "from its last exact count plus the bytes since"
        if server.last_fallback == FALLBACK_LAST_EXACT
        else "in bytes"
    )
    return (
        f"; the server's tokenizer did not answer, so the request was measured {how}: nothing "
        "was sent, resume the run once the tokenizer answers"
    )
