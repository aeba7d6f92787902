"""Compaction: replace older parts of a view with a handoff summary, or leave the view alone.

`BudgetCompactionPolicy`:

1. Pins the system instructions (leading system messages), the current task and the plan.
2. Splits the rest into units: an assistant message with tool calls plus all of its results is one
   unit, never split; any other message is a unit of its own.
3. Keeps the longest run of recent units that fits the target (what remains of
   `target_ratio` after the pinned messages and a reserve for the summary). A trigger that only
   counts turns or steps keeps at most half of the material, and skips when what it would
   summarise is too small to gain anything.
4. Summarises the older units in order, in as many segments as needed (at most
   `max_compaction_calls`), each request sized to fit the effective budget on its own and carrying
   the summary so far. An earlier handoff summary in the view is that summary so far (it and
   everything before it are always summarised), so the result is one summary, never a summary
   inside a summary. A unit too large for one request is cut into ordered text fragments that are
   consumed one after another. Units not fully consumed when the calls run out are kept verbatim.
   Each call's output limit is the room left under the trigger once everything else of the new
   view is placed; a reply longer than that is cut to it, with a mark (`SUMMARY_CUT`).
5. Builds `[system…, handoff summary, kept units in order]`, where the current task keeps its
   place: right after the summary when everything before it was summarised, otherwise after the
   kept history units that precede it. When the summary also covers the run's own progress
   (units after the task), it comes right after the task instead: `[system…, task, summary,
   kept units]`. The plan is carried verbatim inside the summary message.

With a large-record policy, a first stage makes no model call: the tool results of the units that
step 3 would not keep are masked to one-line references (`request.mask`). When that alone brings
the view below the trigger, the compaction ends there (`masked`); otherwise steps 3 to 5 run on the
masked view, summarising the older units from their unmasked text. Each stage reports its own
before and after (`details["stages"]`).

The result is accepted only if it keeps the tool-call protocol, is smaller than before and is below
the trigger; `target_reached` says whether it also reached the target. When the pinned content
(system instructions, task and plan) alone is at or above the trigger, nothing can succeed: the
attempt is skipped as `pinned_too_large` without a model call. An empty summary, a failed
or refused call, no reduction or a broken boundary fail the compaction and the old view stays.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentloom.engine._budget import ModelBudget, TokenEstimator
from agentloom.engine._errors import (
    ContextBudgetExceeded,
    EngineError,
    GatewayError,
    LeaseLostError,
    ModelCallLimitReached,
)
from agentloom.engine._measure import SUMMARY_RESERVE_SHARE
from agentloom.engine._policy import SIZE_TRIGGERS, TriggerPolicy
from agentloom.engine._protocol import (
    HANDOFF_MARK,
    message_text,
    protocol_problems,
    render_message,
    tool_calls_of,
)

__all__ = [
    "HANDOFF_HEADER",
    "SUMMARY_INSTRUCTIONS",
    "BudgetCompactionPolicy",
    "CompactionOutcome",
    "CompactionPolicy",
    "CompactionRequest",
]

SUMMARY_INSTRUCTIONS = (
    "You write the handoff summary of an AI agent's earlier context, which no longer fits its "
    "window. Keep every fact needed to continue the work: the user's requests, names, numbers, "
    "identifiers, decisions, tool calls and their results (including errors and unknown "
    "outcomes) and open questions. Never invent anything and never claim an action succeeded "
    "unless the material shows it. Reply with the updated summary as plain text."
)
HANDOFF_HEADER = (
    f"{HANDOFF_MARK} Earlier context was compacted into this summary by the system; "
    "it is not a new request."
)
PLAN_HEADER = "[current plan, kept as written]"

# A turns- or steps-only trigger does not summarise less material than this (estimate units).
MIN_COUNT_TRIGGER_GAIN = 256
# Room left in each summary request for the estimator's rounding.
SEGMENT_SLACK = 32
# A summary with less room than this under the trigger cannot say anything useful.
MIN_SUMMARY_ROOM = 64
# Marks a summary the engine had to cut to its room.
SUMMARY_CUT = "\n[summary cut to fit the context budget]"
# A summary request with room for less material than this cannot make progress.
MIN_SEGMENT_CHARS = 200
_SEGMENT_RETRIES = 6


@dataclass(frozen=True)
class CompactionRequest:
    """Everything a compaction policy may use; `summarise` sends one summary request."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    task_index: int | None
    plan: str | None
    triggers: tuple[str, ...]
    policy: TriggerPolicy
    budget: ModelBudget
    estimator: TokenEstimator
    # Sends the messages as a `compaction` call with an output limit (estimate units) and returns
    # the reply text; raises EngineError (GatewayError, ContextBudgetExceeded,
    # ModelCallLimitReached) when nothing usable came back.
    summarise: Callable[[list[dict[str, Any]], int], str]
    # Returns the one-line stub for the tool result at a view index, or None when it has none;
    # None: no masking stage (versions without a large-record policy).
    mask: Callable[[int], dict[str, Any] | None] | None = None


@dataclass(frozen=True)
class CompactionOutcome:
    """What a compaction attempt did. `messages` is the new view, only when it succeeded."""

    outcome: str  # "succeeded" | "skipped" | "failed"
    reason: str
    before: int
    after: int
    target_reached: bool
    calls: int
    triggers: tuple[str, ...]
    messages: list[dict[str, Any]] | None = None
    task_index: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def succeeded(self) -> bool:
        return self.outcome == "succeeded"

    def metrics(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "after": self.after,
            "target_reached": self.target_reached,
            "calls": self.calls,
            "outcome": self.outcome,
            "reason": self.reason,
            "trigger": list(self.triggers),
        }


class CompactionPolicy(abc.ABC):
    """Chooses what to summarise and produces a smaller view, or reports why it did not."""

    @abc.abstractmethod
    def compact(self, request: CompactionRequest) -> CompactionOutcome:
        """Return the outcome of one compaction attempt; never raise for a failed summary."""


@dataclass(frozen=True)
class _Unit:
    start: int
    end: int


_TASK = "task"


def _layout(messages: list[dict[str, Any]], task_index: int | None):
    """Return (end of the pinned system head, items): units and the task marker, in order."""
    head_end = 0
    while head_end < len(messages) and messages[head_end].get("role") == "system":
        head_end += 1
    items: list[_Unit | str] = []
    index = head_end
    while index < len(messages):
        if index == task_index:
            items.append(_TASK)
            index += 1
            continue
        end = index + 1
        if tool_calls_of(messages[index]):
            while end < len(messages) and messages[end].get("role") == "tool":
                end += 1
            if task_index is not None and index < task_index < end:
                raise ValueError("the current task sits inside a tool group")
        items.append(_Unit(index, end))
        index = end
    return head_end, items


class _Fragments:
    """Ordered texts of the units to summarise, consumed in segments of bounded size."""

    def __init__(self, texts: list[str]):
        self.texts = texts
        self.piece = 0  # units fully consumed
        self.offset = 0  # characters consumed of the current unit

    @property
    def done(self) -> bool:
        return self.piece >= len(self.texts)

    def take(self, capacity: int) -> tuple[str, tuple[int, int]]:
        """Return the next segment of at most about `capacity` characters and the new position."""
        parts: list[str] = []
        used = 0
        piece, offset = self.piece, self.offset
        while piece < len(self.texts):
            rest = self.texts[piece][offset:]
            header = "--- continued ---\n" if offset else "--- next item ---\n"
            size = len(header) + len(rest) + 1
            if used + size <= capacity:
                parts.append(header + rest)
                used += size
                piece, offset = piece + 1, 0
                continue
            room = capacity - used - len(header) - 1
            fits_alone = size <= capacity
            # A unit that fits a segment of its own waits for the next one; a larger unit is cut.
            if not fits_alone and room > 0 and (room >= MIN_SEGMENT_CHARS or not parts):
                parts.append(header + rest[:room])
                offset += room
            break
        return "\n".join(parts), (piece, offset)

    def advance(self, position: tuple[int, int]) -> None:
        self.piece, self.offset = position


class BudgetCompactionPolicy(CompactionPolicy):
    """Summarise older history in ordered segments and keep recent complete groups (DESIGN §6)."""

    def compact(self, request: CompactionRequest) -> CompactionOutcome:
        policy, budget, estimator = request.policy, request.budget, request.estimator
        view, tools = request.messages, request.tools
        before = policy.measure(view, tools, estimator)
        trigger_at = policy.trigger_at(budget)
        target_at = policy.target_at(budget)

        stages: list[dict[str, Any]] = []

        def outcome(kind: str, reason: str, *, after: int = before, calls: int = 0, **extra):
            if stages:
                # The masking stage was applied; the summary stage decides what is kept.
                extra.setdefault("details", {})["stages"] = [
                    {**stages[0], "outcome": "applied" if kind == "succeeded" else "discarded"},
                    {
                        "stage": "summary",
                        "before": stages[0]["after"],
                        "after": after,
                        "calls": calls,
                        "outcome": kind,
                        "reason": reason,
                    },
                ]
            return CompactionOutcome(
                outcome=kind,
                reason=reason,
                before=before,
                after=after,
                target_reached=kind == "succeeded" and after <= target_at,
                calls=calls,
                triggers=request.triggers,
                **extra,
            )

        if protocol_problems(view):
            return outcome("failed", "boundary_violation")
        try:
            head_end, items = _layout(view, request.task_index)
        except ValueError:
            return outcome("failed", "boundary_violation")
        units = [item for item in items if isinstance(item, _Unit)]
        if not units:
            return outcome("skipped", "nothing_to_compact")

        pinned = view[:head_end]
        if request.task_index is not None:
            pinned = [*pinned, view[request.task_index]]
        pinned_size = policy.measure(
            [*pinned, {"role": "user", "content": f"{PLAN_HEADER}\n{request.plan}"}]
            if request.plan
            else pinned,
            tools,
            estimator,
        )
        if pinned_size >= trigger_at:
            # No summary can bring the view below the trigger: spend no call on trying.
            return outcome("skipped", "pinned_too_large")
        keep_budget = target_at - pinned_size - int(target_at * SUMMARY_RESERVE_SHARE)
        count_only = not SIZE_TRIGGERS.intersection(request.triggers)
        sizes, kept_from = self._kept(request, view, units, keep_budget, count_only)

        masked_at: list[int] = []
        if request.mask is not None and not count_only:
            masked_view, masked_at = _masked(request, view, units[:kept_from])
            if masked_at:
                masked_size = policy.measure(masked_view, tools, estimator)
                stages.append(
                    {"stage": "masking", "before": before, "after": masked_size, "calls": 0}
                )
                if masked_size < before and masked_size < trigger_at:
                    stages.clear()
                    return outcome(
                        "succeeded",
                        "masked",
                        after=masked_size,
                        messages=masked_view,
                        task_index=request.task_index,
                        details={"stage": "masking", "masked": masked_at, "summarised": []},
                    )
                view = masked_view
                sizes, kept_from = self._kept(request, view, units, keep_budget, count_only)

        if kept_from == 0:
            return outcome("skipped", "nothing_to_compact")
        # An earlier summary is updated, never nested: it is summarised with what precedes it.
        earlier = [n for n, unit in enumerate(units) if _is_summary(view[unit.start : unit.end])]
        if earlier:
            kept_from = max(kept_from, earlier[-1] + 1)
        material = [n for n in range(kept_from) if n not in earlier]
        if count_only and sum(sizes[:kept_from]) < MIN_COUNT_TRIGGER_GAIN:
            return outcome("skipped", "no_gain")

        def assemble(body: str, consumed: int) -> tuple[list[dict[str, Any]], int | None, list]:
            dropped = {*earlier, *material[:consumed]}
            return _assemble(view, items, head_end, request, dropped, body)

        # The summary may take what is left under the trigger once everything else is placed.
        skeleton = assemble("", len(material))[0]
        room = trigger_at - 1 - policy.measure(skeleton, tools, estimator)
        if room < MIN_SUMMARY_ROOM:
            return outcome("failed", "no_room_for_summary")

        # Summaries read the units as they were before masking; an earlier summary is the
        # summary so far.
        original = request.messages
        texts = [
            "\n".join(render_message(m) for m in original[units[n].start : units[n].end])
            for n in material
        ]
        running = "\n\n".join(_summary_body(view[units[n].start]) for n in earlier)
        summary, calls, failure = self._summarise(request, texts, running, room)
        if failure:
            return outcome("failed", failure, calls=calls)
        body, consumed = summary
        new_view, new_task_index, summarised = assemble(body, consumed)
        if protocol_problems(new_view):
            return outcome("failed", "boundary_violation", calls=calls)
        after = policy.measure(new_view, tools, estimator)
        cut = body.endswith(SUMMARY_CUT)
        if after >= trigger_at:
            # Longer than its room (a summariser may ignore its output limit): cut to fit.
            new_view, new_task_index, summarised, after = _cut_to_fit(
                lambda text: assemble(text, consumed),
                lambda messages: policy.measure(messages, tools, estimator),
                body,
                trigger_at,
            )
            cut = True
        if after >= before:
            return outcome("failed", "no_reduction", after=after, calls=calls)
        if after >= trigger_at:
            return outcome("failed", "above_trigger", after=after, calls=calls)
        reason = "compacted" if consumed == len(material) else "compacted_partly"
        return outcome(
            "succeeded",
            reason,
            after=after,
            calls=calls,
            messages=new_view,
            task_index=new_task_index,
            details={
                "stage": "summary",
                "summarised_units": len(earlier) + consumed,
                "kept_units": len(units) - len(earlier) - consumed,
                "summary_room": room,
                "summary_cut": cut,
                # Where in the old view the summarised and the (still shown) masked messages
                # were, for exact source ranges.
                "summarised": summarised,
                "masked": sorted(set(masked_at) - set(summarised)),
            },
        )

    @staticmethod
    def _kept(
        request: CompactionRequest,
        view: list[dict[str, Any]],
        units: list[_Unit],
        keep_budget: int,
        count_only: bool,
    ) -> tuple[list[int], int]:
        """Return each unit's size and the first unit of the longest recent run that is kept."""
        policy, estimator = request.policy, request.estimator
        sizes = [policy.measure(view[u.start : u.end], [], estimator) for u in units]
        if count_only:
            keep_budget = min(keep_budget, sum(sizes) // 2)
        kept_from, kept_size = len(units), 0
        while kept_from > 0 and kept_size + sizes[kept_from - 1] <= keep_budget:
            kept_from -= 1
            kept_size += sizes[kept_from]
        return sizes, kept_from

    def _summarise(
        self, request: CompactionRequest, texts: list[str], running: str, limit: int
    ) -> tuple[tuple[str, int], int, str | None]:
        """Return ((summary, units fully summarised), calls made, failure reason or None).

        `running` is the earlier summary this one updates; `limit` the output limit of each call.
        """
        estimator, effective = request.estimator, request.budget.effective_input_budget
        max_calls = request.policy.max_compaction_calls
        material = "\n".join(texts)
        # Summary requests are sized by the upper bound the hard check will apply to them.
        empty = estimator.upper_bound([{"role": "user", "content": ""}], [])
        full = estimator.upper_bound([{"role": "user", "content": material}], [])
        units_per_char = max((full - empty) / max(len(material), 1), 1e-6)
        fragments = _Fragments(texts)
        calls = 0
        while not fragments.done and calls < max_calls:
            probe = self.summary_messages(running, "", limit)
            room = effective - estimator.upper_bound(probe, []) - SEGMENT_SLACK
            capacity = int(room / units_per_char)
            for _ in range(_SEGMENT_RETRIES):
                if capacity < MIN_SEGMENT_CHARS:
                    return ("", 0), calls, "summary_request_over_budget"
                segment, position = fragments.take(capacity)
                messages = self.summary_messages(running, segment, limit)
                if estimator.upper_bound(messages, []) <= effective:
                    break
                capacity = int(capacity * 0.7)
            else:
                return ("", 0), calls, "summary_request_over_budget"
            try:
                reply = request.summarise(messages, limit)
            except LeaseLostError:
                raise
            except GatewayError as exc:
                return ("", 0), calls + 1, f"gateway_error: {exc.kind}"
            except ContextBudgetExceeded:
                return ("", 0), calls, "summary_request_over_budget"
            except ModelCallLimitReached:
                return ("", 0), calls, "model_call_limit_reached"
            except EngineError as exc:
                return ("", 0), calls, f"summary_refused: {type(exc).__name__}"
            calls += 1
            if not reply.strip():
                return ("", 0), calls, "empty_summary"
            # A reply over its output limit is cut to it, so the next request has its room.
            running = _clipped(reply.strip(), limit, estimator)
            fragments.advance(position)
        return (running, fragments.piece), calls, None

    @staticmethod
    def summary_messages(
        running: str, segment: str, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Return the messages of one summary request (`limit`: its output limit)."""
        length = f" Keep it under {limit} tokens." if limit is not None else ""
        return [
            {"role": "system", "content": SUMMARY_INSTRUCTIONS + length},
            {
                "role": "user",
                "content": (
                    f"Summary so far:\n{running or '(none yet)'}\n\n"
                    f"Next material, in order:\n{segment}\n\n"
                    "Return the updated summary, covering the summary so far and this material."
                ),
            },
        ]


def _masked(
    request: CompactionRequest, view: list[dict[str, Any]], units: list[_Unit]
) -> tuple[list[dict[str, Any]], list[int]]:
    """Return `view` with the tool results of `units` masked to stubs, and where they were."""
    masked_view = list(view)
    masked_at: list[int] = []
    if request.mask is None:
        return masked_view, masked_at
    for unit in units:
        for index in range(unit.start, unit.end):
            stub = request.mask(index)
            if stub is not None:
                masked_view[index] = stub
                masked_at.append(index)
    return masked_view, masked_at


def _cut_to_fit(assemble, measure, body: str, trigger_at: int):
    """Return the view with `body` cut (and marked) until the view is below `trigger_at`.

    Each round cuts at least the excess (a character is at least one unit of a byte count) or
    an eighth of what is left, so it ends; `assemble(text)` builds (view, task index, summarised).
    """
    view, task_index, summarised = assemble(body)
    after = measure(view)
    while after >= trigger_at and body:
        over = after - trigger_at + 1
        body = body[: max(len(body) - max(over, len(body) // 8), 0)]
        view, task_index, summarised = assemble(body + SUMMARY_CUT)
        after = measure(view)
    return view, task_index, summarised, after


def _clipped(text: str, limit: int, estimator: TokenEstimator) -> str:
    """Return `text`, or its start with a mark saying it was cut, in at most `limit` units."""
    empty = estimator.upper_bound([{"role": "user", "content": ""}], [])

    def size(candidate: str) -> int:
        return estimator.upper_bound([{"role": "user", "content": candidate}], []) - empty

    if size(text) <= limit:
        return text
    while text and size(text + SUMMARY_CUT) > limit:
        over = size(text + SUMMARY_CUT) - limit
        text = text[: max(len(text) - max(over, len(text) // 8), 0)]
    return text + SUMMARY_CUT if text else ""


def _is_summary(messages: list[dict[str, Any]]) -> bool:
    """Return True for a unit that is a handoff summary made by an earlier compaction."""
    return (
        len(messages) == 1
        and messages[0].get("role") == "user"
        and message_text(messages[0]).startswith(HANDOFF_MARK)
    )


def _summary_body(message: dict[str, Any]) -> str:
    """Return an earlier summary's text without its header and the plan it carried."""
    text = message_text(message)
    if text.startswith(HANDOFF_HEADER):
        text = text[len(HANDOFF_HEADER) :]
    elif text.startswith(HANDOFF_MARK):
        text = text[len(HANDOFF_MARK) :]
    return text.split(f"\n\n{PLAN_HEADER}\n", 1)[0].strip()


def _assemble(
    view: list[dict[str, Any]],
    items: list,
    head_end: int,
    request: CompactionRequest,
    dropped: set[int],
    body: str,
) -> tuple[list[dict[str, Any]], int | None, list[int]]:
    """Return the view with the `dropped` units replaced by one summary of `body`.

    Also returns the new task index and the old view indexes the summary replaced. The summary
    comes right after the system head, or right after the task when it covers units after it.
    """
    summary_text = f"{HANDOFF_HEADER}\n{body}"
    if request.plan:
        summary_text += f"\n\n{PLAN_HEADER}\n{request.plan}"
    summary_message = {"role": "user", "content": summary_text}
    units = [item for item in items if isinstance(item, _Unit)]
    task_position = items.index(_TASK) if _TASK in items else len(items)
    covers_progress = any(number >= task_position for number in dropped)
    new_view = list(view[:head_end])
    if not covers_progress:
        new_view.append(summary_message)
    new_task_index = None
    number = 0
    for item in items:
        if item == _TASK:
            new_task_index = len(new_view)
            new_view.append(view[request.task_index])
            if covers_progress:
                new_view.append(summary_message)
            continue
        if number not in dropped:
            new_view.extend(view[item.start : item.end])
        number += 1
    summarised = [i for n in sorted(dropped) for i in range(units[n].start, units[n].end)]
    return new_view, new_task_index, summarised
