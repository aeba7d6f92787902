"""The checkpoint frame of one instance and the execution state inside it.

`format: 1` is self-contained:

    {format: 1, instance, messages, state,
     context: {records, compactions,
               counters: {user_turns, model_steps, baseline_user_turns, baseline_model_steps},
               inherited: {watermark}, raw_complete},
     binding: {policy, budget, estimator: {module_id, config}}}

`format: 2` (what the engine saves now) stores views by reference and no records:

    {format: 2, instance, view: [entries], state,
     context: {last_seq, compactions: [{…, view: [entries]}], counters,
               inherited: {watermark, history: {view, after, upto, count, cap} | null},
               raw_complete},
     binding}

`binding.rendering` names the rendering version the views were made with (see `_rendering`;
absent: version 1); the inherited block is rebuilt under it.

`messages` / `view` is the model-visible view; `context.records` the append-only sources (in
format 2 they live only in the session journal, found by instance and local seq); `state` the
execution state, never inferred from a summary. View entries are defined in `refs`; the
inherited history is named once (the reusable view it started from and the journal range
projected after it) and rebuilt by the record store. Child instances' frames are kept in the
parent's `state.children`.

`context.compactions` holds one snapshot per successful compaction:
`{revision, covered_seq, messages | view, inherited_watermark, counters, metrics}`. Every
compaction attempt — succeeded, skipped or failed — is logged in `state.compaction_log` as
`{revision, covered_seq, before, after, target_reached, calls, outcome, reason, trigger, at}`
(`revision` is the snapshot's for a success and null otherwise).

A legacy frame is a format-1 frame without `context.records`: it loads with no records and
`raw_complete = false`, because what it once discarded cannot be restored.
"""

from __future__ import annotations

import bisect
import heapq
import json
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any

from agentloom.engine._errors import FrameError
from agentloom.engine._protocol import TOOL_RESULT_VIEW_CHARS
from agentloom.engine._records import Counters, Record
from agentloom.engine._refs import (
    Origin,
    RecordStore,
    ViewEncoder,
    decode_entries,
    materialize,
    session_seqs,
)
from agentloom.engine._rendering import rendering_of

__all__ = [
    "FRAME_FORMAT",
    "ExecutionState",
    "InstanceFrame",
    "ManagedContext",
    "iter_frame_records",
]

FRAME_FORMAT = 2


@dataclass
class ExecutionState:
    """What an instance is doing: never inferred from a summary, always restored as saved."""

    run_number: int = 0
    attempt: int = 1
    plan: str | None = None
    # Tool calls of the latest assistant message that have no recorded result yet:
    # [{"id", "name", "arguments"}], and the seq of the assistant record that made them.
    pending_tool_calls: list[dict[str, Any]] = field(default_factory=list)
    call_boundary: int | None = None
    # View messages (feedback) held back until the open tool group has all its results.
    deferred_messages: list[dict[str, Any]] = field(default_factory=list)
    # Local seqs of run notes waiting for the next message (rendering 2, `place_run_note`).
    waiting_notes: list[int] = field(default_factory=list)
    # Supplements taken from the queue and not yet in the view: [{"source_key", "text"}].
    queued_supplements: list[dict[str, Any]] = field(default_factory=list)
    # Index of the current task (the run's user input) in the view, pinned by compaction.
    task_index: int | None = None
    candidate_answer: str | None = None
    children: dict[str, dict[str, Any]] = field(default_factory=dict)
    next_child: int = 1
    terminal: dict[str, Any] | None = None
    model_calls: int = 0
    compaction_log: list[dict[str, Any]] = field(default_factory=list)
    # What a calibrated estimator has learned: {start, samples} (see `_calibration`).
    calibration: dict[str, Any] | None = None
    # After a failed compaction: {size, model_steps, reason} at the failure (see `_context`).
    compaction_throttle: dict[str, Any] | None = None
    # The server tokenizer's counts the run measured with, by content key (`_server_count`).
    token_counts: dict[str, int] | None = None
    # The measured size of the largest request the run sent with success (a length refusal
    # without a number is bounded by it: `_budget.learned_window`).
    largest_ok: int | None = None
    # A tool server's questions the run waits on (`_asking`): {call_id, tool, server, questions,
    # request_state}; and the question and answer feedback held until the tool group closes.
    asking: dict[str, Any] | None = None
    asked: list[str] = field(default_factory=list)
    # Keys of older frames that this version does not know, kept so a round trip loses nothing.
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        # Copy the containers, so a saved dict does not change as the run goes on.
        for name, value in data.items():
            if isinstance(value, list | dict):
                data[name] = type(value)(value)
        return {**self.extra, **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ExecutionState:
        data = dict(data or {})
        known = {f.name for f in fields(cls)} - {"extra"}
        values = {name: data.pop(name) for name in list(data) if name in known}
        try:
            state = cls(**values, extra=data)
        except TypeError as exc:
            raise FrameError(f"malformed state: {exc}") from exc
        # Copy the containers the engine appends to, so the caller's dict is never changed.
        state.pending_tool_calls = list(state.pending_tool_calls or [])
        state.deferred_messages = list(state.deferred_messages or [])
        state.waiting_notes = list(state.waiting_notes or [])
        state.queued_supplements = list(state.queued_supplements or [])
        state.children = dict(state.children or {})
        state.compaction_log = list(state.compaction_log or [])
        state.asked = list(state.asked or [])
        return state


@dataclass
class ManagedContext:
    """What a context manager manages: the model-visible view and the execution state."""

    messages: list[dict[str, Any]]
    state: ExecutionState


@dataclass
class InstanceFrame:
    """The checkpoint of one instance: view, state, sources, compactions, counters and binding.

    In memory a frame holds everything; it is stored in one of two formats:

    - `to_dict()` — `format: 1`, self-contained: the records and every view in full;
    - `encode()` — `format: 2`, by reference: views are entries of `refs` (the instance's records
      and the inherited history are referred to, never copied) and the records stay in the
      session journal, handed over through `unsaved()`.
    """

    instance: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    state: ExecutionState = field(default_factory=ExecutionState)
    records: list[Record] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    counters: Counters = field(default_factory=Counters)
    inherited_watermark: int = 0
    raw_complete: bool = True
    binding: dict[str, Any] = field(default_factory=dict)
    # Where each view message came from (aligned with `messages`), and with each snapshot's.
    origins: list[Origin] = field(default_factory=list)
    compaction_origins: list[list[Origin]] = field(default_factory=list)
    # How the store rebuilds the inherited history block (None: nothing inherited by reference).
    history: dict[str, Any] | None = None
    # Child instances of a main frame, in creation order.
    children: dict[str, InstanceFrame] = field(default_factory=dict)
    # Records with seq <= saved_seq are in the journal already.
    saved_seq: int = 0
    # Set when loaded from format 1: its journal rows do not know their local seqs yet.
    needs_backfill: bool = False

    def __post_init__(self) -> None:
        if len(self.origins) < len(self.messages):
            self.origins = [*self.origins, *([None] * (len(self.messages) - len(self.origins)))]
        self._status_seqs: set[int] = {r.seq for r in self.records if r.kind == "status"}
        self._encoded_snapshots: list[dict[str, Any]] = []
        self._view = self._new_view_encoder()

    # -- the view ------------------------------------------------------------------------------

    def _new_view_encoder(self) -> ViewEncoder:
        encoder = ViewEncoder(block=True, status_seqs=lambda: self._status_seqs)
        start = 0
        if self.compactions and len(self.compaction_origins) == len(self.compactions):
            latest = self.compactions[-1]["messages"]
            if len(latest) <= len(self.messages) and all(
                a is b for a, b in zip(latest, self.messages, strict=False)
            ):
                encoder.entries.append({"snap": self.compactions[-1]["revision"]})
                encoder.count = start = len(latest)
        encoder.extend(self.messages[start:], self.origins[start:])
        return encoder

    def show(self, message: dict[str, Any], origin: Origin = None) -> None:
        """Append `message` to the view."""
        self.messages.append(message)
        self.origins.append(origin)

    def holds_references(self) -> bool:
        """Return True when the view shows an excerpt or a masked result (see `_large`)."""
        return any(origin and "ref" in origin for origin in self.origins)

    def add_record(self, record: Record) -> None:
        self.records.append(record)
        if record.kind == "status":
            self._status_seqs.add(record.seq)

    def replace_view(self, messages: list[dict[str, Any]], origins: list[Origin]) -> None:
        """Adopt a new view (a successful compaction); the encoder starts again from it."""
        self.messages = messages
        self.origins = origins
        self._view = self._new_view_encoder()

    def add_snapshot(self, snapshot: dict[str, Any], origins: list[Origin]) -> None:
        self.compactions = [*self.compactions, snapshot]
        self.compaction_origins = [*self.compaction_origins, origins]
        self._view = self._new_view_encoder()

    def view_entries(self) -> list[dict[str, Any]]:
        """Return the view as stored entries (only the messages added since last time are new)."""
        if len(self.messages) < self._view.count or len(self.origins) != len(self.messages):
            self._view = self._new_view_encoder()
        self._view.extend(self.messages[self._view.count :], self.origins[self._view.count :])
        return self._view.snapshot()

    # -- records -------------------------------------------------------------------------------

    def unsaved(self) -> list[tuple[str, Record]]:
        """Return the records of this frame and its children not yet in the journal.

        In journal order: records of one instance in local seq order, instances interleaved by
        time. Within an instance the clock is never consulted, so a clock stepping back cannot
        reorder it.
        """
        floor = 0 if self.needs_backfill else self.saved_seq
        # Records are in seq order: start at the first unsaved one, not at the beginning.
        start = bisect.bisect_right(self.records, floor, key=lambda r: r.seq)
        streams = [[(self.instance, r) for r in self.records[start:]]]
        streams += [child.unsaved() for child in self.children.values()]
        return list(heapq.merge(*streams, key=lambda item: item[1].at))

    def mark_saved(self) -> None:
        """Note that every record so far is in the journal."""
        self.saved_seq = self.records[-1].seq if self.records else 0
        self.needs_backfill = False
        for child in self.children.values():
            child.mark_saved()

    # -- format 1 ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Return the frame as self-contained `format: 1` data (message dicts are shared)."""
        state = self.state.to_dict()
        state["children"] = {
            **state["children"],
            **{name: child.to_dict() for name, child in self.children.items()},
        }
        return {
            "format": 1,
            "instance": self.instance,
            "messages": list(self.messages),
            "state": state,
            "context": {
                "records": [record.to_dict() for record in self.records],
                "compactions": list(self.compactions),
                "counters": self.counters.to_dict(),
                "inherited": {"watermark": self.inherited_watermark},
                "raw_complete": self.raw_complete,
            },
            "binding": self.binding,
        }

    # -- format 2 ------------------------------------------------------------------------------

    def encode(self) -> dict[str, Any]:
        """Return the frame as `format: 2` data: views by reference, no records."""
        state = self.state.to_dict()
        state["children"] = {
            **state["children"],
            **{name: child.encode() for name, child in self.children.items()},
        }
        # Snapshots never change once made, so each is encoded once.
        origins = self._snapshot_origins()
        for snapshot, snapshot_origins in list(zip(self.compactions, origins, strict=True))[
            len(self._encoded_snapshots) :
        ]:
            encoder = ViewEncoder(block=False, status_seqs=lambda: self._status_seqs)
            encoder.extend(snapshot["messages"], snapshot_origins)
            self._encoded_snapshots.append(
                {
                    ("view" if k == "messages" else k): (encoder.entries if k == "messages" else v)
                    for k, v in snapshot.items()
                }
            )
        compactions = list(self._encoded_snapshots)
        return {
            "format": 2,
            "instance": self.instance,
            "view": self.view_entries(),
            "state": state,
            "context": {
                "last_seq": self.records[-1].seq if self.records else 0,
                "compactions": compactions,
                "counters": self.counters.to_dict(),
                "inherited": {"watermark": self.inherited_watermark, "history": self.history},
                "raw_complete": self.raw_complete,
            },
            "binding": self.binding,
        }

    def _snapshot_origins(self) -> list[list[Origin]]:
        if len(self.compaction_origins) != len(self.compactions):
            self.compaction_origins = [
                infer_origins(snapshot["messages"], self.records) for snapshot in self.compactions
            ]
        return self.compaction_origins

    @classmethod
    def from_dict(cls, data: dict[str, Any], store: RecordStore | None = None) -> InstanceFrame:
        """Load a frame of either format; `format: 2` needs the store its references point to.

        A legacy frame (format 1 without `context.records`) loads with no records and
        `raw_complete = false`.
        """
        if not isinstance(data, dict):
            raise FrameError("a frame must be an object")
        instance = data.get("instance")
        if not isinstance(instance, str) or not instance:
            raise FrameError("frame.instance must be a non-empty string")
        if data.get("format") == 1:
            return cls._from_format_1(data, instance, store)
        if data.get("format") == FRAME_FORMAT:
            if store is None:
                raise FrameError("a format 2 frame needs the record store it refers to")
            return cls._from_format_2(data, instance, store)
        raise FrameError(f"unsupported frame format {data.get('format')!r}")

    @classmethod
    def _common(cls, data: dict[str, Any], instance: str, store: RecordStore | None) -> dict:
        context = data.get("context") or {}
        inherited = context.get("inherited") or {}
        state = ExecutionState.from_dict(data.get("state"))
        children = {
            name: cls.from_dict(child, store) for name, child in (state.children or {}).items()
        }
        state.children = {}
        return {
            "instance": instance,
            "state": state,
            "counters": Counters.from_dict(context.get("counters")),
            "inherited_watermark": int(inherited.get("watermark") or 0),
            "binding": dict(data.get("binding") or {}),
            "children": children,
        }

    @classmethod
    def _from_format_1(
        cls, data: dict[str, Any], instance: str, store: RecordStore | None
    ) -> InstanceFrame:
        messages = data.get("messages", [])
        if not isinstance(messages, list):
            raise FrameError("frame.messages must be a list")
        context = data.get("context") or {}
        legacy = "records" not in context
        records = _checked([Record.from_dict(item) for item in context.get("records") or []])
        compactions = list(context.get("compactions") or [])
        return cls(
            **cls._common(data, instance, store),
            messages=list(messages),
            records=records,
            compactions=compactions,
            raw_complete=False if legacy else bool(context.get("raw_complete", True)),
            origins=infer_origins(messages, records),
            saved_seq=records[-1].seq if records else 0,
            needs_backfill=bool(records),
        )

    @classmethod
    def _from_format_2(
        cls, data: dict[str, Any], instance: str, store: RecordStore
    ) -> InstanceFrame:
        context = data.get("context") or {}
        last_seq = int(context.get("last_seq") or 0)
        # A reader may see records a later save journaled after it read this checkpoint: the
        # frame is the moment the checkpoint names, so it stops at its last seq.
        records = [record for record in _checked(store.records(instance)) if record.seq <= last_seq]
        if (records[-1].seq if records else 0) != last_seq:
            raise FrameError(
                f"the journal holds {len(records)} records of {instance}, the frame {last_seq}"
            )
        own = {record.seq: record for record in records}
        stored = list(context.get("compactions") or [])
        wanted = session_seqs(data.get("view") or [])
        for snapshot in stored:
            wanted |= session_seqs(snapshot.get("view") or [])
        journal = store.journal(wanted) if wanted else {}
        history = (context.get("inherited") or {}).get("history")
        rendering = rendering_of(data.get("binding")).version
        block_cache: list[tuple[list[dict[str, Any]], list[Origin]]] = []

        def block() -> tuple[list[dict[str, Any]], list[Origin]]:
            if not block_cache:
                if history is None:
                    raise FrameError("the view refers to an inherited block it does not name")
                messages, origins = store.history(history, rendering=rendering)
                if len(messages) != history.get("count"):
                    raise FrameError("the rebuilt inherited history differs in length")
                block_cache.append((messages, block_origins(origins)))
            return block_cache[0]

        compactions, compaction_origins = [], []
        for snapshot in stored:
            messages, origins = decode_entries(snapshot.get("view") or [], own=own, journal=journal)
            # Same keys in the same order as the snapshot that was saved.
            compactions.append(
                {
                    ("messages" if k == "view" else k): (messages if k == "view" else v)
                    for k, v in snapshot.items()
                }
            )
            compaction_origins.append(origins)
        by_revision = dict(
            zip(
                [s["revision"] for s in compactions],
                zip([s["messages"] for s in compactions], compaction_origins, strict=True),
                strict=True,
            )
        )

        def snapshots(revision: int) -> tuple[list[dict[str, Any]], list[Origin]]:
            if revision not in by_revision:
                raise FrameError(f"the view refers to snapshot {revision}, which is missing")
            messages, origins = by_revision[revision]
            return list(messages), list(origins)

        messages, origins = decode_entries(
            data.get("view") or [], own=own, journal=journal, block=block, snapshots=snapshots
        )
        return cls(
            **cls._common(data, instance, store),
            messages=messages,
            records=records,
            compactions=compactions,
            raw_complete=bool(context.get("raw_complete", True)),
            origins=origins,
            compaction_origins=compaction_origins,
            history=history,
            saved_seq=last_seq,
        )


def _checked(records: list[Record]) -> list[Record]:
    seqs = [record.seq for record in records]
    if seqs != sorted(set(seqs)):
        raise FrameError("record seqs must be unique and increasing")
    return records


def block_origins(origins: list[Origin]) -> list[Origin]:
    """Return history origins marked with their place in the inherited block."""
    return [{**(origin or {}), "b": index} for index, origin in enumerate(origins)]


def infer_origins(messages: list[dict[str, Any]], records: list[Record]) -> list[Origin]:
    """Return the origins of a view saved without them (format 1): its own records, where equal.

    Everything else stays inline, which is what format 1 stored anyway.
    """
    shown: dict[str, Record] = {}
    for record in records:
        if record.kind == "tool_result":
            shown[f"tool:{record.message.get('tool_call_id')}"] = record
    by_content = {_key(record.message): record for record in records if record.kind != "status"}
    origins: list[Origin] = []
    for message in messages:
        origin: Origin = None
        if message.get("role") == "tool":
            record = shown.get(f"tool:{message.get('tool_call_id')}")
            candidate = {"own": record.seq, "cap": TOOL_RESULT_VIEW_CHARS} if record else None
            if candidate is not None and materialize(candidate, record.message) == message:
                origin = candidate
        else:
            record = by_content.get(_key(message))
            if record is not None:
                origin = {"own": record.seq}
        origins.append(origin)
    return origins


def _key(message: dict[str, Any]) -> str:
    return json.dumps(message, sort_keys=True, ensure_ascii=False)


def iter_frame_records(frame: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield `(instance, record dict)` for a frame and every child frame inside it, in order.

    The main instance's records come first, then each child's (depth first, in creation order),
    which is what the session journal needs to append them.
    """
    context = frame.get("context") or {}
    for record in context.get("records") or []:
        yield frame["instance"], record
    for child in ((frame.get("state") or {}).get("children") or {}).values():
        yield from iter_frame_records(child)
