"""Ollama and LM Studio: the window a local server really runs a model with.

Neither server's model list carries a usable window, and the maximum a model supports is not the
window it runs with:

- Ollama runs a model with the `num_ctx` a request sends through its native API (`/api/chat`
  with `options.num_ctx`), else with its own server default. `/api/ps` reports the
  `context_length` of each model loaded now. The model's `context_length` in `/api/show` is its
  maximum and is never used as the window. Without `num_ctx` and with the model not loaded, the
  window is the platform default, with a warning.
- LM Studio's `/api/v0/models` reports `max_context_length` for every model and, for a model in
  `state: loaded`, the `loaded_context_length` it runs with: that one is used when present; a
  model not loaded gets the maximum, marked `provider_maximum` with a warning.

Both servers are called through the same guarded client as every provider. The base URL is the
server's root (`http://127.0.0.1:11434`, `http://127.0.0.1:1234`), without `/v1`.

An `openai_compatible` endpoint may be one of the servers that say the window they run with at
their own root (`compatible_windows`, called at the origin of the base URL only):

- llama.cpp's server: `GET /props` has `default_generation_settings.n_ctx`, the context size of
  one slot, which is what a request must fit (tools/server/README.md "GET /props", and
  tools/server/server-context.cpp, where a request of `n_ctx` tokens or more is refused, read
  2026-12-02). No top-level `n_ctx` was found in the props the source builds: it is not read.
  Its source is `server_props`.
- LM Studio: `GET /api/v0/models`, read as for the `lmstudio` kind (`provider_loaded` for a
  loaded model, which is as precise as a server can say).

A missing route or any failure of these extra calls leaves the listing as it was.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable
from typing import Any

from agentloom.engine import ModelRequest, ModelResponse
from agentloom.providers._errors import ProviderError
from agentloom.providers._http import ProviderClient
from agentloom.providers._urls import endpoint_url, origin_url

__all__ = [
    "LOCAL_SERVER_PROVIDERS",
    "NOT_LOADED_WARNING",
    "OLLAMA_DEFAULT_WARNING",
    "chat_url",
    "compatible_windows",
    "lmstudio_windows",
    "ollama_chat_payload",
    "ollama_windows",
    "parse_ollama_chat",
]

logger = logging.getLogger("agentloom.providers")

LOCAL_SERVER_PROVIDERS = ("ollama", "lmstudio")

OLLAMA_DEFAULT_WARNING = (
    "Ollama reports no window for this model: it is not loaded and the connection sends no "
    "num_ctx, so Ollama runs it with its own server default. The 32K platform default is "
    "assumed; set num_ctx on the connection to fix the window."
)
NOT_LOADED_WARNING = (
    "Not loaded: this is the model's maximum context length. LM Studio may load it with a "
    "smaller one; load it first and fetch the models again, or enter the window by hand."
)

# A window answer with (size, source, warning); size None means "use the platform default".
Window = tuple[int | None, str, str | None]

_MAX_SANE_TOKENS = 100_000_000


def chat_url(provider: str, base_url: str, *, num_ctx: int | None = None) -> str:
    """Return the chat endpoint: Ollama's native one when `num_ctx` is sent, else `/v1`'s."""
    if provider == "ollama" and num_ctx is not None:
        return endpoint_url(base_url, "/api/chat")
    return endpoint_url(base_url, "/v1/chat/completions")


def _size(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 < value <= _MAX_SANE_TOKENS else None


def _entries(document: Any, key: str) -> list[dict[str, Any]]:
    if not isinstance(document, dict) or not isinstance(document.get(key), list):
        raise ProviderError("protocol", "The server's answer is not a list of models.")
    return [entry for entry in document[key] if isinstance(entry, dict)]


def ollama_windows(client: ProviderClient, base_url: str) -> dict[str, tuple[Window, bool]]:
    """Return each model Ollama has with its window and whether it serves chat.

    Models come from `/api/tags`; loaded ones get `/api/ps`'s `context_length`.
    """
    tags = _entries(client.get_json(endpoint_url(base_url, "/api/tags"), api_key=None), "models")
    loaded: dict[str, int] = {}
    running = client.get_json(endpoint_url(base_url, "/api/ps"), api_key=None)
    for entry in _entries(running, "models"):
        size = _size(entry.get("context_length"))
        for name in (entry.get("model"), entry.get("name")):
            if isinstance(name, str) and size is not None:
                loaded[name] = size
    models: dict[str, tuple[Window, bool]] = {}
    for entry in tags:
        name = entry.get("model") or entry.get("name")
        if not isinstance(name, str) or not name.strip():
            continue
        families = (entry.get("details") or {}).get("families") or []
        chat = not any("bert" in str(family).lower() for family in families)
        if name in loaded:
            models[name] = ((loaded[name], "provider_loaded", None), chat)
        else:
            models[name] = ((None, "platform_default", OLLAMA_DEFAULT_WARNING), chat)
    return models


def lmstudio_windows(
    client: ProviderClient, base_url: str, *, optional: bool = False
) -> dict[str, tuple[Window, bool]]:
    """Return each model LM Studio has with its window and whether it serves chat.

    `optional`: the server may not be LM Studio (its failure is then logged at debug level).
    """
    url = endpoint_url(base_url, "/api/v0/models")
    document = client.get_json(url, api_key=None, optional=optional)
    models: dict[str, tuple[Window, bool]] = {}
    for entry in _entries(document, "data"):
        name = entry.get("id")
        if not isinstance(name, str) or not name.strip():
            continue
        chat = entry.get("type") in ("llm", "vlm")
        loaded = _size(entry.get("loaded_context_length"))
        maximum = _size(entry.get("max_context_length"))
        if entry.get("state") == "loaded" and loaded is not None:
            window: Window = (loaded, "provider_loaded", None)
        elif maximum is not None:
            window = (maximum, "provider_maximum", NOT_LOADED_WARNING)
        else:
            window = (None, "platform_default", None)
        models[name] = (window, chat)
    return models


def compatible_windows(
    client: ProviderClient, base_url: str, model_ids: Iterable[str], *, api_key: str | None
) -> dict[str, tuple[Window, str]]:
    """Return the window, and the URL it was read at, that the server reports for listed models.

    For `openai_compatible` endpoints: llama.cpp's `/props` (with the connection's key), then
    LM Studio's `/api/v0/models` (without, as for the `lmstudio` kind), both at the origin of
    `base_url`. Models the server says nothing of are left out.
    """
    wanted = list(model_ids)
    found: dict[str, tuple[Window, str]] = {}
    props_url = origin_url(base_url, "/props")
    # A llama.cpp server started with --api-key asks for it on /props too: only /health,
    # /v1/health, /models, /v1/models and /api/tags are public (tools/server/server-http.cpp,
    # `public_endpoints`, read 2026-12-02). The key is the one of this origin's server.
    props = _optional(lambda: client.get_json(props_url, api_key=api_key, optional=True))
    window = _props_window(props)
    if window is not None:
        for model_id in _props_models(props, wanted):
            found[model_id] = ((window, "server_props", None), props_url)
    if len(found) < len(wanted):
        lmstudio_url = origin_url(base_url, "/api/v0/models")
        listed = _optional(
            lambda: lmstudio_windows(client, origin_url(base_url, "/"), optional=True)
        )
        for name, (listed_window, _) in (listed or {}).items():
            if name in wanted and name not in found and listed_window[0] is not None:
                found[name] = (listed_window, lmstudio_url)
    return found


def _optional(read: Any) -> Any:
    """Return what `read()` returns, or None when the server does not answer it."""
    try:
        return read()
    except ProviderError as error:
        # A route this server does not have (404) is the usual answer: nothing to report.
        logger.debug(
            "optional server route unanswered: kind=%s status=%s", error.kind, error.status
        )
        return None


def _props_window(props: Any) -> int | None:
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    return _size(settings.get("n_ctx")) if isinstance(settings, dict) else None


def _props_models(props: dict[str, Any], model_ids: list[str]) -> list[str]:
    """Return the listed models the props are of: the one named by alias or path, else the
    only model listed (a server started with one model)."""
    names = {props.get(key) for key in ("model_alias", "model_path")}
    named = [model_id for model_id in model_ids if model_id in names]
    if named:
        return named
    return model_ids if len(model_ids) == 1 else []


# --- Ollama's native chat ------------------------------------------------------------------------


def ollama_chat_payload(
    model_id: str, request: ModelRequest, *, num_ctx: int, output_limit: int
) -> dict[str, Any]:
    """Return the `/api/chat` body: OpenAI-style messages in Ollama's shapes, with num_ctx.

    Ollama takes tool-call arguments as objects and names a tool result by its tool's name.
    """
    names: dict[str, str] = {}
    messages = []
    for message in request.messages:
        converted = {"role": message["role"], "content": message.get("content") or ""}
        calls = message.get("tool_calls")
        if calls:
            converted["tool_calls"] = []
            for call in calls:
                function = call.get("function") or {}
                names[call.get("id", "")] = function.get("name", "")
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    arguments = {}
                converted["tool_calls"].append(
                    {"function": {"name": function.get("name", ""), "arguments": arguments}}
                )
        if message["role"] == "tool":
            converted["tool_name"] = names.get(message.get("tool_call_id", ""), "")
        messages.append(converted)
    body: dict[str, Any] = {
        "model": model_id,
        "messages": messages,
        "stream": False,
        "options": {"num_ctx": num_ctx, "num_predict": output_limit},
    }
    if request.tools:
        body["tools"] = list(request.tools)
    return body


def parse_ollama_chat(document: Any) -> ModelResponse:
    """Return the assistant message and usage of a non-streamed `/api/chat` answer.

    `prompt_eval_count` and `eval_count` become `prompt_tokens` and `completion_tokens`.
    """
    if not isinstance(document, dict) or not isinstance(document.get("message"), dict):
        raise ProviderError("protocol", "The server's answer has no message.")
    raw = document["message"]
    content = raw.get("content")
    if content is not None and not isinstance(content, str):
        raise ProviderError("protocol", "The server's message content is malformed.")
    message: dict[str, Any] = {"role": "assistant", "content": content}
    calls = raw.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise ProviderError("protocol", "The server's tool calls are malformed.")
        message["tool_calls"] = [_ollama_tool_call(call) for call in calls]
    usage = {}
    for source, target in (
        ("prompt_eval_count", "prompt_tokens"),
        ("eval_count", "completion_tokens"),
    ):
        count = document.get(source)
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            usage[target] = count
    reason = document.get("done_reason")
    return ModelResponse(
        message=message,
        usage=usage or None,
        finish_reason="tool_calls" if calls else (reason if isinstance(reason, str) else None),
        model=document.get("model") if isinstance(document.get("model"), str) else None,
    )


def _ollama_tool_call(call: Any) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ProviderError("protocol", "A tool call has no function name.")
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": function["name"], "arguments": arguments},
    }
