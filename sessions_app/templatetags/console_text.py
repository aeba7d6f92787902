"""How the console shows what a model wrote: markdown rendered on the server, then sanitized.

Assistant content goes through `render_markdown` (the `markdown` filter) and nowhere else, so one
rule holds for every page that renders it: markdown-it parses CommonMark with raw HTML off (a tag
in the text stays text), images are not loaded (they would fetch from anywhere; the alt text is
shown as a link), links keep only http, https and mailto targets, and nh3 (an allow-list
sanitizer) removes anything outside the few tags the renderer writes. A fenced code block gets a
copy button; the page's script, under the unchanged Content-Security-Policy, does the copying.
The journal viewer shows the raw text and does not use this.

A text is rendered once per process: the chat page, a run's block and the records fragment all
show the same answers again and again. The rendered HTML is content in clear, so it is kept only
in this process's memory (`RENDERED`, bounded), under a keyed hash of the text, never in the
database or a shared cache. The work per text is bounded too: a text above
`MARKDOWN_MAX_CHARS` is shown as written (escaped, preformatted) with a notice saying so.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from functools import cache
from html import escape

import nh3
from django import template
from django.utils.crypto import salted_hmac
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

register = template.Library()

# A message longer than this (characters or lines) is shown collapsed until "Show all".
LONG_TEXT_CHARS = 1200
LONG_TEXT_LINES = 16
URL_SCHEMES = frozenset({"http", "https", "mailto"})
ALLOWED_TAGS = frozenset(
    {
        "p", "br", "hr", "strong", "em", "s", "del", "code", "pre", "blockquote",
        "ul", "ol", "li", "a", "h1", "h2", "h3", "h4", "h5", "h6",
        "table", "thead", "tbody", "tr", "th", "td", "div", "span", "button",
    }
)  # fmt: skip
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "ol": {"start"},
    "th": {"class"},
    "td": {"class"},
    "code": {"class"},
    "div": {"class"},
    "span": {"class"},
    "button": {"type", "class", "data-copy"},
}
# Rendering costs about 3 s of CPU per MB of text (markdown-it, then nh3, both linear): above this
# bound, about 0.3 s, a text is shown as written instead.
MARKDOWN_MAX_CHARS = 100_000
# Rendered HTML one process keeps, in characters (16-64 MB of memory, by the script): some 75
# texts at the bound (their HTML is about twice as long), thousands of ordinary answers.
RENDERED_MAX_CHARS = 16_000_000
# A language name becomes a class; anything else in the fence's info string is dropped.
LANGUAGE = re.compile(r"[A-Za-z0-9_+#.-]{1,40}")


def _fence(renderer, tokens, index, options, env) -> str:
    """Write a fenced block as a titled box with a copy button; the language only names it."""
    token = tokens[index]
    match = LANGUAGE.match(token.info.strip())
    language = match.group(0) if match else ""
    css = f' class="language-{escape(language)}"' if language else ""
    label = f'<span class="code-lang">{escape(language)}</span>' if language else ""
    return (
        f'<div class="code-block"><div class="code-head">{label}'
        '<button type="button" class="small copy-button" data-copy="code">Copy code</button>'
        f"</div><pre><code{css}>{escape(token.content)}</code></pre></div>\n"
    )


@cache
def _parser() -> MarkdownIt:
    parser = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
        ["table", "strikethrough"]
    )
    parser.disable("image")
    parser.add_render_rule("fence", _fence)
    parser.add_render_rule("code_block", _indented)
    for cell in ("th_open", "td_open"):
        parser.add_render_rule(cell, _aligned_cell)
    return parser


def _indented(renderer, tokens, index, options, env) -> str:
    tokens[index].info = ""
    return _fence(renderer, tokens, index, options, env)


def _aligned_cell(renderer, tokens, index, options, env) -> str:
    """Write a table cell's alignment as a class: the policy admits no inline style."""
    token = tokens[index]
    style = token.attrGet("style") or ""
    token.attrs.pop("style", None)
    if style.startswith("text-align:"):
        token.attrSet("class", f"align-{style.removeprefix('text-align:')}")
    return renderer.renderToken(tokens, index, options, env)


class RenderedTexts:
    """Rendered HTML by a keyed hash of its text, in this process's memory; least recent out first.

    The key is an HMAC of the text under a key derived from `SECRET_KEY`, so a key says nothing
    of the text; the HTML itself is plaintext and so never leaves the process.
    """

    def __init__(self, max_chars: int):
        self.max_chars = max_chars
        self._items: OrderedDict[bytes, str] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    @staticmethod
    def key(text: str) -> bytes:
        return salted_hmac("sessions_app.console_text.rendered", text, algorithm="sha256").digest()

    def get(self, key: bytes) -> str | None:
        with self._lock:
            html = self._items.get(key)
            if html is not None:
                self._items.move_to_end(key)
            return html

    def put(self, key: bytes, html: str) -> None:
        if len(html) > self.max_chars:
            return
        with self._lock:
            previous = self._items.pop(key, None)
            self._chars -= len(previous) if previous is not None else 0
            self._items[key] = html
            self._chars += len(html)
            while self._chars > self.max_chars:
                _, dropped = self._items.popitem(last=False)
                self._chars -= len(dropped)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._chars = 0


RENDERED = RenderedTexts(RENDERED_MAX_CHARS)


def render_markdown(text: str) -> SafeString:
    """Return `text` as sanitized HTML: markdown rendered, raw HTML as text, bad links dropped.

    A text above `MARKDOWN_MAX_CHARS` comes back as written, escaped, after a notice.
    """
    text = text or ""
    if len(text) > MARKDOWN_MAX_CHARS:
        return _as_written(text)
    key = RENDERED.key(text)
    html = RENDERED.get(key)
    if html is None:
        html = _rendered(text)
        RENDERED.put(key, html)
    return mark_safe(html)  # noqa: S308 - sanitized by nh3 in `_rendered`


def _rendered(text: str) -> str:
    html = _parser().render(text)
    return nh3.clean(
        html,
        tags=set(ALLOWED_TAGS),
        attributes={tag: set(names) for tag, names in ALLOWED_ATTRIBUTES.items()},
        url_schemes=set(URL_SCHEMES),
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )


def _as_written(text: str) -> SafeString:
    """Return a text too long to render as a notice and the text itself, escaped."""
    notice = (
        f'<p class="as-written-notice">This text is {len(text):,} characters long, more than '
        f"the {MARKDOWN_MAX_CHARS:,} shown formatted: it is shown as written.</p>"
    )
    return mark_safe(f'{notice}<pre class="as-written">{escape(text)}</pre>')  # noqa: S308 - escaped


@register.filter(name="markdown")
def markdown_filter(text: str) -> SafeString:
    """Render a model's text as sanitized markdown (see `render_markdown`)."""
    return render_markdown(text)


@register.filter
def is_long(text: str) -> bool:
    """Return whether a message is long enough to be shown collapsed, with "Show all"."""
    text = text or ""
    return len(text) > LONG_TEXT_CHARS or text.count("\n") >= LONG_TEXT_LINES


@register.filter
def thousands(value) -> str:
    """Return a whole number with thousands separators (12,345); anything else as it is."""
    if isinstance(value, bool) or not isinstance(value, int):
        return "" if value is None else str(value)
    return f"{value:,}"


def unit_name(*, legacy: bool = False, calibrated: bool = False, estimator: str = "") -> str:
    """Return the unit a size is in, as the pages name it: every figure says what it counts."""
    if legacy:
        return "characters"
    if calibrated:
        return "calibrated tokens"
    if estimator in ("", "bytes"):
        return "bytes"
    return f"{estimator} tokens"


@register.filter
def call_unit(call) -> str:
    """Return the unit of a model call's request estimate."""
    return unit_name(calibrated=bool(call.calibration), estimator=call.estimator)


@register.filter
def meter_unit(meter: dict) -> str:
    """Return the unit of a context meter's figures."""
    return unit_name(
        legacy=meter.get("unit") == "characters",
        calibrated=bool(meter.get("calibrated")),
        estimator=meter.get("estimator") or "",
    )


@register.filter
def compaction_outcome(item: dict) -> str:
    """Return a compaction's outcome in words: a stage that made the request larger says so."""
    before, after = item.get("before"), item.get("after")
    if before is not None and after is not None and after > before:
        return "grew the request"
    return item.get("outcome") or "?"
