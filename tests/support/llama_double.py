"""A real HTTP server on 127.0.0.1 that behaves like the self-hosted servers, each rule a switch.

What it copies, and from where:

- llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`, 0.3.36, chat format
  `chatml-function-calling`, measured on this project's machine 2026-12-02, and its source
  `llama_cpp/llama.py` and `llama_cpp/server/errors.py`): `/v1/models` names no window and its
  id is the model file's path; there is no `/props`; `/extras/tokenize` (`{"input"}` ->
  `{"tokens"}`) and `/extras/tokenize/count` (-> `{"count"}`) tokenize raw text, no chat
  template; a non-streamed reply has `usage`, a streamed one none even with
  `stream_options.include_usage`; a prompt of `n_ctx` tokens or more ("Requested tokens (N)
  exceed context window of M", `len(prompt_tokens) >= n_ctx`; a shorter prompt only has its
  `max_tokens` cut to what is left) is refused non-streamed with 400 `context_length_exceeded`
  ("This model's maximum context length is M tokens. However, you requested N+max_tokens tokens
  (N in the messages, max_tokens in the completion). ..."), and streamed with 200, event-stream
  headers and an empty body; tools are rendered only when `tool_choice` is sent, and `"auto"`
  with `stream: true` is a 200 with an empty body (`tool_choice_required`); an assistant
  message whose `content` is null is answered HTTP 500 `Input should be a valid string`
  (`null_content_refused`; both measured on 0.3.36, 2026-12-06).
- llama.cpp's server (`tools/server/README.md` and `server-context.cpp` of ggml-org/llama.cpp,
  read 2026-12-02): `GET /props` answers `default_generation_settings.n_ctx` (the context it was
  started with) and `model_path`; `/v1/models` has the path as id and a `meta` whose
  `n_ctx_train` is the model's training maximum, not the window; `POST /tokenize {"content"}` ->
  `{"tokens": [...]}`; `POST /apply-template {"messages"}` -> `{"prompt"}`, the chat template
  applied without inference; a prompt of `n_ctx` tokens or more is refused with `{"error": {"code":
  400, "message": "request (N tokens) exceeds the available context size (M tokens), try
  increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": N, "n_ctx": M}}` with
  status 400, streamed or not (builds since ggml-org/llama.cpp#16486 answer a stream's first
  error as a plain response). Older builds (`server_sent_event(sink, "error", ...)`) answered
  200 and sent `error: {...}` inside the event stream, then `data: [DONE]` (overflow
  `"llama.cpp-error-event"`); current builds send a later error as `data: {"error": {...}}`
  and end the stream without `[DONE]` (`"llama.cpp-data-error"`).
- vLLM (`vllm/entrypoints/openai/protocol.py`, read 2026-12-02): `POST /tokenize` with
  `{"model", "prompt"}` or `{"model", "messages"}` (the chat template applied) ->
  `{"count", "max_model_len", "tokens"}`.
- Ollama: a prompt longer than the window is cut silently to its last `num_ctx` tokens and the
  answer reports the tokens it evaluated (`prompt_eval_count`, `usage.prompt_tokens` on `/v1`).
- A DeepSeek-style model behind a generic endpoint (`deepseek_reasoning`): every reply carries
  `reasoning_content`, and a request whose tool-call span lacks it is refused with the 400
  DeepSeek's API answers ("The `reasoning_content` in the thinking mode must be passed back to
  the API.", quoted in mnfst/modelparams.dev#29 and earendil-works/pi#3636, read 2026-12-02;
  the span rule is `tests.support.deepseek_double`'s).

Its own tokenizer and chat template make its counts exact and deterministic: a token is one of
the special tokens `<|im_start|>` and `<|im_end|>`, a run of at most 10 ASCII letters, of at
most 3 digits, or of at most 4 other characters that are not white space (`count_tokens`):
about 4.7 characters a token on English prose and 4.9 on the calculator tool's JSON schema, 68
tokens where SmolLM2-135M-Instruct's own tokenizer makes 61 (as counted on llama-cpp-python
0.3.36, 2026-12-02). Each token is at least one byte of the request's JSON, so the byte
estimator stays an upper bound. A chat
request is rendered ChatML-style (`render_prompt`): a tools preamble with each schema when tools
are rendered, then `<|im_start|>{role}\\n{content}<|im_end|>\\n` per message (tool calls as
`<tool_call>{json}</tool_call>` lines), then `<|im_start|>assistant\\n`; its prompt tokens are
the count of that text, and `/tokenize` of the same text gives the same number.

Every chat request is recorded with its count (`counted`), so a test can assert that none was
over the window. The model: `/tool NAME {json}` in the latest user message calls that tool when
the request offers tools; after tool results it answers citing them; otherwise it answers
"You asked: ..." (cut to `max_tokens` tokens, finish reason `length` then).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from tests.support.deepseek_double import REASONING_REFUSAL, missing_reasoning
from tests.support.openai_contract import ordering_violations, schema_violations
from tests.support.provider_double import (
    CHAT_PATH,
    MODELS_PATH,
    ProviderDouble,
    ScriptedReply,
    stream_chunks,
)

__all__ = [
    "KINDS",
    "OVERFLOWS",
    "Counted",
    "LlamaServerDouble",
    "count_tokens",
    "prompt_tokens",
    "render_prompt",
]

KINDS = ("llama-cpp-python", "llama.cpp", "vllm", "ollama")
OVERFLOWS = (
    "llama-cpp-python",
    "llama.cpp",
    "llama.cpp-error-event",
    "llama.cpp-data-error",
    "truncate",
)
MODEL_PATH = "/models/SmolLM2-135M-Instruct-Q8_0.gguf"
N_CTX_TRAIN = 8192

TOKEN = re.compile(r"<\|im_start\|>|<\|im_end\|>|[A-Za-z]{1,10}|[0-9]{1,3}|[^\sA-Za-z0-9]{1,4}")
TOOLS_PREAMBLE = (
    "You may call these functions. To call one, answer with a line "
    "<tool_call>{json}</tool_call> naming it and its arguments.\n"
)
_TOOL = re.compile(r"/tool\s+([A-Za-z0-9_-]+)\s*")
_TOKENIZE_PATHS = ("/tokenize", "/extras/tokenize", "/extras/tokenize/count")


def count_tokens(text: str) -> int:
    """Return how many tokens the double's tokenizer makes of `text` (raw, no template)."""
    return len(TOKEN.findall(text))


def _token_ids(text: str) -> list[int]:
    return [zlib.crc32(piece.encode()) % 49_152 for piece in TOKEN.findall(text)]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _calls_text(message: dict[str, Any]) -> str:
    lines = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments if arguments is not None else {})
        lines.append(
            "<tool_call>"
            + json.dumps({"name": function.get("name", ""), "arguments": arguments})
            + "</tool_call>"
        )
    return "\n".join(lines)


def render_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """Return the prompt text the double's chat template makes of a request."""
    parts = []
    if tools:
        schemas = "\n".join(json.dumps(tool, sort_keys=True) for tool in tools)
        parts.append(f"<|im_start|>system\n{TOOLS_PREAMBLE}{schemas}<|im_end|>\n")
    for message in messages:
        body = _content_text(message.get("content"))
        calls = _calls_text(message)
        if calls:
            body = f"{body}\n{calls}" if body else calls
        parts.append(f"<|im_start|>{message.get('role', '')}\n{body}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def prompt_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    """Return the prompt tokens of a chat request, as the double counts them."""
    return count_tokens(render_prompt(messages, tools))


@dataclass(frozen=True)
class Counted:
    """One chat request as the double counted it.

    `outcome` is `ok`, `refused` or `truncated` (cut to its last `window` tokens).
    """

    path: str
    prompt_tokens: int
    max_tokens: int | None
    window: int
    stream: bool
    outcome: str
    purpose: str = ""

    @property
    def requested(self) -> int:
        """Prompt tokens plus the output limit asked for (0 when none)."""
        return self.prompt_tokens + (self.max_tokens or 0)


@dataclass
class _RawStream(ScriptedReply):
    """A 200 event stream whose body is `raw`, sent as it is (possibly empty)."""

    raw: bytes = b""


@dataclass
class _Settings:
    """The switches of one kind of server (see `LlamaServerDouble.__init__`)."""

    serve_props: bool = False
    tokenizers: set[str] = field(default_factory=set)
    overflow: str = "llama-cpp-python"
    models_window: bool = False
    tool_choice_required: bool = False
    null_content_refused: bool = False


_KIND_SETTINGS = {
    "llama-cpp-python": _Settings(
        tokenizers={"llama-cpp-python"}, tool_choice_required=True, null_content_refused=True
    ),
    "llama.cpp": _Settings(serve_props=True, tokenizers={"llama.cpp"}, overflow="llama.cpp"),
    "vllm": _Settings(tokenizers={"vllm"}, overflow="llama-cpp-python", models_window=True),
    "ollama": _Settings(overflow="truncate"),
}


class LlamaServerDouble(ProviderDouble):
    """A self-hosted server stand-in on 127.0.0.1 (see the module docstring for its rules).

    Switches (attributes, changeable between requests):

    - `n_ctx`: the window it runs with; `model_path`: the id `/v1/models` lists;
    - `serve_props`: answer llama.cpp's `GET /props`;
    - `tokenizers`: the tokenization routes it serves (`"llama.cpp"`, `"llama-cpp-python"`,
      `"vllm"`); `tokenizer_failure`: None, `"error"` (500) or `"slow"` (answers after
      `tokenizer_delay` seconds);
    - `stream_usage`: send a usage chunk when `stream_options.include_usage` asks (off: never);
    - `overflow`: how a prompt over the window is answered, one of `OVERFLOWS`;
    - `refuse_with_output`: count `max_tokens` in the refusal test (`prompt + max_tokens >
      n_ctx`) instead of the prompt alone (`prompt >= n_ctx`, llama.cpp and llama-cpp-python);
    - `tool_choice_required`: tools are rendered and called only when `tool_choice` is sent;
    - `null_content_refused`: an assistant message with `content: null` is an HTTP 500;
    - `deepseek_reasoning`: a DeepSeek-style model (reasoning returned and required back);
    - `models_window`: `/v1/models` names the window as vLLM does (`max_model_len`).
    """

    def __init__(self, kind: str = "llama-cpp-python", *, n_ctx: int = 4096) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        super().__init__()
        settings = _KIND_SETTINGS[kind]
        self.kind = kind
        self.n_ctx = n_ctx
        self.model_path = "SmolLM2-135M-Instruct" if kind == "ollama" else MODEL_PATH
        self.serve_props = settings.serve_props
        self.tokenizers = set(settings.tokenizers)
        self.tokenizer_failure: str | None = None
        self.tokenizer_delay = 30.0
        self.stream_usage = False
        self.overflow = settings.overflow
        self.refuse_with_output = False
        self.tool_choice_required = settings.tool_choice_required
        self.null_content_refused = settings.null_content_refused
        self.deepseek_reasoning = False
        self.models_window = settings.models_window
        self.counted: list[Counted] = []
        self.tokenize_calls = 0
        self.replies = 0
        self._count_lock = threading.Lock()

    # --- what tests read -----------------------------------------------------------------------

    def refusals(self) -> list[Counted]:
        """Return the chat requests refused for their length."""
        with self._count_lock:
            return [c for c in self.counted if c.outcome == "refused"]

    def over_window(self) -> list[Counted]:
        """Return the chat requests whose prompt and output limit did not fit the window."""
        with self._count_lock:
            return [c for c in self.counted if c.requested > c.window]

    def prompt_counts(self) -> list[int]:
        """Return the prompt tokens of every chat request, in order."""
        with self._count_lock:
            return [c.prompt_tokens for c in self.counted]

    # --- the OpenAI contract, as these servers read it -----------------------------------------

    def violations(self, document: dict[str, Any]) -> list[str]:
        messages = [m for m in document.get("messages") or [] if isinstance(m, dict)]
        # These servers ignore fields they do not know: the reasoning field is one of them.
        plain = {k: v for k, v in document.items() if k != "messages"}
        plain["messages"] = [
            {k: v for k, v in m.items() if k != "reasoning_content"} for m in messages
        ]
        problems = schema_violations(plain) + ordering_violations(plain["messages"])
        if self.deepseek_reasoning and missing_reasoning(messages):
            problems.append(REASONING_REFUSAL)
        return problems

    # --- routes --------------------------------------------------------------------------------

    def _default(self, method: str, path: str, document: Any) -> ScriptedReply:
        if method == "GET" and path == MODELS_PATH and self.models_body is None:
            return ScriptedReply(200, self._models())
        if method == "GET" and path == "/props" and self.serve_props:
            return ScriptedReply(200, self._props())
        if method == "POST" and path in _TOKENIZE_PATHS:
            return self._tokenize(path, document)
        if method == "POST" and path == "/apply-template" and "llama.cpp" in self.tokenizers:
            return self._apply_template(document)
        if method == "POST" and path == CHAT_PATH:
            return self._chat(document, path)
        if self.kind == "ollama":
            answer = self._ollama(method, path, document)
            if answer is not None:
                return answer
        if method == "GET" and path != MODELS_PATH:
            return ScriptedReply(404, {"detail": "Not Found"})
        return super()._default(method, path, document)

    def _models(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"id": self.model_path, "object": "model", "owned_by": "me"}
        if self.kind == "llama.cpp":
            entry["owned_by"] = "llamacpp"
            entry["meta"] = {"vocab_type": 2, "n_vocab": 49_152, "n_ctx_train": N_CTX_TRAIN}
        if self.models_window:
            entry["max_model_len"] = self.n_ctx
        return {"object": "list", "data": [entry]}

    def _props(self) -> dict[str, Any]:
        return {
            "default_generation_settings": {
                "id": 0,
                "id_task": -1,
                "n_ctx": self.n_ctx,
                "speculative": False,
                "is_processing": False,
                "params": {"n_predict": -1, "temperature": 0.8},
            },
            "total_slots": 1,
            "model_path": self.model_path,
            "chat_template": "{% for message in messages %}...{% endfor %}",
            "modalities": {"vision": False},
            "is_sleeping": False,
        }

    # --- tokenization --------------------------------------------------------------------------

    def _tokenize(self, path: str, document: Any) -> ScriptedReply:
        style = self._tokenizer_style(path, document)
        if style is None:
            return ScriptedReply(404, {"detail": "Not Found"})
        with self._count_lock:
            self.tokenize_calls += 1
        if self.tokenizer_failure == "error":
            return ScriptedReply(
                500, {"error": {"code": 500, "message": "tokenizer failed", "type": "server_error"}}
            )
        delay = self.tokenizer_delay if self.tokenizer_failure == "slow" else 0.0
        if style == "llama.cpp":
            text = document.get("content")
            if not isinstance(text, str):
                return _invalid('"content" must be provided')
            return ScriptedReply(200, {"tokens": _token_ids(text)}, delay=delay)
        if style == "vllm":
            return self._vllm_tokenize(document, delay)
        text = document.get("input")
        if not isinstance(text, str):
            return ScriptedReply(
                422, {"detail": [{"loc": ["body", "input"], "msg": "Field required"}]}
            )
        if path.endswith("/count"):
            return ScriptedReply(200, {"count": count_tokens(text)}, delay=delay)
        return ScriptedReply(200, {"tokens": _token_ids(text)}, delay=delay)

    def _apply_template(self, document: Any) -> ScriptedReply:
        if not isinstance(document, dict) or not isinstance(document.get("messages"), list):
            return _invalid('"messages" must be provided')
        prompt = render_prompt(document["messages"], self._rendered_tools(document))
        return ScriptedReply(200, {"prompt": prompt})

    def _tokenizer_style(self, path: str, document: Any) -> str | None:
        if not isinstance(document, dict):
            return None
        if path.startswith("/extras/"):
            return "llama-cpp-python" if "llama-cpp-python" in self.tokenizers else None
        if "llama.cpp" in self.tokenizers and "content" in document:
            return "llama.cpp"
        if "vllm" in self.tokenizers:
            return "vllm"
        return "llama.cpp" if "llama.cpp" in self.tokenizers else None

    def _vllm_tokenize(self, document: dict[str, Any], delay: float) -> ScriptedReply:
        if isinstance(document.get("messages"), list):
            text = render_prompt(document["messages"], document.get("tools"))
        elif isinstance(document.get("prompt"), str):
            text = document["prompt"]
        else:
            return _invalid("prompt or messages must be provided")
        ids = _token_ids(text)
        answer = {"count": len(ids), "max_model_len": self.n_ctx, "tokens": ids}
        return ScriptedReply(200, answer, delay=delay)

    # --- chat ----------------------------------------------------------------------------------

    def _rendered_tools(self, document: dict[str, Any]) -> list[dict[str, Any]] | None:
        tools = document.get("tools") or None
        if tools and self.tool_choice_required and document.get("tool_choice") in (None, "none"):
            return None
        return tools

    def _chat(self, document: Any, path: str) -> ScriptedReply:
        messages = document.get("messages") or []
        if self.null_content_refused and any(
            message.get("role") == "assistant" and message.get("content", "") is None
            for message in messages
            if isinstance(message, dict)
        ):
            # llama-cpp-python's validation error, answered as its server answers any error.
            detail = "messages.assistant.content: Input should be a valid string"
            return ScriptedReply(500, {"error": {"message": detail, "type": "internal_error"}})
        tools = self._rendered_tools(document)
        streamed = document.get("stream") is True
        limit = document.get("max_tokens")
        limit = limit if isinstance(limit, int) and not isinstance(limit, bool) else None
        count = prompt_tokens(messages, tools)
        refused = self._refused(count, limit)
        outcome = "ok"
        if refused:
            outcome = "truncated" if self.overflow == "truncate" else "refused"
        self._record(path, count, limit, streamed, outcome, messages)
        if outcome == "refused":
            return self._refusal(count, limit, streamed)
        automatic = tools and document.get("tool_choice") == "auto"
        if streamed and automatic and self.tool_choice_required:
            # "Automatic streaming tool choice is not supported": the stream ends empty.
            return _RawStream(200, events=[], raw=b"")
        seen, room = count, self.n_ctx - count
        if outcome == "truncated":
            # Cut to its last n_ctx tokens; the context shifts to make room for the answer.
            seen, room = self.n_ctx, limit or 128
        output = room if limit is None else max(0, min(limit, room))
        message, finish = self._answer(messages, tools, output)
        completion = self._completion(document, message, finish, seen)
        if streamed:
            events = stream_chunks(completion, chunk_chars=self.chunk_chars)
            include_usage = (document.get("stream_options") or {}).get("include_usage")
            if not (self.stream_usage and include_usage):
                events = [event for event in events if event.get("choices")]
            return ScriptedReply(200, None, events=events)
        return ScriptedReply(200, completion)

    def _refused(self, count: int, limit: int | None) -> bool:
        if self.refuse_with_output:
            return count + (limit or 0) > self.n_ctx
        return count >= self.n_ctx

    def _record(self, path, count, limit, streamed, outcome, messages) -> None:
        system = next((m for m in messages if m.get("role") == "system"), {})
        purpose = "compaction" if "handoff summary" in _content_text(system.get("content")) else ""
        with self._count_lock:
            self.counted.append(Counted(path, count, limit, self.n_ctx, streamed, outcome, purpose))

    def _refusal(self, count: int, limit: int | None, streamed: bool) -> ScriptedReply:
        if self.overflow == "llama-cpp-python":
            if streamed:
                return _RawStream(200, events=[], raw=b"")
            completion = limit or 0
            message = (
                f"This model's maximum context length is {self.n_ctx} tokens. However, you "
                f"requested {count + completion} tokens ({count} in the messages, {completion} "
                "in the completion). Please reduce the length of the messages or completion."
            )
            return ScriptedReply(
                400,
                {
                    "error": {
                        "message": message,
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": "context_length_exceeded",
                    }
                },
            )
        error = {
            "code": 400,
            "message": f"request ({count} tokens) exceeds the available context size "
            f"({self.n_ctx} tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": count,
            "n_ctx": self.n_ctx,
        }
        if streamed and self.overflow == "llama.cpp-error-event":
            raw = f"error: {json.dumps(error)}\n\ndata: [DONE]\n\n".encode()
            return _RawStream(200, events=[], raw=raw)
        if streamed and self.overflow == "llama.cpp-data-error":
            return _RawStream(
                200, events=[], raw=f"data: {json.dumps({'error': error})}\n\n".encode()
            )
        return ScriptedReply(400, {"error": error})

    def _answer(
        self, messages: list[dict[str, Any]], tools: Any, output: int
    ) -> tuple[dict[str, Any], str]:
        self.replies += 1
        message: dict[str, Any] = {"role": "assistant", "content": ""}
        if messages and messages[-1].get("role") == "tool":
            results = []
            for earlier in reversed(messages):
                if earlier.get("role") != "tool":
                    break
                results.insert(0, _content_text(earlier.get("content"))[:200])
            text = "Tool results: " + "; ".join(results)
        else:
            users = [m for m in messages if m.get("role") == "user"]
            question = _content_text(users[-1].get("content")) if users else ""
            calls = _tool_calls(question, self.replies) if tools else []
            if calls:
                message["tool_calls"] = calls
                text = ""
            else:
                text = f"You asked: {question[:200]}"
        if self.deepseek_reasoning:
            message["reasoning_content"] = f"thinking NONCE-R{self.replies}"
        pieces = TOKEN.finditer(text)
        cut = [match.end() for _, match in zip(range(output), pieces, strict=False)]
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        if text and (len(cut) < count_tokens(text)):
            text, finish = text[: cut[-1]] if cut else "", "length"
        # A reply that only calls tools has `content: null`, as llama-cpp-python's
        # `chatml_function_calling` and OpenAI answer it.
        message["content"] = None if message.get("tool_calls") and not text else text
        return message, finish

    def _completion(
        self, document: dict[str, Any], message: dict[str, Any], finish: str, seen: int
    ) -> dict[str, Any]:
        completion_tokens = count_tokens(message.get("content") or "") + count_tokens(
            _calls_text(message)
        )
        return {
            "id": f"chatcmpl-llama-{self.replies}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": document.get("model") or self.model_path,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": seen,
                "completion_tokens": completion_tokens,
                "total_tokens": seen + completion_tokens,
            },
        }

    # --- Ollama's own routes -------------------------------------------------------------------

    def _ollama(self, method: str, path: str, document: Any) -> ScriptedReply | None:
        if method == "GET" and path == "/api/tags":
            details = {"format": "gguf", "family": "llama", "families": ["llama"]}
            entry = {"name": self.model_path, "model": self.model_path, "details": details}
            return ScriptedReply(200, {"models": [entry]})
        if method == "GET" and path == "/api/ps":
            return ScriptedReply(200, {"models": []})
        if method == "POST" and path == "/api/chat" and isinstance(document, dict):
            return self._ollama_chat(document)
        return None

    def _ollama_chat(self, document: dict[str, Any]) -> ScriptedReply:
        options = document.get("options") or {}
        window = options.get("num_ctx") or self.n_ctx
        messages = document.get("messages") or []
        tools = document.get("tools") or None
        count = prompt_tokens(messages, tools)
        seen = min(count, window)
        limit = options.get("num_predict")
        with self._count_lock:
            self.counted.append(
                Counted(
                    "/api/chat",
                    count,
                    limit,
                    window,
                    False,
                    "truncated" if count > window else "ok",
                )
            )
        room = window - seen if count <= window else (limit or 128)
        message, finish = self._answer(
            messages, tools, max(0, room if limit is None else min(limit, room))
        )
        for call in message.get("tool_calls") or []:
            call.pop("id", None)
            call.pop("type", None)
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
        return ScriptedReply(
            200,
            {
                "model": document.get("model") or self.model_path,
                "created_at": "2026-12-02T00:00:00Z",
                "message": message,
                "done": True,
                "done_reason": finish if finish != "tool_calls" else "stop",
                "prompt_eval_count": seen,
                "eval_count": count_tokens(message.get("content") or ""),
            },
        )

    # --- sending -------------------------------------------------------------------------------

    def _send_stream(self, handler, scripted: ScriptedReply, document: Any) -> None:
        if not isinstance(scripted, _RawStream):
            super()._send_stream(handler, scripted, document)
            return
        with contextlib.suppress(OSError):
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Cache-Control", "no-cache")
            handler.send_header("Connection", "close")
            handler.close_connection = True
            handler.end_headers()
            handler.wfile.write(scripted.raw)
            handler.wfile.flush()


def _tool_calls(question: str, reply: int) -> list[dict[str, Any]]:
    calls = []
    position = 0
    while match := _TOOL.search(question, position):
        try:
            arguments, position = json.JSONDecoder().raw_decode(question, match.end())
        except ValueError:
            arguments, position = {}, match.end()
        calls.append(
            {
                "id": f"call_{reply}_{len(calls) + 1}",
                "type": "function",
                "function": {"name": match.group(1), "arguments": json.dumps(arguments)},
            }
        )
    return calls


def _invalid(message: str) -> ScriptedReply:
    return ScriptedReply(
        400, {"error": {"code": 400, "message": message, "type": "invalid_request_error"}}
    )
