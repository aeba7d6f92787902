"""Views by reference: every view message knows where it came from, so it is stored once.

A view message has an *origin*:

- `None`: made here and stored inline (system prompt, `unknown` placeholder, run-status note);
- `{"summary": revision}`: the handoff summary made by compaction `revision`, stored inline;
- `{"src": ranges}`: an inherited handoff summary, stored inline, that stands for the session
  records `ranges` (so a summary of it covers them too); a range may run over status records,
  which no view shows, so a long session's summary holds a range or two, not one per turn;
- `{"own": seq}`: the instance's own record `seq`, as recorded;
- `{"own": seq, "cap": N}`: its own tool result, shown capped at N characters;
- `{"s": seq, "as": how, ...}`: session journal record `seq`, as history shows it.

`how` is one of `own` (as recorded; tool content capped at `cap`), `assistant` (call ids
rewritten to `h<seq>_<n>`), `assistant_ids` (the same, keeping the call ids the run gave, which
are already unique in the session; rendering 3), `tool` (answering call `id`, capped at `cap`),
`user`, `feedback`,
`note` (`prefix` + the text capped at `cap`), `run_note` (a run-status note shown on the
assistant side: `[run note] ` + the text, an older `[feedback] ` prefix dropped; rendering 1) and
`system_note` (the same note as a system message; rendering 2). Either kind of
origin may also carry a large-record transform (see `_large`): `"ex": N, "ref": R` shows an excerpt
of N characters naming reference R; `"mask": 1, "ref": R` shows a tool result as a one-line stub.
A tool result's record may keep a `detail` (the whole result of a tool server, with its
structured parts) beside its text; no view shows it. `materialize` is the only place each
transform is defined: projection builds history messages
with it, and a saved view is rebuilt with it, so a rebuilt view is byte-identical to the one that
was saved.

Stored views are lists of *entries*, which compress runs of origins:

- `{"m": message}`: one inline message;
- `{"own": [a, b], "cap": N}`: own records a..b in order, status records skipped (a view never
  shows them), tool results capped at N; an own record shown with a large-record transform is an
  entry of its own, `{"own": [a, a], "ex": N, "ref": R}` or `{"own": [a, a], "mask": 1, "ref": R}`;
- `{"hist": [i, j]}`: messages i..j-1 of the inherited history block (the checkpoint names the
  block; the store rebuilds it);
- `{"s": seq, "as": how, ...}`: one session record, as its origin says;
- `{"snap": revision}`: the whole view saved by compaction snapshot `revision`.

A checkpoint's view uses every form; a compaction snapshot never uses `hist` or `snap`, so a
reusable view saved from it needs no inherited block to be read.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Collection, Iterable
from typing import Any

from agentloom.engine._errors import FrameError
from agentloom.engine._large import excerpt, masked
from agentloom.engine._protocol import (
    FEEDBACK_PREFIX,
    REASONING_KEY,
    RUN_NOTE_PREFIX,
    cap_tool_result,
    message_text,
    run_note,
)
from agentloom.engine._records import Record
from agentloom.engine._search import Hit, SearchQuery

__all__ = [
    "LARGE_KEYS",
    "TOOL_DETAIL",
    "Origin",
    "RecordStore",
    "ViewEncoder",
    "decode_entries",
    "history_assistant",
    "materialize",
    "session_seqs",
]

# The key of a tool-result record's message that holds its journal-only detail.
TOOL_DETAIL = "detail"

Origin = dict[str, Any] | None

# The origin keys of the large-record transforms.
LARGE_KEYS = ("ex", "mask", "ref")


def history_assistant(
    seq: int, message: dict[str, Any], *, keep_ids: bool = False
) -> dict[str, Any]:
    """Return an assistant record as history shows it: call ids rewritten to `h<seq>_<n>`.

    With `keep_ids`, the recorded call ids stay (the run's `r<run>-<step>-<n>` ids are already
    unique in the session). Reasoning text stays with its message (only records of rendering 2
    or later have any).
    """
    calls = message.get("tool_calls") or []
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        content = message_text(message)
    reasoning = message.get(REASONING_KEY)
    thought = {REASONING_KEY: reasoning} if isinstance(reasoning, str) and reasoning else {}
    if not calls:
        return {"role": "assistant", "content": content or "", **thought}
    rewritten = []
    for number, call in enumerate(calls, start=1):
        function = call.get("function") or {}
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        rewritten.append(
            {
                "id": str(call.get("id")) if keep_ids else f"h{seq}_{number}",
                "type": "function",
                "function": {"name": str(function.get("name") or ""), "arguments": arguments},
            }
        )
    return {"role": "assistant", "content": content, **thought, "tool_calls": rewritten}


def _capped(text: str, cap: int | None) -> str:
    return text if cap is None else cap_tool_result(text, cap)


def _as_recorded(message: dict[str, Any], cap: int | None) -> dict[str, Any]:
    if TOOL_DETAIL in message:
        message = {key: value for key, value in message.items() if key != TOOL_DETAIL}
    if cap is not None and message.get("role") == "tool":
        return {**message, "content": cap_tool_result(message_text(message), cap)}
    return message


def materialize(origin: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
    """Return the view message that `origin` makes of its record's `message`."""
    shown = _transformed(origin, message)
    if "mask" in origin:
        return {**shown, "content": masked(origin["ref"])}
    if "ex" in origin:
        return {**shown, "content": excerpt(message_text(shown), origin["ex"], origin["ref"])}
    return shown


def _transformed(origin: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
    if "own" in origin:
        return _as_recorded(message, origin.get("cap"))
    how = origin.get("as")
    if how == "own":
        return _as_recorded(message, origin.get("cap"))
    if how in ("assistant", "assistant_ids"):
        return history_assistant(origin["s"], message, keep_ids=how == "assistant_ids")
    text = message_text(message)
    if how == "tool":
        return {
            "role": "tool",
            "tool_call_id": origin["id"],
            "content": _capped(text, origin.get("cap")),
        }
    if how == "user":
        return {"role": "user", "content": text}
    if how == "feedback":
        return {
            "role": "user",
            "content": text if text.startswith(FEEDBACK_PREFIX) else FEEDBACK_PREFIX + text,
        }
    if how == "note":
        return {"role": "user", "content": origin["prefix"] + _capped(text, origin.get("cap"))}
    if how in ("run_note", "system_note"):
        role = "system" if how == "system_note" else "assistant"
        return run_note(text.removeprefix(RUN_NOTE_PREFIX).removeprefix(FEEDBACK_PREFIX), role=role)
    raise FrameError(f"unknown view reference {origin!r}")


class RecordStore(abc.ABC):
    """Where a by-reference frame finds what it refers to (the session journal, on the app side)."""

    @abc.abstractmethod
    def records(self, instance: str) -> list[Record]:
        """Return the instance's own records of this run, in local seq order."""

    @abc.abstractmethod
    def journal(self, seqs: Collection[int]) -> dict[int, dict[str, Any]]:
        """Return the messages of the session journal records `seqs`, by seq."""

    @abc.abstractmethod
    def history(
        self, block: dict[str, Any], *, rendering: int
    ) -> tuple[list[dict[str, Any]], list[Origin]]:
        """Return the inherited history block a checkpoint names, with each message's origin.

        `rendering` is the checkpoint's rendering version (see `_rendering`): the block is
        projected under the rules it was made with.
        """

    def main_record(
        self,
        *,
        up_to: int,
        seq: int | None = None,
        run: int | None = None,
        local: int | None = None,
    ) -> dict[str, Any] | None:
        """Return the message of a main-instance journal record with session seq <= `up_to`.

        The record is named by its session `seq`, or by its `run` number and `local` seq. None
        when there is no such record (or it belongs to a sub-agent): `read_record` then says the
        reference is not readable. A store that keeps no journal reads nothing.
        """
        return None

    def search(self, query: SearchQuery, *, up_to: int) -> list[Hit]:
        """Return the best main-instance journal records with session seq <= `up_to` for `query`.

        At most `query.limit` hits, each referred to as `s:<seq>` with `order` `(0, seq)`, ranked
        as `_search.rank` ranks them. A store that keeps no journal finds nothing.
        """
        return []


class ViewEncoder:
    """Turns a growing view into entries, appending to the last entry when it can.

    Appending is O(1), so a save costs what was added since the last one, not the whole view.
    `status_seqs` are the instance's status records, which a view never shows.
    """

    def __init__(self, *, block: bool, status_seqs: Callable[[], Collection[int]]):
        # With `block`, history messages are stored as ranges of the inherited block; without
        # it (snapshots), as references to their session records.
        self.block = block
        self.status_seqs = status_seqs
        self.entries: list[dict[str, Any]] = []
        self.count = 0

    def extend(self, messages: Iterable[dict[str, Any]], origins: Iterable[Origin]) -> None:
        for message, origin in zip(messages, origins, strict=True):
            self.add(message, origin)

    def add(self, message: dict[str, Any], origin: Origin) -> None:
        self.count += 1
        last = self.entries[-1] if self.entries else None
        if origin is None:
            self.entries.append({"m": message})
        elif "summary" in origin:
            # A handoff summary exists nowhere else; it remembers which compaction made it.
            self.entries.append({"m": message, "summary": origin["summary"]})
        elif "own" in origin and any(key in origin for key in LARGE_KEYS):
            seq = origin["own"]
            large = {key: origin[key] for key in LARGE_KEYS if key in origin}
            self.entries.append({"own": [seq, seq], **large})
        elif "own" in origin:
            seq, cap = origin["own"], origin.get("cap")
            if (
                last is not None
                and "own" in last
                and not any(key in last for key in LARGE_KEYS)
                and (cap is None or last.get("cap") in (None, cap))
                and self._follows(last["own"][1], seq)
            ):
                last["own"][1] = seq
                if cap is not None:
                    last["cap"] = cap
            else:
                entry: dict[str, Any] = {"own": [seq, seq]}
                if cap is not None:
                    entry["cap"] = cap
                self.entries.append(entry)
        elif "b" in origin and self.block:
            index = origin["b"]
            if last is not None and "hist" in last and last["hist"][1] == index:
                last["hist"][1] = index + 1
            else:
                self.entries.append({"hist": [index, index + 1]})
        elif "s" in origin:
            self.entries.append({k: v for k, v in origin.items() if k != "b"})
        else:
            # A message of an inherited view that was stored inline there (a summary keeps the
            # session ranges it stands for).
            stood = {"src": origin["src"]} if "src" in origin else {}
            self.entries.append({"m": message, **stood})

    def _follows(self, last: int, seq: int) -> bool:
        if seq == last + 1:
            return True
        if seq <= last:
            return False
        skipped = self.status_seqs()
        return all(between in skipped for between in range(last + 1, seq))

    def snapshot(self) -> list[dict[str, Any]]:
        """Return a copy of the entries (later appends must not change what was saved)."""
        return [dict(entry, **_copied_ranges(entry)) for entry in self.entries]


def _copied_ranges(entry: dict[str, Any]) -> dict[str, Any]:
    return {key: list(entry[key]) for key in ("own", "hist") if key in entry}


def session_seqs(entries: Iterable[dict[str, Any]]) -> set[int]:
    """Return the session seqs that `entries` refer to one by one."""
    return {entry["s"] for entry in entries if "s" in entry}


# The messages and origins that stored entries stand for.
_Decoded = tuple[list[dict[str, Any]], list[Origin]]


def decode_entries(
    entries: list[dict[str, Any]],
    *,
    own: dict[int, Record],
    journal: dict[int, dict[str, Any]],
    block: Callable[[], _Decoded] | None = None,
    snapshots: Callable[[int], _Decoded] | None = None,
) -> _Decoded:
    """Return the messages and origins that stored `entries` stand for.

    `own` maps the instance's local seqs to its records, `journal` session seqs to messages;
    `block` and `snapshots` rebuild the inherited history block and earlier snapshot views.
    A reference to anything missing is a `FrameError`: a view is never rebuilt with a gap.
    """
    messages: list[dict[str, Any]] = []
    origins: list[Origin] = []
    for entry in entries:
        if "m" in entry:
            part = _decode_inline(entry)
        elif "own" in entry:
            part = _decode_own(entry, own)
        elif "hist" in entry:
            part = _decode_block(entry, block)
        elif "s" in entry:
            part = _decode_journaled(entry, journal)
        elif "snap" in entry:
            part = _decode_snapshot(entry, snapshots)
        else:
            raise FrameError(f"unknown view entry {sorted(entry)}")
        messages.extend(part[0])
        origins.extend(part[1])
    return messages, origins


def _decode_inline(entry: dict[str, Any]) -> _Decoded:
    """Return an inline message with its origin: a summary's revision, or what it stands for."""
    if "summary" in entry:
        origin: Origin = {"summary": entry["summary"]}
    else:
        origin = {"src": entry["src"]} if "src" in entry else None
    return [entry["m"]], [origin]


def _decode_own(entry: dict[str, Any], own: dict[int, Record]) -> _Decoded:
    """Return the own records of a range as shown (status records skipped), with their origins."""
    messages: list[dict[str, Any]] = []
    origins: list[Origin] = []
    start, end = entry["own"]
    for seq in range(start, end + 1):
        record = own.get(seq)
        if record is None:
            raise FrameError(f"the view refers to record {seq}, which is not journaled")
        if record.kind == "status":
            continue
        origin: dict[str, Any] = {"own": seq}
        if record.kind == "tool_result" and "cap" in entry:
            origin["cap"] = entry["cap"]
        origin.update((key, entry[key]) for key in LARGE_KEYS if key in entry)
        messages.append(materialize(origin, record.message))
        origins.append(origin)
    return messages, origins


def _decode_block(entry: dict[str, Any], block: Callable[[], _Decoded] | None) -> _Decoded:
    """Return a slice of the inherited history block."""
    if block is None:
        raise FrameError("the view refers to an inherited block it does not name")
    block_messages, block_origins = block()
    start, end = entry["hist"]
    if end > len(block_messages):
        raise FrameError("the inherited history block is shorter than the view says")
    return block_messages[start:end], block_origins[start:end]


def _decode_journaled(entry: dict[str, Any], journal: dict[int, dict[str, Any]]) -> _Decoded:
    """Return one session record as its origin shows it."""
    message = journal.get(entry["s"])
    if message is None:
        missing = entry["s"]
        raise FrameError(f"the view refers to journal record {missing}, which is missing")
    return [materialize(entry, message)], [dict(entry)]


def _decode_snapshot(
    entry: dict[str, Any], snapshots: Callable[[int], _Decoded] | None
) -> _Decoded:
    """Return the whole view an earlier compaction snapshot saved."""
    if snapshots is None:
        raise FrameError("the view refers to a snapshot that is not available")
    return snapshots(entry["snap"])
