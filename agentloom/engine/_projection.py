"""Project the session journal into the inherited history of a new run.

Projection repairs protocol and never changes sources:

- a tool call with no recorded result is answered with a `status: unknown` tool message that says
  success must not be assumed (the call is never re-executed);
- a result that arrives after its group was closed (a late result, e.g. from resuming an old run
  after later runs) is kept as a user-role note, not as a tool message that would break protocol;
- call ids are rewritten to `h<seq>_<n>` (session seq of the assistant record, call number), so
  history ids cannot collide with each other or with the new run's ids; from rendering 3 the ids
  a run gave its calls (`r<run>-<step>-<n>`, unique in the session) are kept instead;
- notes (supplements, feedback, run states, late results) that arrive while a tool group is open
  wait until the group is complete, so nothing sits between a call and its results;
- run states (status records, and the "run stopped" / "run cancelled" feedback of a run's end)
  are shown as `[run note] …` messages, never in the user's voice, so a later question is the
  latest user message and no stop reason reads as a request: system messages under rendering 2
  (an assistant note after an answer would make two assistant messages in a row), assistant
  messages under rendering 1;
- tool results are capped at the view's 24,000 characters, with a visible marker; under a
  large-record policy (see `_large`), any record too large for its share of the budget is shown as
  an excerpt naming its reference `s:<seq>` instead (the decisions are kept in the block, so a
  rebuilt history makes the same ones); from rendering 5 the reference is the one the record's
  run gave it (`r<run>:<seq>`, when the record carries its run's seq), so an excerpt a run sent
  reads the same in the history of the runs after it;
- from rendering 5 each run state is a note of its own: a note already shown never changes, so
  projecting more records only appends to what projecting fewer showed (before the end's close);
- from rendering 6, the records an imported session brought with it (`ImportedHistory`: seqs up
  to `upto`) are followed by one note that says they were imported and from where, so the model
  does not take them for its own earlier work here. It is placed once, before the first record
  that was not imported (waiting, as notes do, for an open tool group), or at the end of the
  history while every record was imported: the place is the same in every later projection, so
  a new run's first request still extends the last request of the run before it. A projection
  that starts after `upto` (from a view or a point past it) already holds the note;
- from rendering 7, a tool result a run's compaction masked (`masks`: session seq -> the
  reference its stub named) is shown as that stub, the reference the masking run gave it
  included, wherever it is shown as a tool message, in the view the projection starts after as
  in the records after it: a new run whose view rule refused the masking's view (it chose none,
  or one older than the masking) starts from the stubs the masking run sent, never from the
  results whole. The view is still the compliant one; only the stubs are applied to it, and
  only to the view: the journal keeps every result and `read_record` reads it. A mask is a
  decision made once and kept (`ProjectedHistory.masks`, the block's `mk`), so a rebuilt
  history shows the same stubs; a point resumed after a later run masked one of the records it
  shows applies that mask too (masks are only ever added);
- from rendering 4, a `[feedback] …` message of a run from before the journal, which adoption
  stored as a supplement (`legacy:<n>` key), is shown as the feedback or run note it was, never
  in the user's voice (`is_adopted_feedback`); the journal row itself is never rewritten.

A projection point (`ProjectionPoint`) is the projector's state after the records up to a
watermark, before the end of the history closes what is still open: the messages shown so far
(as references to their records, and the few messages projection made itself), the open tool
group, the notes waiting for it, the run states the next state joins, and every call shown so far
(a late result names its call). Projecting the records after the watermark from the point gives
exactly what projecting every record gives, because projection reads each record once, in order,
and keeps nothing else between records.

The plan a new run starts with (rendering 4) is the one the last `update_plan` among the main
records it inherits set, in session order: the result that set it is where the plan changed
(`inherited_plan`). A failed or cancelled run's plan carries over like any other: its records
stay in the history the next run inherits (a failure or a cancellation is history too), so the
model reads that `update_plan` call and its result there, and the plan it is given must be the
one that history shows. A call answered `cancelled` (never run), `unknown` or
with an error set no plan and does not count. A resumed run keeps its checkpoint's plan.

A point carries the plan decided so far (`ProjectionPoint.plan`), so a run resuming from it reads
no record before the point to find its plan: the projector follows the `update_plan` calls it
shows and the results that answer them, in session order, as `inherited_plan` reads them newest
first. A result is matched with the latest call of its run and id before it, and of the results
matched with one call only the newest counts: when a newer result of the call that set the plan
sets none, the plan is no longer known from the point alone, and the records are read again
(`plan_known` is False) until a later result sets one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentloom.engine._large import masked, run_ref
from agentloom.engine._protocol import (
    FEEDBACK_PREFIX,
    RUN_NOTE_PREFIX,
    TOOL_RESULT_VIEW_CHARS,
    UNKNOWN_RESULT,
    message_text,
    run_note,
    run_states_text,
)
from agentloom.engine._records import LEGACY_KEY_PREFIX, MAIN_INSTANCE
from agentloom.engine._refs import LARGE_KEYS, Origin, materialize
from agentloom.engine._rendering import CURRENT_RENDERING, Rendering, rendering_named
from agentloom.engine._sizecache import carry_json_bytes
from agentloom.engine._tools import PLAN_UPDATED, UpdatePlanTool, plan_set_by

# The call ids the engine gives a main-instance run's calls: unique in the session.
_RUN_CALL_ID = re.compile(r"r\d+-\d+-\d+")

# Decides a large record's excerpt: (text, reference) -> characters shown, or None (shown whole).
ExcerptJudge = Callable[[str, str], int | None]

__all__ = [
    "IMPORTED_PREFIX",
    "ExcerptJudge",
    "ImportedHistory",
    "JournalRecord",
    "ProjectedHistory",
    "ProjectionPoint",
    "ReusableView",
    "block_excerpts",
    "block_masks",
    "inherited_plan",
    "inherited_plan_set",
    "is_adopted_feedback",
    "project_history",
]


@dataclass(frozen=True)
class JournalRecord:
    """One row of the session journal: `seq` is the session seq (ordered, gaps allowed)."""

    seq: int
    run_id: Any
    instance: str
    kind: str
    message: dict[str, Any]
    # Its entry key ("" when not known): it tells what adoption made from a run before the
    # journal (`legacy:<n>`).
    entry_key: str = ""
    # Its seq among its run's records of its instance (None when not known): with the run's
    # number (`run_id`), the reference the run gave it (`r<run>:<seq>`, rendering 5).
    local_seq: int | None = None
    # The byte length of its message's compact JSON as the journal stored it (None: not known),
    # carried to the view message shown from it (`_sizecache.carry_json_bytes`).
    size: int | None = field(default=None, compare=False)


def _shown(origin: dict[str, Any], record: JournalRecord) -> dict[str, Any]:
    """Return the view message `origin` makes of `record`, with the byte length it was read with
    when it is the same JSON."""
    message = materialize(origin, record.message)
    carry_json_bytes(message, record.message, record.size)
    return message


# The mark of the note that follows an imported session's imported history (rendering 6).
IMPORTED_PREFIX = "[imported history] "


@dataclass(frozen=True)
class ImportedHistory:
    """The records an imported session brought (main seqs up to `upto`) and where from."""

    upto: int
    # Where they came from, as the note names it ("session 12 (AgentLoom 1.4), exported …").
    origin: str

    def note(self, role: str) -> dict[str, Any]:
        """Return the note that follows the imported records (the same text every time)."""
        return {
            "role": role,
            "content": (
                f"{IMPORTED_PREFIX}Everything above this note was imported from {self.origin}. "
                "It is not your own earlier work in this session: its tool calls ran where it "
                "was made, not here, and nothing in it grants a tool. What follows is this "
                "session's own."
            ),
        }


@dataclass(frozen=True)
class ReusableView:
    """A saved compacted view that stands for the session's main records up to `watermark`."""

    watermark: int
    messages: list[dict[str, Any]]
    user_turns: int = 0
    model_steps: int = 0
    baseline_user_turns: int = 0
    baseline_model_steps: int = 0
    revision: int | None = None
    # Where each message came from (see `_refs`); None when the view was stored inline.
    origins: list[Origin] | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ReusableView:
        return cls(
            watermark=int(data["watermark"]),
            messages=list(data["messages"]),
            origins=list(data["origins"]) if data.get("origins") is not None else None,
            user_turns=int(data.get("user_turns", 0)),
            model_steps=int(data.get("model_steps", 0)),
            baseline_user_turns=int(data.get("baseline_user_turns", 0)),
            baseline_model_steps=int(data.get("baseline_model_steps", 0)),
            revision=data.get("revision"),
        )


@dataclass
class ProjectedHistory:
    """The history a new run inherits, with the session totals and baselines it starts from."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    watermark: int = 0
    user_turns: int = 0
    model_steps: int = 0
    baseline_user_turns: int = 0
    baseline_model_steps: int = 0
    view_revision: int | None = None
    # Where each message came from (see `_refs`), aligned with `messages`.
    origins: list[Origin] = field(default_factory=list)
    # The view's watermark: the records projected after the view are those in (after, watermark].
    after: int = 0
    tool_result_chars: int = TOOL_RESULT_VIEW_CHARS
    # True when made by `project_history`: a store can then rebuild it from `block()`.
    from_journal: bool = False
    # Session seq -> characters of the excerpt shown for it (large records only).
    excerpts: dict[int, int] = field(default_factory=dict)
    # The rendering version the messages were projected with (see `_rendering`).
    rendering: int = CURRENT_RENDERING
    # Session seq -> the reference of the stub shown for it (results masked by a run, rendering 7).
    masks: dict[int, str] = field(default_factory=dict)
    # The plan the inherited records last set (`inherited_plan`); a run of rendering 4 starts
    # with it.
    plan: str | None = None
    # False when the plan could not be decided from a point alone (see the module docstring):
    # the caller reads the records after the view (`inherited_plan`).
    plan_known: bool = True
    # The projector's state after the last record, before the end closed what was open (made
    # when `project_history` is asked to keep it): a later projection resumes from it.
    point: ProjectionPoint | None = None

    def __post_init__(self) -> None:
        if len(self.origins) < len(self.messages):
            # History given as plain messages (tests, legacy callers) is stored inline.
            self.origins = [*self.origins, *([None] * (len(self.messages) - len(self.origins)))]

    def block(self) -> dict[str, Any]:
        """Return how a checkpoint names this history, so a store can rebuild it exactly."""
        block = {
            "view": self.view_revision,
            "after": self.after,
            "upto": self.watermark,
            "count": len(self.messages),
            "cap": self.tool_result_chars,
        }
        if self.excerpts:
            block["ex"] = {str(seq): chars for seq, chars in sorted(self.excerpts.items())}
        if self.masks:
            block["mk"] = {str(seq): ref for seq, ref in sorted(self.masks.items())}
        return block


def block_excerpts(block: Mapping[str, Any]) -> dict[int, int]:
    """Return the excerpt decisions a stored history block names (seq -> characters shown)."""
    return {int(seq): chars for seq, chars in (block.get("ex") or {}).items()}


def block_masks(block: Mapping[str, Any]) -> dict[int, str]:
    """Return the masks a stored history block names (seq -> the reference its stub names)."""
    return {int(seq): ref for seq, ref in (block.get("mk") or {}).items()}


def _masked_origin(origin: dict[str, Any], ref: str) -> dict[str, Any]:
    """Return `origin` shown as the stub naming `ref`, as a compaction masks it."""
    plain = {key: value for key, value in origin.items() if key not in (*LARGE_KEYS, "cap")}
    return {**plain, "mask": 1, "ref": ref}


class _OpenGroup:
    __slots__ = ("answered", "ids", "run_id")

    def __init__(self, run_id: Any, ids: dict[str, str]):
        self.run_id = run_id
        self.ids = ids  # original call id -> rewritten id, in call order
        self.answered: set[str] = set()


@dataclass
class ProjectionPoint:
    """The projector's state after the main records up to `watermark` (see the module docstring).

    `messages`/`origins` are those projected after the view (`view_messages` of them came from
    the view and are not part of the point). Its stored form (`stored`) keeps each message made
    from a record as that record's origin, and only the messages projection made itself whole.
    """

    watermark: int
    user_turns: int
    model_steps: int
    messages: list[dict[str, Any]]
    origins: list[Origin]
    deferred: list[tuple[dict[str, Any], Origin]]
    # The open group: (run id, original id -> rewritten id, answered original ids), or None.
    group: tuple[Any, dict[str, str], set[str]] | None
    stop_notes: dict[Any, str]
    states: list[tuple[Any, str, str, str | None]]
    # Where the note of the run states in a row is: the last message ("out"), the last waiting
    # note ("deferred"), or nowhere (None).
    states_at: str | None
    calls: dict[tuple[Any, str], tuple[str, str]]
    answered: set[tuple[Any, str]]
    shown_ids: set[str]
    excerpts: dict[int, int]
    # The plan decided by the records after the view (see the module docstring): the result
    # that set the newest plan, as (seq, run, call id), and its plan; None when none set one.
    # `plan_known` is False when it must be read from the records; `plan_calls` are the calls
    # whose latest assistant record names `update_plan`, by (run, call id).
    plan: tuple[int, Any, str] | None = None
    plan_text: str | None = None
    plan_known: bool = False
    plan_calls: set[tuple[Any, str]] = field(default_factory=set)
    # The plan the records up to the view set, once read: (seq of its result, plan), or None
    # (none set one); `view_plan_known` is False until it was read.
    view_plan: tuple[int, str] | None = None
    view_plan_known: bool = False

    def stored(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Return (body, inline messages): origins by reference, made messages inline."""
        inline: list[dict[str, Any]] = []

        def entry(message: dict[str, Any], origin: Origin) -> dict[str, Any]:
            if origin is not None and "s" in origin:
                return origin
            inline.append(message)
            return {"i": len(inline) - 1}

        body = {
            "w": self.watermark,
            "u": self.user_turns,
            "m": self.model_steps,
            "e": [entry(m, o) for m, o in zip(self.messages, self.origins, strict=True)],
            "d": [entry(m, o) for m, o in self.deferred],
            "g": (
                None
                if self.group is None
                else [self.group[0], list(self.group[1].items()), sorted(self.group[2])]
            ),
            "stop": [[run, ref] for run, ref in self.stop_notes.items()],
            "st": [list(state) for state in self.states],
            "sa": self.states_at,
            "c": [
                [run, call, rewritten, name, (run, call) in self.answered]
                for (run, call), (rewritten, name) in self.calls.items()
            ],
            "ids": sorted(self.shown_ids),
            "ex": [[seq, chars] for seq, chars in self.excerpts.items()],
            "pc": [list(call) for call in sorted(self.plan_calls, key=repr)],
        }
        if self.plan_known:
            body["pl"] = None if self.plan is None else list(self.plan)
        if self.view_plan_known:
            body["pv"] = None if self.view_plan is None else self.view_plan[0]
        return body, inline

    @classmethod
    def from_stored(
        cls,
        body: Mapping[str, Any],
        inline: list[dict[str, Any]],
        records: Mapping[int, dict[str, Any]],
        sizes: Mapping[int, int | None] | None = None,
    ) -> ProjectionPoint:
        """Return the point `stored` gave, its references materialised from `records` (seq ->
        journal message; `sizes`: seq -> the byte length each was stored with, when known).

        A point stored before it carried the plan reads with the plan not known (the records are
        read), its `update_plan` calls taken from the calls it shows.
        """

        def made(entry: dict[str, Any]) -> tuple[dict[str, Any], Origin]:
            if "i" in entry:
                return inline[entry["i"]], None
            record = records[entry["s"]]
            message = materialize(entry, record)
            if sizes is not None:
                carry_json_bytes(message, record, sizes.get(entry["s"]))
            return message, entry

        shown = [made(entry) for entry in body["e"]]
        group = body["g"]
        calls = {(run, call): (rewritten, name) for run, call, rewritten, name, _ in body["c"]}
        if "pc" in body:
            plan_calls = {(run, call) for run, call in body["pc"]}
        else:
            plan_calls = {key for key, (_, name) in calls.items() if name == UpdatePlanTool.name}
        plan = body.get("pl")
        view_plan = body.get("pv")
        return cls(
            watermark=body["w"],
            user_turns=body["u"],
            model_steps=body["m"],
            messages=[message for message, _ in shown],
            origins=[origin for _, origin in shown],
            deferred=[made(entry) for entry in body["d"]],
            group=None if group is None else (group[0], dict(group[1]), set(group[2])),
            stop_notes={run: ref for run, ref in body["stop"]},
            states=[tuple(state) for state in body["st"]],  # type: ignore[misc]
            states_at=body["sa"],
            calls=calls,
            answered={(run, call) for run, call, _, _, answered in body["c"] if answered},
            shown_ids=set(body["ids"]),
            excerpts={seq: chars for seq, chars in body["ex"]},
            plan=None if plan is None else (plan[0], plan[1], plan[2]),
            plan_text=None if plan is None else _plan_in(records[plan[0]]),
            plan_known="pl" in body,
            plan_calls=plan_calls,
            view_plan=None if view_plan is None else (view_plan, _plan_in(records[view_plan])),
            view_plan_known="pv" in body,
        )

    @staticmethod
    def references(body: Mapping[str, Any]) -> list[int]:
        """Return the session seqs a stored point refers to (its plans' results included)."""
        seqs = [entry["s"] for part in ("e", "d") for entry in body[part] if "s" in entry]
        if body.get("pl") is not None:
            seqs.append(body["pl"][0])
        if body.get("pv") is not None:
            seqs.append(body["pv"])
        return seqs


def _plan_in(message: dict[str, Any]) -> str | None:
    """Return the plan an `update_plan` result message set."""
    return plan_set_by(UpdatePlanTool.name, message_text(message))


class _Projector:
    def __init__(
        self,
        history: ProjectedHistory,
        cap: int,
        judge: ExcerptJudge | None,
        excerpts: Mapping[int, int] | None,
        rules: Rendering,
        imported: ImportedHistory | None = None,
        masks: Mapping[int, str] | None = None,
    ):
        self.rules = rules
        # Rendering 7: the results runs masked (seq -> the reference of their stub), and those
        # this history shows masked.
        self.masks = dict(masks or {}) if rules.keeps_masks else {}
        self.applied = history.masks
        # Rendering 6: the imported history, while its note is still to be shown.
        self.imported = imported if rules.marks_imports and imported and imported.upto else None
        self.out = history.messages
        self.origins = history.origins
        self.decided = history.excerpts
        self.cap = cap
        self.judge = judge
        self.given = excerpts
        self.group: _OpenGroup | None = None
        # Call ids kept as the run gave them, so none is shown twice.
        self.shown_ids: set[str] = set()
        # Rendering 3: stop notes said again by their run's state, and the note of the run
        # states in a row shown last (with its states), which the next state joins.
        self.stop_notes: dict[Any, str] = {}
        self.states: list[tuple[Any, str, str, str | None]] = []
        self.states_note: dict[str, Any] | None = None
        self.deferred: list[tuple[dict[str, Any], Origin]] = []
        # (run id, original call id) -> (rewritten id, tool name), to describe late results.
        self.calls: dict[tuple[Any, str], tuple[str, str]] = {}
        # Calls whose recorded result has been placed, in their group or as a late note.
        self.answered: set[tuple[Any, str]] = set()
        # How many messages came from the view (they are not part of a point).
        self.base = len(self.out)
        # The plan decided so far (see the module docstring and `ProjectionPoint`).
        self.plan: tuple[int, Any, str] | None = None
        self.plan_text: str | None = None
        self.plan_known = True
        self.plan_calls: set[tuple[Any, str]] = set()
        self.view_plan: tuple[int, str] | None = None
        self.view_plan_known = False

    def resume(self, point: ProjectionPoint) -> None:
        """Continue from `point` (the view's messages already shown): copy its state in.

        The point is left as it was (a cached point is resumed again), so everything the
        projector changes later is copied; the run-states note is the one message changed in
        place, so it is copied too.
        """
        messages = list(point.messages)
        deferred = list(point.deferred)
        if point.states_at == "out":
            messages[-1] = dict(messages[-1])
            self.states_note = messages[-1]
        elif point.states_at == "deferred":
            deferred[-1] = (dict(deferred[-1][0]), deferred[-1][1])
            self.states_note = deferred[-1][0]
        origins = list(point.origins)
        self.remask(messages, origins)
        self.out.extend(messages)
        self.origins.extend(origins)
        self.deferred = self.remasked(deferred)
        if point.group is not None:
            run_id, ids, answered = point.group
            self.group = _OpenGroup(run_id, dict(ids))
            self.group.answered = set(answered)
        self.stop_notes = dict(point.stop_notes)
        self.states = list(point.states)
        self.calls = dict(point.calls)
        self.answered = set(point.answered)
        self.shown_ids = set(point.shown_ids)
        self.decided.update(point.excerpts)
        self.plan, self.plan_text, self.plan_known = point.plan, point.plan_text, point.plan_known
        self.plan_calls = set(point.plan_calls)
        self.view_plan, self.view_plan_known = point.view_plan, point.view_plan_known

    def remask(self, messages: list[dict[str, Any]], origins: list[Origin]) -> None:
        """Show as stubs, in place, the results a run masked that these messages (a view's, or a
        point's made before the masking) show whole."""
        for index, origin in enumerate(origins):
            if origin is None or "s" not in origin or messages[index].get("role") != "tool":
                continue
            if "mask" in origin:
                self.applied[origin["s"]] = origin["ref"]
                continue
            ref = self.masks.get(origin["s"])
            if ref is not None:
                self.applied[origin["s"]] = ref
                origins[index] = _masked_origin(origin, ref)
                messages[index] = {**messages[index], "content": masked(ref)}

    def remasked(
        self, entries: list[tuple[dict[str, Any], Origin]]
    ) -> list[tuple[dict[str, Any], Origin]]:
        """Return `entries` (message, origin) with `remask` applied."""
        messages = [message for message, _ in entries]
        origins = [origin for _, origin in entries]
        self.remask(messages, origins)
        return list(zip(messages, origins, strict=True))

    def point(self, history: ProjectedHistory) -> ProjectionPoint:
        """Return the state after the records projected so far (before the end's close)."""
        states_at = None
        if self.states_note is not None:
            if self.deferred and self.deferred[-1][0] is self.states_note:
                states_at = "deferred"
            elif self.out and self.out[-1] is self.states_note:
                states_at = "out"
        return ProjectionPoint(
            watermark=history.watermark,
            user_turns=history.user_turns,
            model_steps=history.model_steps,
            messages=self.out[self.base :],
            origins=self.origins[self.base :],
            deferred=list(self.deferred),
            group=(
                None
                if self.group is None
                else (self.group.run_id, dict(self.group.ids), set(self.group.answered))
            ),
            stop_notes=dict(self.stop_notes),
            states=list(self.states),
            states_at=states_at,
            calls=dict(self.calls),
            answered=set(self.answered),
            shown_ids=set(self.shown_ids),
            excerpts=dict(self.decided),
            plan=self.plan,
            plan_text=self.plan_text,
            plan_known=self.plan_known,
            plan_calls=set(self.plan_calls),
            view_plan=self.view_plan,
            view_plan_known=self.view_plan_known,
        )

    def emit(self, message: dict[str, Any], origin: Origin) -> None:
        self.out.append(message)
        self.origins.append(origin)

    def reference(self, record: JournalRecord) -> str:
        """Return the reference history names `record` by: from rendering 5 the one its run gave
        it (`r<run>:<seq>`) when its run and seq are known, so an excerpt reads as the run sent
        it; else its session seq (`s:<seq>`). `read_record` reads both."""
        if (
            self.rules.keeps_run_refs
            and record.local_seq is not None
            and isinstance(record.run_id, int)
            and not isinstance(record.run_id, bool)
        ):
            return run_ref(record.run_id, MAIN_INSTANCE, record.local_seq)
        return f"s:{record.seq}"

    def sized(self, record: JournalRecord, origin: dict[str, Any]) -> dict[str, Any]:
        """Return `origin`, turned into an excerpt when the record is large."""
        ref = self.reference(record)
        if self.given is not None:
            chars = self.given.get(record.seq)
        elif self.judge is not None:
            whole = {key: value for key, value in origin.items() if key != "cap"}
            chars = self.judge(message_text(materialize(whole, record.message)), ref)
        else:
            chars = None
        if chars is None:
            return origin
        self.decided[record.seq] = chars
        return {**{k: v for k, v in origin.items() if k != "cap"}, "ex": chars, "ref": ref}

    def made(self, record: JournalRecord, origin: dict[str, Any]) -> None:
        """Show `record` as `origin` says (the one transform a rebuilt view also uses)."""
        origin = self.sized(record, origin)
        ref = self.masks.get(record.seq) if origin.get("as") == "tool" else None
        if ref is not None:
            # Decided after its excerpt, so a point and a rebuilt block decide the same excerpts.
            self.applied[record.seq] = ref
            origin = _masked_origin(origin, ref)
        self.emit(_shown(origin, record), origin)

    def import_due(self, floor: int) -> None:
        """Drop the note when projection starts past the imported records (shown already)."""
        if self.imported is not None and floor > self.imported.upto:
            self.imported = None

    def mark_import(self) -> None:
        """Show the note that follows the imported records, once (see the module docstring)."""
        if self.imported is not None:
            self.note(self.imported.note(self.rules.note_role), None)
            self.imported = None

    def finish(self) -> None:
        """Close what is still open at the end of the history, then show a note still due."""
        self.close_group()
        self.mark_import()

    def close_group(self) -> None:
        group = self.group
        if group is None:
            return
        for original, rewritten in group.ids.items():
            if original not in group.answered:
                placeholder = {"role": "tool", "tool_call_id": rewritten, "content": UNKNOWN_RESULT}
                self.emit(placeholder, None)
        self.group = None
        for message, origin in self.deferred:
            self.emit(message, origin)
        self.deferred.clear()

    def note(self, message: dict[str, Any], origin: Origin) -> None:
        if self.group is None:
            self.emit(message, origin)
        else:
            self.deferred.append((message, origin))

    def run_state(self, record: JournalRecord) -> None:
        """Show a run's state in one short note, merged into the note just before it, if any
        (from rendering 5 never: a note once shown is never changed)."""
        error = str(record.message.get("error") or "")
        state = (
            record.run_id,
            str(record.message.get("status")),
            error.split(":", 1)[0].strip(),
            self.stop_notes.pop(record.run_id, None),
        )
        if self.group is not None:
            last = self.deferred[-1][0] if self.deferred else None
        else:
            last = self.out[-1] if self.out else None
        if not self.rules.appends_notes and last is not None and last is self.states_note:
            self.states.append(state)
            last["content"] = RUN_NOTE_PREFIX + run_states_text(self.states)
            return
        self.states = [state]
        self.states_note = run_note(run_states_text(self.states), role=self.rules.note_role)
        self.note(self.states_note, None)

    def note_of(self, record: JournalRecord, origin: dict[str, Any]) -> None:
        origin = self.sized(record, origin)
        self.note(_shown(origin, record), origin)

    def assistant(self, record: JournalRecord) -> None:
        self.close_group()
        how = "assistant_ids" if self.keeps_ids(record) else "assistant"
        origin = self.sized(record, {"s": record.seq, "as": how})
        message = _shown(origin, record)
        self.emit(message, origin)
        calls = record.message.get("tool_calls") or []
        if not calls:
            return
        ids: dict[str, str] = {}
        for call, rewritten in zip(calls, message["tool_calls"], strict=True):
            original = str(call.get("id") or rewritten["id"])
            ids[original] = rewritten["id"]
            self.calls[(record.run_id, original)] = (rewritten["id"], rewritten["function"]["name"])
        self.group = _OpenGroup(record.run_id, ids)

    def keeps_ids(self, record: JournalRecord) -> bool:
        """Return True when the record's call ids can stay: unique ids the run gave (rendering 3).

        Ids of the form `r<run>-<step>-<n>` are given by the engine, unique in the session; any
        other id (a provider's, or one already shown) is rewritten, as before.
        """
        if not self.rules.keeps_call_ids:
            return False
        ids = [str(call.get("id") or "") for call in record.message.get("tool_calls") or []]
        if not all(_RUN_CALL_ID.fullmatch(i) for i in ids) or self.shown_ids.intersection(ids):
            return False
        self.shown_ids.update(ids)
        return True

    def tool_result(self, record: JournalRecord) -> None:
        original = str(record.message.get("tool_call_id") or "")
        key = (record.run_id, original)
        group = self.group
        if (
            group is not None
            and group.run_id == record.run_id
            and original in group.ids
            and original not in group.answered
        ):
            group.answered.add(original)
            self.answered.add(key)
            origin = {"s": record.seq, "as": "tool", "id": group.ids[original], "cap": self.cap}
            self.made(record, origin)
            if len(group.answered) == len(group.ids):
                self.close_group()
            return
        if key in self.calls:
            rewritten, name = self.calls[key]
            which = "another" if key in self.answered else "late"
            self.answered.add(key)
            prefix = (
                f"[{which} tool result of call {rewritten} ({name}) from run {record.run_id}; "
                f"recorded after its turn had closed]\n"
            )
        else:
            prefix = f"[tool result of unknown call {original!r} from run {record.run_id}]\n"
        self.note_of(record, {"s": record.seq, "as": "note", "prefix": prefix, "cap": self.cap})

    def follow_plan(self, record: JournalRecord) -> None:
        """Follow the plan `record` may set, as `inherited_plan` would decide it."""
        if record.kind == "assistant":
            seen: set[tuple[Any, str]] = set()
            for call in record.message.get("tool_calls") or []:
                key = (record.run_id, str(call.get("id") or ""))
                if key in seen:
                    continue  # the first call of an id is the one its results answer
                seen.add(key)
                if str((call.get("function") or {}).get("name") or "") == UpdatePlanTool.name:
                    self.plan_calls.add(key)
                else:
                    self.plan_calls.discard(key)
            return
        if record.kind != "tool_result":
            return
        text = message_text(record.message)
        key = (record.run_id, str(record.message.get("tool_call_id") or ""))
        if not text.startswith(PLAN_UPDATED) or key not in self.plan_calls:
            return
        plan = plan_set_by(UpdatePlanTool.name, text)
        if plan is not None:
            self.plan, self.plan_text, self.plan_known = (record.seq, *key), plan, True
        elif self.plan is not None and self.plan[1:] == key:
            # A newer result of the call that set the plan sets none: read the records.
            self.plan, self.plan_text, self.plan_known = None, None, False

    def add(self, record: JournalRecord) -> None:
        if self.imported is not None and record.seq > self.imported.upto:
            self.mark_import()
        self.follow_plan(record)
        kind = record.kind
        if self.rules.reads_adopted_feedback and is_adopted_feedback(record):
            kind = "feedback"
        if kind == "assistant":
            self.assistant(record)
        elif kind == "tool_result":
            self.tool_result(record)
        elif kind == "user_input":
            self.close_group()
            self.made(record, {"s": record.seq, "as": "user"})
        elif kind == "supplement":
            self.note_of(record, {"s": record.seq, "as": "user"})
        elif kind == "feedback" and self.rules.collapses_notes and is_run_note(record.message):
            # Said again, shorter, by the run's state that follows (rendering 3).
            self.stop_notes[record.run_id] = f"s:{record.seq}"
        elif kind == "feedback":
            how = "feedback"
            if is_run_note(record.message):
                how = "system_note" if self.rules.note_role == "system" else "run_note"
            self.note_of(record, {"s": record.seq, "as": how})
        elif kind == "status" and self.rules.collapses_notes:
            self.run_state(record)
        elif kind == "status":
            status = record.message.get("status")
            error = record.message.get("error")
            suffix = f": {error}" if error else ""
            text = f"run {record.run_id} {status}{suffix}"
            self.note(run_note(text, role=self.rules.note_role), None)
        else:
            text = json.dumps(record.message, ensure_ascii=False)
            self.note({"role": "user", "content": f"[{kind} record] {text}"}, None)


# How the end of a run was written as user-role feedback before run notes existed.
_OLD_RUN_NOTES = (
    FEEDBACK_PREFIX + "run stopped: ",
    FEEDBACK_PREFIX + "run cancelled at a safe point",
)


def is_run_note(message: dict[str, Any]) -> bool:
    """Say whether a feedback record is a run-status note (system, assistant or older form)."""
    if message.get("role") in ("assistant", "system"):
        return True
    return message_text(message).startswith(_OLD_RUN_NOTES)


def is_adopted_feedback(record: JournalRecord) -> bool:
    """Say whether a record is a `[feedback]` message adopted from a run before the journal.

    Adoption used to store every user message after a legacy run's question as a supplement;
    those that were feedback (or the run notes of that time) begin with `[feedback] `.
    """
    return (
        record.kind == "supplement"
        and record.entry_key.startswith(LEGACY_KEY_PREFIX)
        and message_text(record.message).startswith(FEEDBACK_PREFIX)
    )


def inherited_plan(newest_first: Iterable[JournalRecord]) -> str | None:
    """Return the plan set by the last `update_plan` among main records given newest first.

    Last in session order means the result with the highest seq (a resumed run's result comes
    after the runs that followed it). Records are read only until that is decided, so a caller
    can pass a lazy reverse scan of the journal; see the module docstring for the rule.
    """
    found = inherited_plan_set(newest_first)
    return found[1] if found is not None else None


def inherited_plan_set(
    newest_first: Iterable[JournalRecord],
) -> tuple[tuple[int, Any, str], str] | None:
    """`inherited_plan`, with the result that set it: ((seq, run, call id), plan), or None."""
    # Results that may have set a plan, by (run, call id), until their call is found.
    waiting: dict[tuple[Any, str], tuple[int, str]] = {}
    found: tuple[tuple[int, Any, str], str] | None = None
    for record in newest_first:
        if record.instance != MAIN_INSTANCE:
            continue
        if record.kind == "tool_result":
            text = message_text(record.message)
            if text.startswith(PLAN_UPDATED):
                call = (record.run_id, str(record.message.get("tool_call_id") or ""))
                waiting.setdefault(call, (record.seq, text))
        elif record.kind == "assistant":
            for candidate in _plans_set(record, waiting):
                if found is None or candidate[0][0] > found[0][0]:
                    found = candidate
        if found is not None and all(seq < found[0][0] for seq, _ in waiting.values()):
            # Every record still unread is older than the plan found.
            return found
    return found


def _plans_set(
    record: JournalRecord, waiting: dict[tuple[Any, str], tuple[int, str]]
) -> list[tuple[tuple[int, Any, str], str]]:
    """Return ((seq, run, call id), plan) of each waiting result that set a plan by one of
    `record`'s calls.

    The results answering its calls stop waiting, whether they set a plan or not.
    """
    plans = []
    for call in record.message.get("tool_calls") or []:
        key = (record.run_id, str(call.get("id") or ""))
        result = waiting.pop(key, None)
        if result is not None:
            plan = plan_set_by(str((call.get("function") or {}).get("name") or ""), result[1])
            if plan is not None:
                plans.append(((result[0], *key), plan))
    return plans


def project_history(
    records: Iterable[JournalRecord],
    view: ReusableView | Mapping[str, Any] | None = None,
    *,
    tool_result_chars: int = TOOL_RESULT_VIEW_CHARS,
    judge: ExcerptJudge | None = None,
    excerpts: Mapping[int, int] | None = None,
    rendering: int | None = None,
    point: ProjectionPoint | None = None,
    keep_point: bool = False,
    imported: ImportedHistory | None = None,
    masks: Mapping[int, str] | None = None,
) -> ProjectedHistory:
    """Return the history a new run inherits: `view` plus the main records after its watermark.

    Without a view, every main-instance record is projected. Totals are the view's plus the
    records after its watermark; baselines are the view's (zero without one). `judge` decides
    which records are large; `excerpts` (seq -> characters) repeats decisions made before, so a
    stored history block is rebuilt exactly. `rendering` is the version of the rules the
    records are shown with (default: the current one). `plan` is the one the main records
    given last set (`inherited_plan`), those up to the view's watermark included.

    With `point` (a `ProjectionPoint` made after `view`, under the same rules), projection
    resumes from it: `records` are then those after the point's watermark. With `keep_point`,
    `history.point` is the state after the last record, for a later projection to resume from.
    The plan is then the one the records after the view set, carried by the point; when it is
    not known from the point (`plan_known` False), the caller reads those records.

    `imported` names an imported session's imported records: from rendering 6 one note follows
    them (see the module docstring). `masks` (seq -> reference) are the results runs masked:
    from rendering 7 each is shown as its stub (see the module docstring).
    """
    rules = rendering_named(rendering)
    if view is not None and not isinstance(view, ReusableView):
        view = ReusableView.from_mapping(view)
    history = ProjectedHistory(
        tool_result_chars=tool_result_chars, from_journal=True, rendering=rules.version
    )
    if view is not None:
        history = ProjectedHistory(
            messages=list(view.messages),
            origins=list(view.origins) if view.origins is not None else [],
            watermark=view.watermark,
            after=view.watermark,
            user_turns=view.user_turns,
            model_steps=view.model_steps,
            baseline_user_turns=view.baseline_user_turns,
            baseline_model_steps=view.baseline_model_steps,
            view_revision=view.revision,
            tool_result_chars=tool_result_chars,
            from_journal=True,
            rendering=rules.version,
        )
    projector = _Projector(history, tool_result_chars, judge, excerpts, rules, imported, masks)
    # A view older than a masking shows what it masked whole (rendering 7: shown as stubs).
    projector.remask(history.messages, history.origins)
    if point is not None:
        projector.resume(point)
        history.watermark = point.watermark
        history.user_turns = point.user_turns
        history.model_steps = point.model_steps
    floor = history.watermark
    projector.import_due(floor)
    main: list[JournalRecord] = []
    for record in records:
        # Child instances' inner messages are not inherited; only the main instance's are.
        if record.instance != MAIN_INSTANCE:
            continue
        main.append(record)
        if record.seq <= floor:
            continue
        history.watermark = max(history.watermark, record.seq)
        if record.kind == "user_input":
            history.user_turns += 1
        elif record.kind == "assistant":
            history.model_steps += 1
        projector.add(record)
    if keep_point:
        history.point = projector.point(history)
    projector.finish()
    if point is None:
        history.plan = inherited_plan(reversed(main))
    else:
        history.plan, history.plan_known = projector.plan_text, projector.plan_known
    return history
