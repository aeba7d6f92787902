"""A tool server's questions to the person: the forms they are shown as, and the answers' check.

A question is a plain dict: `key` (the server's), `mode`, `message` and, in form mode, the
`fields` of its requested schema — a flat object whose properties are strings, numbers, integers,
booleans or enums (`{name, type, title, description, required, options, default}`); in URL mode
the `url`, shown whole, which the person opens only after confirming it. A schema outside that
subset is kept as `unsupported` with the reason: the person can only decline or cancel it.

`checked_content` checks an accepted form's content against its fields and returns it typed;
anything else is an `AnswerError` naming the field. A URL question is accepted only with the URL
confirmed, and carries no content.

A server must not ask for secrets in form mode (the MCP specification says so); the console says
it beside every form, and the answers are journaled like any other session content.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_MESSAGE_CHARS",
    "AnswerError",
    "checked_content",
    "form_fields",
    "question_of",
]

MAX_MESSAGE_CHARS = 4_000
MAX_ANSWER_CHARS = 4_000
MAX_FIELDS = 50
_PRIMITIVES = ("string", "number", "integer", "boolean")


class AnswerError(ValueError):
    """An answer that does not fit its question: `field` names the part that is wrong."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


def _text(value: Any, limit: int = MAX_MESSAGE_CHARS) -> str:
    return str(value)[:limit] if value is not None else ""


def _field_of(name: str, schema: Any, required: bool) -> dict[str, Any]:
    if not isinstance(schema, dict):
        raise ValueError(f"property {name!r} has no schema")
    options = schema.get("enum")
    if options is None and isinstance(schema.get("oneOf"), list):
        options = [item.get("const") for item in schema["oneOf"] if isinstance(item, dict)]
    kind = schema.get("type")
    if options is not None:
        if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
            raise ValueError(f"property {name!r} has options that are not strings")
        kind = "enum"
    elif kind not in _PRIMITIVES:
        raise ValueError(f"property {name!r} is of type {kind!r}, not a string, number or boolean")
    field = {
        "name": name,
        "type": kind,
        "title": _text(schema.get("title"), 200),
        "description": _text(schema.get("description"), 1_000),
        "required": required,
    }
    if options is not None:
        field["options"] = options
    if "default" in schema:
        field["default"] = schema["default"]
    return field


def form_fields(schema: Any) -> list[dict[str, Any]]:
    """Return the fields of a requested schema, or raise ValueError saying why it is not one."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise ValueError("the requested schema is not an object")
    properties = schema.get("properties") or {}
    if not isinstance(properties, dict) or len(properties) > MAX_FIELDS:
        raise ValueError("the requested schema's properties are not a small flat object")
    required = schema.get("required") or []
    return [_field_of(str(name), prop, name in required) for name, prop in properties.items()]


def question_of(key: str, params: dict[str, Any]) -> dict[str, Any]:
    """Return the question of one elicitation request (its params as JSON)."""
    mode = params.get("mode") or ("url" if "url" in params else "form")
    question: dict[str, Any] = {
        "key": str(key),
        "mode": "url" if mode == "url" else "form",
        "message": _text(params.get("message")),
        "unsupported": "",
    }
    if question["mode"] == "url":
        question["url"] = _text(params.get("url"), 2_048)
        if not question["url"].startswith(("https://", "http://")):
            question["unsupported"] = "the URL is not an http or https address"
        return question
    try:
        question["fields"] = form_fields(params.get("requestedSchema"))
    except ValueError as error:
        question["fields"] = []
        question["unsupported"] = str(error)
    return question


def _typed(field: dict[str, Any], value: Any) -> Any:
    kind = field["type"]
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        if value in ("true", "on", "1"):
            return True
        if value in ("false", "off", "0", ""):
            return False
        raise ValueError("must be true or false")
    if kind in ("number", "integer"):
        if isinstance(value, str):
            value = value.strip()
        try:
            number = float(value) if kind == "number" else int(value)
        except (TypeError, ValueError):
            what = "a number" if kind == "number" else "a whole number"
            raise ValueError(f"must be {what}") from None
        if isinstance(value, bool) or (isinstance(number, float) and not math.isfinite(number)):
            raise ValueError("must be a finite number")
        return number
    if not isinstance(value, str):
        raise ValueError("must be text")
    if len(value) > MAX_ANSWER_CHARS:
        raise ValueError(f"must be at most {MAX_ANSWER_CHARS} characters")
    if kind == "enum" and value not in field["options"]:
        raise ValueError("must be one of " + ", ".join(field["options"]))
    return value


def checked_content(question: dict[str, Any], content: Any) -> dict[str, Any]:
    """Return an accepted form's content, typed by its fields, or raise `AnswerError`."""
    if question.get("unsupported"):
        raise AnswerError("action", "This question cannot be answered here: decline or cancel it.")
    if not isinstance(content, dict):
        raise AnswerError("content", "Must be an object of the form's fields.")
    fields = {field["name"]: field for field in question.get("fields") or []}
    unknown = sorted(set(content) - set(fields))
    if unknown:
        raise AnswerError("content", f"Unknown field {unknown[0]!r}.")
    typed: dict[str, Any] = {}
    for name, field in fields.items():
        value = content.get(name)
        if value is None or (value == "" and field["type"] != "boolean"):
            if field["required"]:
                raise AnswerError(f"content.{name}", "This field is required.")
            continue
        try:
            typed[name] = _typed(field, value)
        except ValueError as error:
            raise AnswerError(f"content.{name}", f"{str(error).capitalize()}.") from None
    return typed
