"""How servers say a request is longer than the model's context window, and what numbers they name.

`length_refusal` reads an error's code, type, message and the fields some servers add, and
returns a `context_length` error carrying the window the server named, the size it says the
request needed and, where it says it apart, what the request's input alone held. The numbers are
parsed from the server's words; the `evidence` kept with them is rebuilt here from fixed text and
those numbers, so no provider text travels further.

Each wording below names where it was read (the server's source or documentation, and the date).
"""

from __future__ import annotations

import re
from typing import Any

from agentloom.providers._errors import ProviderError

__all__ = ["evidence_for", "length_refusal", "mentions_length"]

# Larger than any real window; a number above is junk, not a size.
_MAX_SANE_TOKENS = 100_000_000

# Error codes and types that mean "too long" whatever the text says.
_CONTEXT_CODES = frozenset(
    {
        # OpenAI's error code (platform.openai.com/docs/guides/error-codes, read 2026-12-02);
        # llama-cpp-python's server answers with it too (llama_cpp/server/errors.py,
        # `context_length_exceeded`, read 2026-12-02).
        "context_length_exceeded",
        "context_window_exceeded",
        "string_above_max_length",
        # llama.cpp server: `ERROR_TYPE_EXCEED_CONTEXT_SIZE` is sent as type
        # "exceed_context_size_error" (tools/server/server-common.cpp, format_error_response,
        # read 2026-12-02; added by github.com/ggml-org/llama.cpp/pull/15780).
        "exceed_context_size_error",
    }
)

# Words that say "too long" when no code does.
_CONTEXT_TEXT = re.compile(
    r"context[ _-]?(length|window|size)|maximum model length|max_model_len|prompt is too long"
    r"|input is too long|too many input tokens",
    re.IGNORECASE,
)

# The window a refusal names. Numbers only; the words around them are never kept.
_WINDOW_WORDS = (
    # OpenAI: "This model's maximum context length is 8192 tokens. However, you requested
    # 9850 tokens ..." (error-codes guide, read 2026-12-02). llama-cpp-python's server rewrites
    # its overflow into the same sentence (llama_cpp/server/errors.py, read 2026-12-02; measured
    # here on 0.3.36: "This model's maximum context length is 4096 tokens. However, you requested
    # 5020 tokens (5010 in the messages, 10 in the completion)."). vLLM's refusals start the same
    # way in every version read (vllm/entrypoints/openai/serving_engine.py "... you requested N
    # tokens (X in the messages, Y in the completion)"; vllm/renderers/params.py "... you
    # requested X output tokens and your prompt contains at least Y input tokens, for a total of
    # at least Z tokens", read 2026-12-02).
    re.compile(r"maximum context length is (\d+)", re.IGNORECASE),
    # vLLM vllm/renderers/params.py `_token_len_check`: "You passed X input tokens and requested
    # Y output tokens. However, the model's context length is only N tokens, ..." (read
    # 2026-12-02).
    re.compile(r"context length is only (\d+)", re.IGNORECASE),
    # llama.cpp server tools/server/server-context.cpp (update_slots): "request (%d tokens)
    # exceeds the available context size (%d tokens), try increasing it" (read 2026-12-02).
    re.compile(r"exceeds the available context size \((\d+) tokens?\)", re.IGNORECASE),
    # The same file, for models that cannot split a batch: "input (%d tokens) is larger than the
    # max context size (%d tokens). skipping" (read 2026-12-02).
    re.compile(r"larger than the max context size \((\d+) tokens?\)", re.IGNORECASE),
    # llama-cpp-python's Llama: "Requested tokens (M) exceed context window of N" (the pattern
    # llama_cpp/server/errors.py matches, read 2026-12-02; in this server's log as measured).
    re.compile(r"exceeds? context window of (\d+)", re.IGNORECASE),
    # vLLM vllm/renderers/params.py `TokenizeParams.__post_init__`: "max_tokens=X cannot be
    # greater than max_model_len=max_total_tokens=N" (read 2026-12-02).
    re.compile(r"max_model_len=(?:max_total_tokens=)?(\d+)", re.IGNORECASE),
)

# Words that name the prompt alone, which is also what the request needed there.
# llama.cpp server-context.cpp: "request (%d tokens) exceeds ...", "input (%d tokens) is ...".
_LLAMA_CPP_REQUEST = re.compile(r"request \((\d+) tokens?\) exceeds", re.IGNORECASE)
_LLAMA_CPP_INPUT = re.compile(r"input \((\d+) tokens?\) is larger", re.IGNORECASE)
# llama-cpp-python: "Requested tokens (M) exceed context window of N".
_LLAMA_CPP_PYTHON = re.compile(r"requested tokens \((\d+)\) exceed", re.IGNORECASE)

# What the request needed, as the refusal says it (one number).
_REQUESTED_WORDS = (
    # OpenAI, llama-cpp-python, vLLM serving_engine.py: "However, you requested M tokens".
    re.compile(r"you requested (\d+) tokens", re.IGNORECASE),
    # vLLM renderers/params.py: "for a total of at least Z tokens" / "for a total of Z tokens".
    re.compile(r"for a total of (?:at least )?(\d+) tokens", re.IGNORECASE),
    _LLAMA_CPP_REQUEST,
    _LLAMA_CPP_INPUT,
    _LLAMA_CPP_PYTHON,
)
# What the request needed, said as input plus output (two numbers to add).
_REQUESTED_SUMS = (
    # vLLM renderers/params.py `_token_len_check`: "You passed X input tokens and requested Y
    # output tokens." (read 2026-12-02).
    re.compile(r"you passed (\d+) input tokens and requested (\d+) output tokens", re.IGNORECASE),
    # vLLM (observed answers, 2025): "'max_tokens' or 'max_completion_tokens' is too large: Y.
    # This model's maximum context length is N tokens and your request has X input tokens".
    re.compile(
        r"is too large: (\d+)\..{0,80}?your request has (\d+) input tokens",
        re.IGNORECASE | re.DOTALL,
    ),
)
# vLLM: "... However, your request has X input tokens. Please reduce the length of the input
# messages." (observed answers, 2025).
_REQUEST_HAS = re.compile(r"your request has (\d+) input tokens", re.IGNORECASE)
# What the request's input alone held, where the words say it apart from the output limit.
_INPUT_WORDS = (
    # OpenAI and llama-cpp-python's rewrite: "... (X in the messages, Y in the completion)".
    re.compile(r"\((\d+) in the messages", re.IGNORECASE),
    _LLAMA_CPP_PYTHON,
    _LLAMA_CPP_REQUEST,
    _LLAMA_CPP_INPUT,
    # vLLM: "You passed X input tokens ...", "your request has X input tokens", "your prompt
    # contains at least X input tokens".
    re.compile(r"you passed (\d+) input tokens", re.IGNORECASE),
    _REQUEST_HAS,
    re.compile(r"your prompt contains at least (\d+) input tokens", re.IGNORECASE),
)


def mentions_length(code: str | None, text: str | None) -> bool:
    """Return whether an error's code or words say the request is too long."""
    return (code or "").lower() in _CONTEXT_CODES or bool(text and _CONTEXT_TEXT.search(text))


def length_refusal(
    code: str | None,
    text: str | None,
    error: dict[str, Any] | None = None,
    *,
    status: int | None = None,
) -> ProviderError | None:
    """Return the `context_length` error an answer's code, type or words give, else None.

    `error` is the server's error object: llama.cpp adds `n_ctx` and `n_prompt_tokens` to its
    "exceed_context_size_error" (tools/server/server-task.cpp, the error result's to_json, read
    2026-12-02); they are read before the text.
    """
    types = [code]
    if isinstance(error, dict) and isinstance(error.get("type"), str):
        types.append(error["type"])
    if not any(mentions_length(kind, text) for kind in types):
        return None
    window = requested = counted = None
    if isinstance(error, dict):
        window = _size(error.get("n_ctx"))
        requested = counted = _size(error.get("n_prompt_tokens"))
    if text:
        window = window or _first(_WINDOW_WORDS, text)
        requested = requested or _requested(text)
        counted = counted or _first(_INPUT_WORDS, text)
    return ProviderError(
        "context_length",
        status=status,
        window=window,
        requested=requested,
        evidence=evidence_for(window, requested),
        input_tokens=counted,
    )


def evidence_for(window: int | None, requested: int | None) -> str:
    """Return the phrase kept with a refusal: fixed words and the numbers the server named."""
    if window is not None and requested is not None:
        return f"maximum context length is {window} tokens; the request needed {requested} tokens"
    if window is not None:
        return f"maximum context length is {window} tokens"
    if requested is not None:
        return f"the request needed {requested} tokens"
    return "the server refused the request as too long"


def _requested(text: str) -> int | None:
    text = text[:4096]
    for pattern in _REQUESTED_SUMS:
        match = pattern.search(text)
        if match:
            total = sum(int(group) for group in match.groups())
            return total if 0 < total <= _MAX_SANE_TOKENS else None
    return _first(_REQUESTED_WORDS, text) or _first((_REQUEST_HAS,), text)


def _first(patterns: tuple[re.Pattern[str], ...], text: str) -> int | None:
    # Only the first few kilobytes: an error message is short, and a long body is not read.
    text = text[:4096]
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            value = _size(int(match.group(1)))
            if value is not None:
                return value
    return None


def _size(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 < value <= _MAX_SANE_TOKENS else None
