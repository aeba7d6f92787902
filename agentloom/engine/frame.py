"""The checkpoint frame of one instance (`format: 1`) and the execution state inside it.

    {format, instance, messages, state,
     context: {records, compactions,
               counters: {user_turns, model_steps, baseline_user_turns, baseline_model_steps},
               inherited: {watermark}, raw_complete},
     binding: {policy, budget, estimator: {module_id, config}}}

`messages` is the model-visible view; `context.records` the append-only sources; `state` the
execution state, never inferred from a summary. Child instances' frames are kept as dicts in the
parent's `state.children`, so one saved main frame carries every instance's records.

`context.compactions` holds one snapshot per successful compaction:
`{revision, covered_seq, messages, inherited_watermark, counters, metrics}`. Every compaction
attempt — succeeded, skipped or failed — is logged in `state.compaction_log` as
`{revision, covered_seq, before, after, target_reached, calls, outcome, reason, trigger, at}`
(`revision` is the snapshot's for a success and null otherwise).

A legacy frame is a format-1 frame without `context.records`: it loads with no records and
`raw_complete = false`, because what it once discarded cannot be restored.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any

from agentloom.engine.errors import FrameError
from agentloom.engine.records import Counters, Record

__all__ = [
    "FRAME_FORMAT",
    "ExecutionState",
    "InstanceFrame",
    "ManagedContext",
    "iter_frame_records",
    "reusable_views",
]

FRAME_FORMAT = 1


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
        state.queued_supplements = list(state.queued_supplements or [])
        state.children = dict(state.children or {})
        state.compaction_log = list(state.compaction_log or [])
        return state


@dataclass
class ManagedContext:
    """What a context manager manages: the model-visible view and the execution state."""

    messages: list[dict[str, Any]]
    state: ExecutionState


@dataclass
class InstanceFrame:
    """The checkpoint of one instance: view, state, sources, compactions, counters and binding."""

    instance: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    state: ExecutionState = field(default_factory=ExecutionState)
    records: list[Record] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    counters: Counters = field(default_factory=Counters)
    inherited_watermark: int = 0
    raw_complete: bool = True
    binding: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return the frame as JSON-serialisable data (message dicts are shared, not copied)."""
        return {
            "format": FRAME_FORMAT,
            "instance": self.instance,
            "messages": list(self.messages),
            "state": self.state.to_dict(),
            "context": {
                "records": [record.to_dict() for record in self.records],
                "compactions": list(self.compactions),
                "counters": self.counters.to_dict(),
                "inherited": {"watermark": self.inherited_watermark},
                "raw_complete": self.raw_complete,
            },
            "binding": self.binding,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InstanceFrame:
        """Load a frame, including a legacy one without `context.records`."""
        if not isinstance(data, dict):
            raise FrameError("a frame must be an object")
        if data.get("format") != FRAME_FORMAT:
            raise FrameError(f"unsupported frame format {data.get('format')!r}")
        instance = data.get("instance")
        if not isinstance(instance, str) or not instance:
            raise FrameError("frame.instance must be a non-empty string")
        messages = data.get("messages", [])
        if not isinstance(messages, list):
            raise FrameError("frame.messages must be a list")
        context = data.get("context") or {}
        legacy = "records" not in context
        records = [Record.from_dict(item) for item in context.get("records") or []]
        seqs = [record.seq for record in records]
        if seqs != sorted(set(seqs)):
            raise FrameError("record seqs must be unique and increasing")
        inherited = context.get("inherited") or {}
        return cls(
            instance=instance,
            messages=list(messages),
            state=ExecutionState.from_dict(data.get("state")),
            records=records,
            compactions=list(context.get("compactions") or []),
            counters=Counters.from_dict(context.get("counters")),
            inherited_watermark=int(inherited.get("watermark") or 0),
            raw_complete=False if legacy else bool(context.get("raw_complete", True)),
            binding=dict(data.get("binding") or {}),
        )


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


def reusable_views(frame: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the frame's compaction snapshots as views a later run may reuse.

    Each item is `{revision, covered_seq, messages, user_turns, model_steps,
    baseline_user_turns, baseline_model_steps, inherited_watermark}`. `messages` is the snapshot
    without its leading system messages (a new run brings its own), so it starts with the handoff
    summary or the inherited history. `covered_seq` is the instance-record seq the snapshot
    observed: the view stands for the session prefix up to that record, and may be saved only if
    the run's inherited watermark plus its records up to `covered_seq` form a prefix of the
    session's main-instance records.
    """
    views = []
    for snapshot in (frame.get("context") or {}).get("compactions") or []:
        messages = list(snapshot["messages"])
        while messages and messages[0].get("role") == "system":
            messages.pop(0)
        counters = snapshot["counters"]
        views.append(
            {
                "revision": snapshot["revision"],
                "covered_seq": snapshot["covered_seq"],
                "messages": messages,
                "user_turns": counters["user_turns"],
                "model_steps": counters["model_steps"],
                "baseline_user_turns": counters["baseline_user_turns"],
                "baseline_model_steps": counters["baseline_model_steps"],
                "inherited_watermark": snapshot["inherited_watermark"],
            }
        )
    return views
