"""Input cleaning shared by the services: each failure names the field it is about."""

from __future__ import annotations

from typing import Any

from agentloom.errors import InvalidInput


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
