"""Large records: shown as a head-and-tail excerpt with a reference, read back on demand.

A record is *large* when its text is longer than `READ_MAX_CHARS` characters or its estimate is
above the large-record limit, `LARGE_RECORD_SHARE` of the effective input budget. The view then
shows an excerpt — its head, a marker naming the record's reference and how much is left out, and
its tail — sized to fit that limit; the whole text stays in the journal. The built-in tool
`read_record` returns slices of a referenced record, each within the same limit, so reading back
never makes a message larger than an excerpt.

Large records are tool results of the instance and every record inherited from the session's
history (user inputs, supplements, tool results, answers). The current run's question and
supplements are not excerpted: they were refused at the door when too large (`measure`).

References name a record for `read_record`:

- `r<run>:<seq>`: record `seq` of run `<run>`'s main instance; `r<run>.<k>:<seq>` of its
  sub-agent instance `<run>.<k>` (the same prefixes as tool call ids);
- `s:<seq>`: session journal record `seq`, as projected into history.

An instance reads its own records; the main instance also reads the main-instance records of the
session it inherited (up to its inherited watermark). A sub-agent's records are not readable from
the main instance, nor the other way round: what a child delivers is its answer, which is the
parent's own tool result.

Compaction's first stage masks older tool results to a one-line stub with the reference.

A version freezes the policy at publish (`{"share": 0.1}`); a version without it keeps the
24,000-character truncation of tool results and is never offered `read_record`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentloom.engine._budget import ModelBudget, TokenEstimator, estimator_from_binding
from agentloom.engine._errors import ConfigurationError, ToolError

__all__ = [
    "LARGE_RECORD_SHARE",
    "READ_MAX_CHARS",
    "READ_RECORD",
    "LargeRecords",
    "RecordSizer",
    "excerpt",
    "history_judge",
    "masked",
    "parse_ref",
    "run_ref",
]

# A record above this share of the effective input budget is shown as an excerpt, and one read
# returns at most this much of it.
LARGE_RECORD_SHARE = 0.1
# Nor more than this many characters, whatever the budget.
READ_MAX_CHARS = 24_000
READ_RECORD = "read_record"

# Share of an excerpt's characters taken from the head; the rest comes from the tail.
_HEAD_SHARE = 2 / 3
_FIT_STEPS = 16


@dataclass(frozen=True)
class LargeRecords:
    """The large-record policy a version freezes: the share of the budget one record may use."""

    share: float = LARGE_RECORD_SHARE

    @classmethod
    def from_config(cls, data: Any) -> LargeRecords | None:
        """Return the policy of a snapshot or binding value (None: not enabled), validated."""
        if data is None or isinstance(data, LargeRecords):
            return data
        if not isinstance(data, Mapping) or set(data) - {"share"}:
            raise ConfigurationError("large_records", "must be an object with `share` only")
        share = data.get("share", LARGE_RECORD_SHARE)
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 0.5:
            raise ConfigurationError("large_records.share", "must be a number in (0, 0.5]")
        return cls(share=float(share))

    def to_dict(self) -> dict[str, Any]:
        return {"share": self.share}

    def limit(self, budget: ModelBudget) -> int:
        """Return the most one record may measure in the view, in estimator units."""
        return max(int(budget.effective_input_budget * self.share), 1)


def run_ref(run_number: int, instance: str, seq: int) -> str:
    """Return the reference of an instance's own record (`r3:7`, `r3.1:4`)."""
    return f"r{run_number}:{seq}" if instance == "main" else f"r{instance}:{seq}"


_REF = re.compile(r"^(?:s:(?P<s>\d+)|r(?P<run>\d+)(?P<child>\.\d+)?:(?P<seq>\d+))$")


def parse_ref(ref: Any) -> dict[str, Any]:
    """Return `{"s": seq}` or `{"run": n, "instance": name, "seq": seq}`; ToolError if malformed."""
    match = _REF.match(ref.strip()) if isinstance(ref, str) else None
    if match is None:
        raise ToolError(f"{ref!r} is not a record reference (they look like r3:7, r3.1:4 or s:120)")
    if match["s"] is not None:
        return {"s": int(match["s"])}
    run = int(match["run"])
    instance = f"{run}{match['child']}" if match["child"] else "main"
    return {"run": run, "instance": instance, "seq": int(match["seq"])}


def excerpt(text: str, chars: int, ref: str) -> str:
    """Return `text`'s first and last characters, `chars` in all, around a marker naming `ref`."""
    chars = max(min(chars, len(text)), 0)
    head = int(chars * _HEAD_SHARE)
    tail = chars - head
    omitted = len(text) - chars
    marker = (
        f"\n[… {omitted:,} of {len(text):,} characters not shown here; "
        f'read_record(ref="{ref}", offset={head}) returns them …]\n'
    )
    return text[:head] + marker + (text[len(text) - tail :] if tail else "")


def masked(ref: str) -> str:
    """Return the one-line stub that stands for a masked tool result."""
    return f'[tool result hidden to save room; read_record(ref="{ref}") shows it again]'


class RecordSizer:
    """Measures records against the large-record limit with one estimator."""

    def __init__(self, limit: int, estimator: TokenEstimator):
        self.limit = limit
        self.estimator = estimator
        self._empty = estimator.estimate([{"role": "user", "content": ""}], [])

    def size(self, text: str) -> int:
        """Return what one message of `text` adds to a request."""
        return self.estimator.estimate([{"role": "user", "content": text}], []) - self._empty

    def excerpt_chars(self, text: str, ref: str) -> int | None:
        """Return how many characters of `text` its excerpt shows, or None when it is not large."""
        if len(text) <= READ_MAX_CHARS:
            size = self.size(text)
            if size <= self.limit:
                return None
        else:
            size = self.size(text)
        chars = min(READ_MAX_CHARS, int(len(text) * self.limit / max(size, 1)))
        for _ in range(_FIT_STEPS):
            if chars <= 0:
                return 0
            shown = self.size(excerpt(text, chars, ref))
            if shown <= self.limit:
                return chars
            chars = int(chars * min(0.9, self.limit / shown))
        return 0

    def read(self, text: str, ref: str, offset: int, limit: int | None) -> str:
        """Return one slice of a record for `read_record`, within the large-record limit."""
        if offset > len(text):
            raise ToolError(f"offset {offset} is past the end of {ref} ({len(text):,} characters)")
        chars = min(READ_MAX_CHARS, len(text) - offset, READ_MAX_CHARS if limit is None else limit)
        for _ in range(_FIT_STEPS):
            end = offset + chars
            more = (
                f'; read_record(ref="{ref}", offset={end}) continues'
                if end < len(text)
                else "; this is the end"
            )
            result = (
                f"[{ref}: characters {offset:,} to {end:,} of {len(text):,}{more}]\n"
                + text[offset:end]
            )
            shown = self.size(result)
            if shown <= self.limit or chars == 0:
                return result
            chars = int(chars * min(0.9, self.limit / shown))
        return f"[{ref}: the large-record limit leaves no room for a slice]"


def history_judge(binding: Mapping[str, Any]) -> Callable[[str, str], int | None] | None:
    """Return how projection decides an excerpt under a run's binding (None: no policy).

    The judge takes a record's text and reference and returns the excerpt's characters, or None
    when the record is shown whole.
    """
    policy = LargeRecords.from_config(binding.get("large_records"))
    if policy is None:
        return None
    budget = ModelBudget.from_dict(binding["budget"])
    sizer = RecordSizer(policy.limit(budget), estimator_from_binding(binding.get("estimator")))
    return sizer.excerpt_chars
