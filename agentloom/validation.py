"""Input cleaning shared by the services: each failure names the field it is about."""

from __future__ import annotations

import re
from typing import Any

from agentloom.errors import InvalidInput

# Deepest nesting of objects and arrays accepted in a JSON request body or form field.
MAX_JSON_DEPTH = 64

# What `str.strip()` removes (the characters of `str.isspace`), as a regex character class.
WHITESPACE = r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# What single-line text may not hold, as a regex character class: the C0 and C1 controls and DEL,
# and the Basic Multilingual Plane's line and paragraph separators and invisible format
# characters (bidirectional controls, zero-width characters, the byte order mark, …): Unicode's
# categories Cc, Cf, Zl and Zp below U+10000.
CONTROLS = (
    r"\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    r"\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
)
_SINGLE_LINE = re.compile(f"[^{CONTROLS}]*")


def is_single_line(value: str) -> bool:
    """Return whether `value` holds none of the `CONTROLS`."""
    return _SINGLE_LINE.fullmatch(value) is not None


def text_pattern(*, trimmed: bool, blank: bool, single_line: bool = False) -> str:
    """Return the pattern (ECMA-262, as a schema declares it) of the text a field accepts.

    Every text refuses NUL (as DRF does). `trimmed` text is judged after `str.strip()`: with
    `blank` false it needs a character that is not whitespace; `single_line` text holds none of
    the `CONTROLS` once trimmed.
    """
    allowed = f"[^{CONTROLS}]" if single_line else r"[^\x00]"
    if not trimmed:
        return f"^{allowed}{'*' if blank else '+'}$"
    edge = f"[^{CONTROLS}{WHITESPACE}]" if single_line else f"[^\\x00{WHITESPACE}]"
    core = f"{edge}(?:{allowed}*{edge})?"
    return f"^[{WHITESPACE}]*{f'(?:{core})?' if blank else core}[{WHITESPACE}]*$"


def clean_text(
    value: Any, *, field: str, max_chars: int, required: bool = True, single_line: bool = False
) -> str:
    """Return `value` as text, or raise InvalidInput naming `field`.

    Required text (names, questions) is stripped and may be neither missing nor blank; optional
    text (prompts, descriptions) keeps its spacing and reads None as empty. `single_line` refuses
    the `CONTROLS`, for identifiers and names that end up in headers, URLs and page titles.
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
    if single_line and not is_single_line(value):
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
