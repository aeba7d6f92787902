"""Identifiers in text: what a summary must keep verbatim and what a history search matches exactly.

`identifiers(text)` finds, in the order they first occur and without repeats, the spans of text
that a paraphrase loses: quoted strings, URLs, file paths, numbers with their unit (versions,
money, sizes, durations, percentages), ids and hashes (hex runs, UUIDs, words joined by `_`, `-`
or digits) and error codes (`E1234`, `HTTP 503`, `ERR_X`). A span inside a longer one (a path
inside a URL, a number inside a version) is not repeated.

`terms(text)` is what a search indexes and looks up: lower-cased words, each identifier whole, and
the character bigrams of Chinese, Japanese and Korean runs (which have no spaces between words).
A span that looks like a credential (a known key prefix, or a long run of mixed-case letters and
digits) is never a term, so neither the index nor a search can confirm a pasted key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentloom.engine._ranges import union_ranges

_QUOTED = r"\"[^\"\n]{2,200}\"|'[^'\n]{2,200}'|`[^`\n]{1,200}`|“[^”\n]{1,200}”|「[^」\n]{1,200}」"
_URL = r"(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*://[^\s\"'<>()\[\]{}，。、]+"
_PATH = (
    r"(?:~|\.{1,2})?/[\w.@+-]+(?:/[\w.@+-]*)+|(?<![\w.-])[\w.-]+(?:/[\w.@+-]+)+\.\w+"
    r"|[A-Za-z]:\\[\w.\\ -]+"
)
_HEX = r"\b(?:[0-9a-f]{7,}|[0-9A-F]{7,})\b"
_UUID = r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
_MONEY = (
    r"(?:[$€£¥]|US\$)\s?\d(?:[\d,]*\d)?(?:\.\d+)?(?:\s?[kKmMbB]n?\b)?"
    r"|\b\d(?:[\d,]*\d)?(?:\.\d+)?\s?(?:USD|EUR|GBP|CNY|RMB|JPY|元|美元|欧元)"
)
_VERSION = r"\bv?\d+(?:\.\d+){1,3}(?:[-+][\w.]+)?\b"
_UNIT = (
    r"(?<![\d,.])\d(?:[\d,]*\d)?(?:\.\d+)?\s?(?:%|‰|°C|°F|(?:ms|µs|us|ns|s|sec|min|h|hrs?|days?|KiB|MiB|GiB|TiB|"
    r"kB|KB|MB|GB|TB|B|bytes?|Hz|kHz|MHz|GHz|px|pt|em|rem|mm|cm|m|km|kg|g|mg|ml|l|req/s|rps|"
    r"tokens?|ops/s|k|K|M)\b|个|次|天|小时|分钟|秒|毫秒|人|条|台|年|月|日|号|万|亿)"
)
# A code ends where the id ends: `KL-1220-6d81` is one id, not the code `KL-1220` and a tail.
_CODE = (
    r"\b(?:HTTP\s?[1-5]\d\d|[A-Z]{1,5}-?\d{3,6}|E[A-Z]{2,}[A-Z_]*|ERR_[A-Z0-9_]+"
    r"|[A-Z][A-Z0-9]*_[A-Z0-9_]+)\b(?!-\w)"
)
_ID = (
    r"(?<![\w-])(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)+\b"
    r"|\b[a-z]+_[a-z0-9_]+\b"
)
_PATTERN = re.compile(
    "|".join(
        f"(?:{part})"
        for part in (_QUOTED, _URL, _UUID, _PATH, _MONEY, _UNIT, _VERSION, _HEX, _CODE, _ID)
    ),
    re.IGNORECASE,
)
# The rules of compaction versions 2 and 3, kept as they were so that their replays make the
# summaries they made: a code inside an id is taken alone (`KL-1220` of `KL-1220-6d81`), and a
# pattern is tried at every position of a long run (quadratic on a long record).
_PATTERN_1 = re.compile(
    "|".join(
        f"(?:{part})"
        for part in (
            _QUOTED,
            r"[a-z][a-z0-9+.-]*://[^\s\"'<>()\[\]{}，。、]+",
            _UUID,
            r"(?:~|\.{1,2})?/[\w.@+-]+(?:/[\w.@+-]*)+|[\w.-]+(?:/[\w.@+-]+)+\.\w+"
            r"|[A-Za-z]:\\[\w.\\ -]+",
            _MONEY,
            r"\d(?:[\d,]*\d)?(?:\.\d+)?\s?(?:%|‰|°C|°F|(?:ms|µs|us|ns|s|sec|min|h|hrs?|days?|KiB|"
            r"MiB|GiB|TiB|kB|KB|MB|GB|TB|B|bytes?|Hz|kHz|MHz|GHz|px|pt|em|rem|mm|cm|m|km|kg|g|mg|"
            r"ml|l|req/s|rps|tokens?|ops/s|k|K|M)\b|个|次|天|小时|分钟|秒|毫秒|人|条|台|年|月|日|号|万|亿)",
            _VERSION,
            _HEX,
            _CODE.removesuffix("(?!-\\w)"),
            r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)+\b"
            r"|\b[a-z]+_[a-z0-9_]+\b",
        )
    ),
    re.IGNORECASE,
)
_HEX_ONLY = re.compile(r"[0-9a-fA-F]{7,}")
_CASED = re.compile(_CODE)
_CASED_1 = re.compile(_CODE.removesuffix("(?!-\\w)"))
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_TRAILING = ".,;:!?)"
# Each pattern that starts with a repeated class starts only where such a run starts (the
# lookbehinds above): tried at every position of a long run, it would take quadratic time, and
# records of hundreds of thousands of characters are indexed and summarised.
# Credentials by their published prefixes (OpenAI, Anthropic, GitHub, GitLab, Slack, AWS, Google,
# Stripe, DeepSeek's `sk-`), and any 24+ character run with upper, lower case and digits.
_SECRET_PREFIX = re.compile(
    r"(?:sk|pk|rk)[-_]|ghp_|gho_|ghu_|ghs_|github_pat_|glpat-|xox[abpr]-|akia|asia|aiza"
)
_MIXED_RUN = re.compile(r"[A-Za-z0-9_\-+/=]{24,}")


# The rules of identifiers, by number: 1 those of compaction versions 2 and 3, 2 the current ones
# (compaction version 4 on, and every search).
CURRENT_RULES = 2


def identifiers(text: str, rules: int = CURRENT_RULES) -> list[str]:
    """The identifiers of `text`, in order of first occurrence, each once (see the module)."""
    found: list[str] = []
    seen: set[str] = set()
    pattern = _PATTERN if rules >= 2 else _PATTERN_1
    for match in pattern.finditer(text):
        span = match.group(0)
        if span[0] not in "\"'`“「":
            span = span.rstrip(_TRAILING)
        if not _plausible(span, rules) or span in seen:
            continue
        seen.add(span)
        found.append(span)
    return found


def _plausible(span: str, rules: int = CURRENT_RULES) -> bool:
    # A quoted span says something only with a word in it (not `": "`).
    if span[0] in "\"'`“「":
        inner = span[1:-1].strip()
        # Not a lone word (a JSON key, a status): words are matched as words.
        return bool(re.search(r"\w{2}", inner)) and not re.fullmatch(r"[^\W\d]+", inner)
    # The case-blind pattern also takes plain words for hex runs and codes: keep a hex run only
    # with a digit in it, and a code only as written in capitals.
    if _HEX_ONLY.fullmatch(span):
        return any(character.isdigit() for character in span)
    if re.fullmatch(
        r"[A-Z]{1,5}-?\d{3,6}|E[A-Z_]{3,}|[A-Z][A-Z0-9]*_[A-Z0-9_]+", span, re.IGNORECASE
    ):
        cased = _CASED if rules >= 2 else _CASED_1
        return bool(cased.fullmatch(span)) or ("_" in span and span.islower())
    return len(span) > 1


def secret_like(span: str) -> bool:
    """Return whether `span` looks like a credential (see the module): never a search term."""
    if len(span) >= 20 and _SECRET_PREFIX.match(span.lower()):
        return True
    for run in _MIXED_RUN.findall(span):
        if (
            any(c.isupper() for c in run)
            and any(c.islower() for c in run)
            and any(c.isdigit() for c in run)
        ):
            return True
    return False


def terms(text: str) -> list[str]:
    """The search terms of `text`: words, identifiers and CJK bigrams, lower-cased."""
    found: dict[str, None] = {}
    for identifier in identifiers(text):
        if not secret_like(identifier):
            found[identifier.strip("\"'`“”「」").lower()] = None
    for word in _WORD.findall(text):
        if _CJK.fullmatch(word) or secret_like(word):
            continue
        found[word.lower()] = None
    for run in _CJK.findall(text):
        if len(run) == 1:
            found[run] = None
        for start in range(len(run) - 1):
            found[run[start : start + 2]] = None
    return [term for term in found if term]


_TAIL = "- more in "
_TAIL_ROOM = 200
KEPT_HEADER = "Kept verbatim (identifiers of the summarised records, with the record of each):"
_KEPT_LINE = re.compile(
    r"^- (?P<identifier>.+?) \((?P<ref>(?:s|r[\d.]+):\d[^()]*)\): (?P<context>.*)$"
)
# What the engine itself writes into views: record references and its own tool-call ids. They
# name nothing of the work, so a summary need not keep them.
_INTERNAL_1 = re.compile(r"(?:s|r[\d.]+):\d+|r\d+(?:\.\d+)?-\d+-\d+|read_record")
# From rules 2, also the tool that searches them and the record kinds its results name.
_INTERNAL = re.compile(
    r"(?:s|r[\d.]+):\d+|r\d+(?:\.\d+)?-\d+-\d+|read_record|search_history|user_input|tool_result"
)
# A record reference, or a range of them (`s:3`, `r2:5`, `r2.1:4–9`).
_REF_PARTS = re.compile(r"^(?P<prefix>s|r[\d.]+):(?P<seq>\d+)(?:–(?P<last>\d+))?$")


@dataclass(frozen=True)
class KeptVerbatim:
    """What a summary kept of the identifiers of the material it replaces, and what was added.

    `section` is the text to append to the summary ("" when nothing is missing); `found` counts the
    identifiers of the material, `kept` those the summary already holds, `added` those `section`
    lists (the rest did not fit and are named by reference in its last line).
    """

    section: str
    found: int
    kept: int
    added: int


def kept_verbatim(
    summary: str,
    sources: list[tuple[str, str]],
    limit: int,
    *,
    carried: list[tuple[str, str, str]] = (),
    background: list[tuple[str, str]] = (),
    rules: int = CURRENT_RULES,
) -> KeptVerbatim:
    """Check the identifiers of `sources` ((reference, text) pairs, oldest first) against `summary`.

    Those missing are listed verbatim with a few words of context and their reference, the latest
    record first (the latest value of a fact matters most), then the lines an earlier summary kept
    (`carried`: identifier, reference, context) and last the identifiers of earlier summaries'
    own text (`background`, pairs like `sources`), in at most `limit` characters; what does not
    fit is named by its references in the last line, so the section never outgrows its room.
    """
    found: dict[str, tuple[str, str]] = {}
    _collect(found, sources, rules)
    for identifier, reference, context in carried:
        found.setdefault(identifier, (reference, context))
    _collect(found, background, rules)
    missing = [item for item in found.items() if item[0] not in summary]
    kept = len(found) - len(missing)
    if not missing or limit <= len(KEPT_HEADER):
        return KeptVerbatim("", len(found), kept, 0)
    lines = [KEPT_HEADER]
    used = len(KEPT_HEADER)
    # Room is kept for the last line that names, by reference, what did not fit.
    room = limit - min(_TAIL_ROOM, limit // 4)
    left_out: dict[str, None] = {}
    for identifier, (reference, context) in missing:
        line = f"- {identifier} ({reference}): {context}"
        if used + 1 + len(line) > room:
            left_out[reference] = None
            continue
        lines.append(line)
        used += 1 + len(line)
    if left_out:
        lines.append(_tail(left_out, limit - used - 1))
    added = sum(1 for line in lines[1:] if not line.startswith(_TAIL))
    if not added:
        return KeptVerbatim("", len(found), kept, 0)
    return KeptVerbatim("\n".join(line for line in lines if line), len(found), kept, added)


def _collect(
    found: dict[str, tuple[str, str]], sources: list[tuple[str, str]], rules: int = CURRENT_RULES
) -> None:
    """Add the identifiers of `sources` not yet in `found`, the latest source first."""
    for reference, text in reversed(sources):
        internal = _INTERNAL if rules >= 2 else _INTERNAL_1
        for identifier in identifiers(text, rules):
            if identifier not in found and not internal.fullmatch(identifier.strip("\"'`")):
                found[identifier] = (reference, _context(text, identifier))


def section_sources(summary: str) -> tuple[str, list[tuple[str, str, str]]]:
    """Split a summary into its prose and the (identifier, reference, context) of its kept lines.

    A later summary checks its identifiers against both, so a kept identifier keeps citing the
    record it came from however many summaries later.
    """
    prose, _, section = summary.partition(KEPT_HEADER)
    kept = []
    for line in section.splitlines():
        match = _KEPT_LINE.match(line.strip())
        if match:
            kept.append((match["identifier"], match["ref"], match["context"]))
    return prose.strip(), kept


def cited(references: list[str]) -> str:
    """Return `references` (records, ranges or citations of them) as one short citation:
    each prefix's seqs as ranges (`s:3–7, r2:1–4`); anything else is kept as it is."""
    seqs: dict[str, list[list[int]]] = {}
    others: dict[str, None] = {}
    for reference in references:
        for part in reference.split(", "):
            match = _REF_PARTS.match(part)
            if match:
                first = int(match["seq"])
                seqs.setdefault(match["prefix"], []).append([first, int(match["last"] or first)])
            else:
                others[part] = None
    parts = [
        f"{prefix}:{first}" if first == last else f"{prefix}:{first}–{last}"
        for prefix, ranges in seqs.items()
        for first, last in union_ranges(ranges)
    ]
    return ", ".join([*parts, *others])


def _context(text: str, identifier: str, words: int = 3) -> str:
    start = text.find(identifier)
    before = [word[:30] for word in text[:start].split()[-words:]]
    after = [word[:30] for word in text[start + len(identifier) :].split()[:words]]
    return " ".join([*before, identifier, *after])[:120]


def _tail(references: dict[str, None], room: int) -> str:
    text = _TAIL + cited(list(references))
    if len(text) <= room:
        return text
    cut = text[: max(room - 1, 0)].rsplit(",", 1)[0]
    return cut + "…" if len(cut) > len(_TAIL) and len(cut) + 1 <= room else ""
