"""Check a chat-completions request the way OpenAI's API would.

Two layers: the published JSON Schema of `CreateChatCompletionRequest` (shape of every message),
and the ordering rules the schema cannot express (tool calls answered right after they are made,
exactly once). Test doubles call `violations(request)`; an empty list means the real API would
accept the request.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

# Vendored with its origin and licence noted in vendor/README.md.
SCHEMA_PATH = Path(__file__).resolve().parent / "vendor" / "openai-chat-and-models.schema.json"


@functools.cache
def _bundle() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


@functools.cache
def _validator(root: str) -> jsonschema.Draft202012Validator:
    bundle = _bundle()
    schema = {"$defs": bundle["$defs"], "$ref": f"#/$defs/{root}"}
    return jsonschema.Draft202012Validator(schema)


def schema_violations(
    document: dict[str, Any], root: str = "CreateChatCompletionRequest"
) -> list[str]:
    """Return the JSON-Schema errors of `document` against one root of the bundle."""
    return [
        f"{'/'.join(str(p) for p in error.absolute_path)}: {error.message}"
        for error in _validator(root).iter_errors(document)
    ]


def ordering_violations(messages: list[dict[str, Any]]) -> list[str]:
    """Return the tool-call ordering rules that `messages` breaks."""
    problems: list[str] = []
    issued: set[str] = set()
    answered: set[str] = set()
    waiting: list[str] = []  # call ids of the latest assistant message not yet answered
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in issued:
                problems.append(f"messages/{index}: tool message answers unknown call {call_id!r}")
            elif call_id in answered:
                problems.append(f"messages/{index}: call {call_id!r} answered twice")
            elif call_id not in waiting:
                problems.append(f"messages/{index}: call {call_id!r} answered out of its group")
            else:
                waiting.remove(call_id)
                answered.add(call_id)
            continue
        if waiting:
            problems.append(
                f"messages/{index}: {role} message before tool results for {sorted(waiting)}"
            )
            waiting = []
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                call_id = call.get("id")
                if call_id in issued:
                    problems.append(f"messages/{index}: duplicate tool call id {call_id!r}")
                issued.add(call_id)
                waiting.append(call_id)
    if waiting:
        problems.append(f"end: tool calls without results {sorted(waiting)}")
    return problems


def violations(request: dict[str, Any]) -> list[str]:
    """Return every reason OpenAI would refuse this chat-completions request body."""
    return schema_violations(request) + ordering_violations(request.get("messages") or [])


def assert_valid_request(request: dict[str, Any]) -> None:
    problems = violations(request)
    assert not problems, "request OpenAI would refuse:\n" + "\n".join(problems)
