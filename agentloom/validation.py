"""Input cleaning shared by the services: each failure names the field it is about."""

from __future__ import annotations

from typing import Any

from agentloom.errors import InvalidInput

# Deepest nesting of objects and arrays accepted in a JSON request body or form field.
MAX_JSON_DEPTH = 64


def clean_text(
    value: Any, *, field: str, max_chars: int, required: bool = True, single_line: bool = False
) -> str:
    """Return `value` as text, or raise InvalidInput naming `field`.

    Required text (names, questions) is stripped and may be neither missing nor blank; optional
    text (prompts, descriptions) keeps its spacing and reads None as empty. `single_line` refuses
    control characters, for identifiers and names that end up in headers and URLs.
    """
    if value is None:
        if required:
            raise InvalidInput("This field is required.", field=field)
        return ""
    if not isinstance(value, str):
        raise InvalidInput("Must be a string.", field=field)
    if required:
        value = value.strip()
        if not value:
            raise InvalidInput("This field may not be blank.", field=field)
    if len(value) > max_chars:
        raise InvalidInput(f"At most {max_chars} characters.", field=field)
    if single_line and not value.isprintable():
        raise InvalidInput("Must not contain control characters.", field=field)
    return value


def json_depth_exceeds(value: Any, limit: int) -> bool:
    """Return whether `value` nests lists and dicts more than `limit` levels deep (no recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list | tuple):
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in item)
    return False
