"""`search_history`: the agent finds what its view no longer shows, by words and identifiers.

An instance searches the records it may read back with `read_record`, and only those: the main
instance its own records of this run and the main records of the session up to its inherited
watermark (the app answers those from a keyed index, never from stored plaintext); a sub-agent
only its own records. Matching uses `_identifiers.terms` on both sides, so a word, an identifier
written whole (`NONCE-42`, `/etc/app.toml`, `3.5 GB`) and Chinese text (by character bigrams)
each match the way they were written, case aside.

Ranking: each hit scores the query terms it holds (`term_weight`: a word or an identifier 1, a
Chinese, Japanese or Korean character pair, a fragment of a word, 0.5). Hits scoring at least
`NEAR_BEST` of the best score count as equals; among equals the whole query written in the record
comes first, then the latest record — so a fact stated twice gives its latest value first even
when the update was worded differently (stated in Chinese, updated in English); below them, the
higher score first. Each hit is shown with its reference, kind, run and a snippet around its first
match; the result is cut to the large-record limit like a `read_record` slice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from agentloom.engine._errors import ToolError
from agentloom.engine._identifiers import _CJK, terms
from agentloom.engine._protocol import message_text, tool_calls_of
from agentloom.engine._records import KINDS

__all__ = [
    "DEFAULT_HITS",
    "MAX_HITS",
    "MAX_QUERY_CHARS",
    "NEAR_BEST",
    "SEARCHABLE_KINDS",
    "SEARCH_HISTORY",
    "SNIPPET_WIDTHS",
    "Hit",
    "SearchQuery",
    "rank",
    "record_terms",
    "render_hits",
    "searchable_text",
    "term_weight",
]

SEARCH_HISTORY = "search_history"
# What a search may name in `kinds`: every kind but the run's own status records.
SEARCHABLE_KINDS = tuple(kind for kind in KINDS if kind != "status")
DEFAULT_HITS = 5
MAX_HITS = 20
MAX_QUERY_CHARS = 500
# Characters shown around the first match of each hit, shortened until the result fits.
SNIPPET_WIDTHS = (240, 120, 60)
# Hits scoring at least this share of the best score rank as its equals (then by recency).
NEAR_BEST = 0.75


def term_weight(term: str) -> float:
    """Return what holding `term` adds to a hit's score: 0.5 for a CJK pair, else 1."""
    return 0.5 if _CJK.fullmatch(term) else 1.0


# Where the version has no large-record policy, a result is cut to this many characters.
UNMEASURED_RESULT_CHARS = 8_000


def record_terms(message: Any) -> list[str]:
    """Return the search terms of a journaled message (what an index of the journal holds)."""
    return terms(searchable_text(message) if isinstance(message, dict) else str(message or ""))


def searchable_text(message: dict[str, Any]) -> str:
    """Return what a search matches in a journaled message: its text and the calls it made.

    Calls to `search_history` itself are left out: their arguments only repeat a query, and a
    search would otherwise find the call that made it.
    """
    parts = [message_text(message)]
    for call in tool_calls_of(message):
        function = call.get("function") or {}
        if function.get("name") == SEARCH_HISTORY:
            continue
        parts.append(f"{function.get('name', '')} {function.get('arguments', '')}")
    return "\n".join(part for part in parts if part)


@dataclass(frozen=True)
class SearchQuery:
    """A checked `search_history` request: its terms, filters and how many hits it wants."""

    text: str
    terms: tuple[str, ...]
    limit: int = DEFAULT_HITS
    kinds: tuple[str, ...] = ()
    runs: tuple[int, ...] = ()

    @classmethod
    def from_arguments(cls, arguments: dict[str, Any]) -> SearchQuery:
        text = str(arguments.get("query") or "").strip()
        found = tuple(terms(text))
        if not found:
            raise ToolError("the query has no word or identifier to search for")
        limit = arguments.get("limit", DEFAULT_HITS)
        if not isinstance(limit, int) or not 1 <= limit <= MAX_HITS:
            raise ToolError(f"limit is 1 to {MAX_HITS}")
        kinds = tuple(arguments.get("kinds") or ())
        unknown = [kind for kind in kinds if kind not in SEARCHABLE_KINDS]
        if unknown:
            raise ToolError(f"unknown kinds {unknown}; kinds are {', '.join(SEARCHABLE_KINDS)}")
        runs = arguments.get("runs") or ()
        if not all(isinstance(run, int) and run > 0 for run in runs):
            raise ToolError("runs are run numbers (1, 2, …)")
        return cls(text[:MAX_QUERY_CHARS], found, limit, kinds, tuple(runs))

    def admits(self, kind: str, run: int) -> bool:
        """Return whether a record of `kind` in run `run` passes the filters."""
        return (not self.kinds or kind in self.kinds) and (not self.runs or run in self.runs)


@dataclass(frozen=True)
class Hit:
    """A record that matched: `order` sorts records by age (later records are larger)."""

    ref: str
    kind: str
    run: int
    text: str
    order: tuple[int, int]
    matched: float = 0
    whole: bool = False


def _span_form(text: str) -> str:
    """Return `text` lower-cased with one sigma: `str.lower` writes a capital sigma as final
    (ς) or not (σ) by what follows it, so a term lower-cased alone may differ there from the
    same span lower-cased in its text; nothing else of `lower` depends on its context."""
    return text.lower().replace("ς", "σ")


def rank(query: SearchQuery, candidates: Iterable[Hit]) -> list[Hit]:
    """Return the candidates that hold a query term, best first, at most `query.limit`."""
    wanted = set(query.terms)
    phrase = query.text.casefold()
    scored = []
    spans = [_span_form(term) for term in wanted]
    for hit in candidates:
        # Every term is a lower-cased span of its text: a text holding none of the query's terms
        # as a substring holds none of them as a term, and is passed over without finding its
        # terms (most of a search's time: a search reads whole blocks of records).
        lowered = _span_form(hit.text)
        if not any(span in lowered for span in spans):
            continue
        matched = sum(term_weight(term) for term in wanted.intersection(terms(hit.text)))
        if not matched:
            continue
        whole = len(query.terms) > 1 and phrase in hit.text.casefold()
        scored.append(
            Hit(hit.ref, hit.kind, hit.run, hit.text, hit.order, matched=matched, whole=whole)
        )
    best = max((hit.matched for hit in scored), default=0)

    def tier(hit: Hit) -> float:
        return best if hit.matched >= NEAR_BEST * best else hit.matched

    scored.sort(key=lambda hit: (tier(hit), hit.whole, hit.order), reverse=True)
    return scored[: query.limit]


def snippet(text: str, query: SearchQuery, width: int = SNIPPET_WIDTHS[0]) -> str:
    """Return about `width` characters of `text` around its first match, on one line."""
    folded = text.casefold()
    found = [folded.find(term) for term in (query.text.casefold(), *query.terms)]
    start = min((index for index in found if index >= 0), default=0)
    begin = max(start - width // 3, 0)
    end = min(begin + width, len(text))
    body = " ".join(text[begin:end].split())
    return ("…" if begin else "") + body + ("…" if end < len(text) else "")


def render_hits(
    query: SearchQuery, hits: list[Hit], fits: Callable[[str], bool] | None = None
) -> str:
    """Return the tool result for `hits`: one block per hit, as many as `fits` allows."""
    if not hits:
        return (
            f"No record matches {query.text!r}. Try other words or an identifier as written; "
            "records are searched whole, not only what the conversation still shows."
        )
    best = ""
    # The most hits that fit, with the widest snippets that let that many fit.
    for width in SNIPPET_WIDTHS:
        blocks = [
            f"[{hit.ref}] {hit.kind}, run {hit.run}: {snippet(hit.text, query, width)}"
            for hit in hits
        ]
        while blocks:
            header = f"{len(blocks)} record(s) match {query.text!r}, best first:"
            result = "\n".join([header, *blocks])
            if fits is None or fits(result):
                break
            blocks.pop()
        if blocks and len(blocks) == len(hits):
            return result
        if blocks and result.count("\n") > best.count("\n"):
            best = result
    return best or f"{len(hits)} record(s) match {query.text!r}, but none fits the record limit."
