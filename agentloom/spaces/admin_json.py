"""JSON shown in the admin as a read-only tree: objects and arrays fold, text stays text.

Every value is escaped by `format_html`; nothing from a record is ever markup. The first levels
are open, deeper ones folded, so a checkpoint reads from the top down.
"""

from __future__ import annotations

import json
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

OPEN_LEVELS = 2
# Text longer than this, or with line breaks, is shown as a block.
INLINE_TEXT = 120


def json_tree(value: Any) -> SafeString:
    """Return `value` as a foldable tree inside a `.json-tree` block."""
    return format_html('<div class="json-tree">{}</div>', _node(value, 0))


def _node(value: Any, depth: int) -> SafeString:
    if isinstance(value, dict):
        return _branch(
            [(str(key), item) for key, item in value.items()], depth, "{}", "key", "keys"
        )
    if isinstance(value, list):
        return _branch(
            [(str(i), item) for i, item in enumerate(value)], depth, "[]", "item", "items"
        )
    if isinstance(value, str):
        if "\n" in value or len(value) > INLINE_TEXT:
            return format_html('<pre class="json-text">{}</pre>', value)
        return format_html(
            '<code class="json-string">{}</code>', json.dumps(value, ensure_ascii=False)
        )
    return format_html('<code class="json-scalar">{}</code>', json.dumps(value))


def _branch(items: list[tuple[str, Any]], depth: int, empty: str, one: str, many: str):
    if not items:
        return format_html('<code class="json-scalar">{}</code>', empty)
    rows = format_html_join(
        "",
        '<li><span class="json-key">{}</span> {}</li>',
        ((key, _node(item, depth + 1)) for key, item in items),
    )
    return format_html(
        '<details class="json-node"{}><summary>{} {}</summary><ul>{}</ul></details>',
        " open" if depth < OPEN_LEVELS else "",
        len(items),
        one if len(items) == 1 else many,
        rows,
    )
