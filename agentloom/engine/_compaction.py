"""Compaction: replace older parts of a view with a handoff summary, or leave the view alone.

`BudgetCompactionPolicy` runs an attempt in named steps (methods of `_Attempt`); each either ends
the attempt with its outcome or hands on to the next:

1. `pin` pins the system instructions (leading system messages), the current task and the plan,
   and splits the rest into units: an assistant message with tool calls plus all of its results
   is one unit, never split; any other message is a unit of its own. It keeps (`keep`) the
   longest run of recent units that fits the target (what remains of `target_ratio` after the
   pinned messages and a reserve for the summary). A trigger that only counts turns or steps
   keeps at most half of the material, and skips when what it would summarise is too small to
   gain anything. When the pinned content alone is at or above the trigger, nothing can succeed:
   the attempt is skipped as `pinned_too_large` without a model call.
2. `mask_stage`, with a large-record policy only, makes no model call: the tool results of the
   units `pin` would not keep are masked to one-line references (`request.mask`). When that alone
   brings the view below the trigger, the compaction ends there (`masked`); otherwise the next
   steps run on the masked view, summarising the older units from their unmasked text. Each stage
   reports its own before and after (`details["stages"]`). From compaction version 5
   (`request.mask_batch`), masking goes oldest first: the results of the oldest units are
   masked, one after another, until the view is at the target and the masking freed at least
   the batch, reaching into the kept units (never the newest one) for the batch; when even
   masking all of those frees less than the batch, nothing is masked and the summary stage
   compacts. Masking rewrites the prompt from its first new stub on, so a masking that frees
   little would cost the prompt cache more than it saves. From version 6 (`request.spare_newest`)
   the newest unit is never masked even when no unit is kept: its results are what the model has
   not read yet, and masking them would only make it read them back.
3. `summary_stage` summarises the older units in order, in as many segments as needed (at most
   `max_compaction_calls`), each request sized to fit the effective budget on its own and
   carrying the summary so far. An earlier handoff summary in the view is that summary so far (it
   and everything before it are always summarised), so the result is one summary, never a summary
   inside a summary. A unit too large for one request is cut into ordered text fragments that are
   consumed one after another. Units not fully consumed when the calls run out are kept verbatim.
   Each call's output limit is the room left under the trigger once everything else of the new
   view is placed (`choose_material`); a reply longer than that is cut to it, with a mark
   (`SUMMARY_CUT`). From version 7 (`request.summary_to_target`) the output limit, and what the
   kept-verbatim section may fill, is the room left under the target instead, but no less than
   the summary's reserve (`SUMMARY_RESERVE_SHARE` of the target, set aside by `pin`; a pinned
   head too large for the target leaves less) and no more than the room under the trigger,
   which is still where a longer reply is cut (`ceiling`): a summary that filled the room under
   the trigger (its kept-verbatim section grows with the session) left the view just below the
   trigger, so the session compacted again a few turns later, and every compaction stored a
   summary, a snapshot and a view.
4. `rebuild` builds `[system…, handoff summary, kept units in order]`, where the current task
   keeps its place: right after the summary when everything before it was summarised, otherwise
   after the kept history units that precede it. When the summary also covers the run's own
   progress (units after the task), it comes right after the task instead: `[system…, task,
   summary, kept units]`. The plan is carried verbatim inside the summary message. A view still
   at or above the trigger (a summariser may ignore its output limit) has its summary cut until
   it fits, with the same mark.
5. `check` accepts the result only if it is smaller than before and below the trigger;
   `target_reached` says whether it also reached the target.

From compaction version 3 (`request.prefix_summary`), `summary_stage` first asks for the summary
in one request that is the conversation as last sent — the same messages, the same tools with
`tool_choice: "none"` — followed by the instruction (`PREFIX_INSTRUCTIONS`, which names how many
of the last messages stay as they are), so that a provider's prompt cache serves its prefix. Only
when that request does not fit the budget, or its call fails or answers nothing usable, does the
segmented request above take over, with the calls that are left. The row records which `form`
made the summary.

Under a compaction version that keeps identifiers (`request.kept_verbatim`, version 2 on), the
summary request asks for fixed sections, and `keep_identifiers` (after `summary_stage`) checks the
identifiers of the records the summary replaces against it: those it lost are appended verbatim
with their record references in a bounded "kept verbatim" section, within what is left of the
summary's room (it never turns a summary that fits into a failure), followed by the references
of every record summarised (saying that `read_record` reads them back where the version offers
it, and that `search_history` finds the rest where the instance is offered that too). The
compaction row counts the identifiers found, kept and added.

Every size of an attempt (before, pinned, masked, the summary's room, after) is measured on what
the gateway sends for the view (`request.sent`, its payload), the size the triggers fired on.

An empty summary, a failed or refused call, no reduction or a broken tool-call boundary (in the
view `pin` reads or the one `rebuild` builds) fail the compaction and the old view stays.
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
from agentloom.engine._identifiers import cited, kept_verbatim, section_sources
from agentloom.engine._large import masked
from agentloom.engine._measure import SUMMARY_RESERVE_SHARE
from agentloom.engine._policy import SIZE_TRIGGERS, TriggerPolicy
from agentloom.engine._protocol import (
    HANDOFF_MARK,
    message_text,
    protocol_problems,
    render_message,
    tool_calls_of,
)
from agentloom.engine._search import SEARCH_HISTORY

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
# The sectioned prompt of the versions that keep identifiers.
SECTIONED_INSTRUCTIONS = (
    "You write the handoff summary of an AI agent's earlier context, which no longer fits its "
    "window. Sections: Goals and constraints; Decisions; Artifacts (files, commands, ids); Work "
    "done and results (errors and unknown outcomes too); Open questions; Next step. Keep names, "
    "numbers and identifiers as written. Invent nothing; claim no action succeeded unless the "
    "material shows it. Reply with the summary as plain text."
)
HANDOFF_HEADER = (
    f"{HANDOFF_MARK} Earlier context was compacted into this summary by the system; "
    "it is not a new request."
)
# The compactor's citation line, and what it adds where the version offers `read_record`.
SOURCES_HEADER = "Summarised records: "
READ_BACK_NOTE = " (read_record reads back any record cited in this summary)"
# Where the version also offers `search_history`, the citation says so instead.
SEARCH_NOTE = (
    " (read_record reads back any record cited in this summary; search_history finds anything "
    "else of the session)"
)
PLAN_HEADER = "[current plan, kept as written]"
# The instruction that ends a summary request made on the conversation's own prefix.
PREFIX_MARK = "[summary request]"
PREFIX_INSTRUCTIONS = (
    f"{PREFIX_MARK} This conversation no longer fits the agent's context window. Write the "
    "handoff summary of everything above{except_kept}; fold an earlier handoff summary into "
    "yours. Sections: Goals and constraints; Decisions; Artifacts (files, commands, ids); Work "
    "done and results (errors and unknown outcomes too); Open questions; Next step. Keep names, "
    "numbers and identifiers as written. Invent nothing; claim no action succeeded unless the "
    "conversation shows it. Do not call tools. Reply with the summary as plain text, under "
    "{limit} tokens."
)
PREFIX_EXCEPT = " except its last {kept} messages, which stay as they are after your summary"

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
    # Sends the messages as a `compaction` call with an output limit (estimate units), with the
    # request's tools when asked (and `tool_choice: "none"`), and returns the reply text; raises
    # EngineError (GatewayError, ContextBudgetExceeded, ModelCallLimitReached) when nothing usable
    # came back.
    summarise: Callable[..., str]
    # Returns the one-line stub for the tool result at a view index, or None when it has none;
    # None: no masking stage (versions without a large-record policy).
    mask: Callable[[int], dict[str, Any] | None] | None = None
    # Returns the messages and tool schemas that go on the wire for a view and its tools (the
    # gateway's payload), which every size of the attempt measures, as the triggers do; None:
    # the view itself.
    sent: Callable[[list[dict[str, Any]], list[dict[str, Any]]], tuple[list, list]] | None = None
    # Returns the record reference of the view message at an index (`s:3`, `r2:5`; an earlier
    # summary: the references it summarised), or None; with it, the summary keeps identifiers
    # verbatim and cites its sources (compaction version 2 on). None: version 1.
    reference: Callable[[int], str | None] | None = None
    # Whether the version offers `read_record`, so that the citation may say it reads records back.
    readable: bool = False
    # The summary request is the conversation as sent with the instruction last (version 3 on).
    prefix_summary: bool = False
    # The rules identifiers are found by (`_identifiers`; 2 from compaction version 4).
    identifier_rules: int = 1
    # The least a masking frees, oldest results first (compaction version 5 on: the policy's
    # `mask_batch_at`); None: the results of every unit not kept are masked, as before.
    mask_batch: int | None = None
    # Masking never reaches the newest unit, even when no unit is kept (version 6 on); before,
    # a view that kept no unit had the newest unit's results masked too.
    spare_newest: bool = False
    # The summary is asked for the room left under the target, no less than its reserve, and a
    # longer reply is kept up to the trigger's room (version 7 on); before, it was asked for the
    # trigger's room, so the view came back just below the trigger.
    summary_to_target: bool = False

    @property
    def kept_verbatim(self) -> bool:
        return self.reference is not None

    @property
    def searchable(self) -> bool:
        """Whether the instance is offered `search_history` (its handoff text may name it)."""
        return any(
            (tool.get("function") or {}).get("name") == SEARCH_HISTORY for tool in self.tools
        )


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
# The policy's summariser: (request, texts, summary so far, output limit, calls left, the most a
# reply may keep) -> ((summary, units fully summarised), calls made, failure reason or None).
_Summariser = Callable[
    [CompactionRequest, list[str], str, int, int, int], tuple[tuple[str, int], int, str | None]
]


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
    """Summarise older history in ordered segments and keep recent complete groups."""

    def compact(self, request: CompactionRequest) -> CompactionOutcome:
        """Run one attempt's steps in order; the first that returns an outcome ends it."""
        attempt = _Attempt(request)
        return (
            attempt.pin()
            or attempt.mask_stage()
            or attempt.summary_stage(self._summarise)
            or attempt.keep_identifiers()
            or attempt.rebuild()
            or attempt.check()
        )

    def _summarise(
        self,
        request: CompactionRequest,
        texts: list[str],
        running: str,
        limit: int,
        max_calls: int | None = None,
        ceiling: int | None = None,
    ) -> tuple[tuple[str, int], int, str | None]:
        """Return ((summary, units fully summarised), calls made, failure reason or None).

        `running` is the earlier summary this one updates; `limit` the output limit of each call;
        `max_calls` what is left of the policy's calls (all of them by default); `ceiling` the
        most a reply keeps (`limit` by default).
        """
        estimator, effective = request.estimator, request.budget.effective_input_budget
        if max_calls is None:
            max_calls = request.policy.max_compaction_calls
        material = "\n".join(texts)
        # Summary requests are sized by the upper bound the hard check will apply to them.
        empty = estimator.upper_bound([{"role": "user", "content": ""}], [])
        full = estimator.upper_bound([{"role": "user", "content": material}], [])
        units_per_char = max((full - empty) / max(len(material), 1), 1e-6)
        fragments = _Fragments(texts)
        calls = 0
        sectioned = request.kept_verbatim
        while not fragments.done and calls < max_calls:
            probe = self.summary_messages(running, "", limit, sectioned=sectioned)
            room = effective - estimator.upper_bound(probe, []) - SEGMENT_SLACK
            capacity = int(room / units_per_char)
            for _ in range(_SEGMENT_RETRIES):
                if capacity < MIN_SEGMENT_CHARS:
                    return ("", 0), calls, "summary_request_over_budget"
                segment, position = fragments.take(capacity)
                messages = self.summary_messages(running, segment, limit, sectioned=sectioned)
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
            # A reply over its ceiling is cut to it, so the next request has its room.
            running = _clipped(reply.strip(), ceiling or limit, estimator)
            fragments.advance(position)
        return (running, fragments.piece), calls, None

    @staticmethod
    def summary_messages(
        running: str, segment: str, limit: int | None = None, *, sectioned: bool = False
    ) -> list[dict[str, Any]]:
        """Return the messages of one summary request (`limit`: its output limit; `sectioned`:
        the prompt that asks for fixed sections)."""
        length = f" Keep it under {limit} tokens." if limit is not None else ""
        instructions = SECTIONED_INSTRUCTIONS if sectioned else SUMMARY_INSTRUCTIONS
        return [
            {"role": "system", "content": instructions + length},
            {
                "role": "user",
                "content": (
                    f"Summary so far:\n{running or '(none yet)'}\n\n"
                    f"Next material, in order:\n{segment}\n\n"
                    "Return the updated summary, covering the summary so far and this material."
                ),
            },
        ]


class _Attempt:
    """One compaction attempt: the view it works on and what each step found.

    Each step returns the attempt's outcome when it ends the attempt, or None to go on.
    """

    def __init__(self, request: CompactionRequest):
        self.request = request
        # The view the steps work on: the masking stage replaces it with the masked view.
        self.view = request.messages
        self.before = self.measure(self.view)
        self.trigger_at = request.policy.trigger_at(request.budget)
        self.target_at = request.policy.target_at(request.budget)
        self.stages: list[dict[str, Any]] = []
        self.calls = 0
        # Found by `pin`: the layout, and the recent units kept (from `kept_from` on).
        self.head_end = 0
        self.items: list[_Unit | str] = []
        self.units: list[_Unit] = []
        self.keep_budget = 0
        self.count_only = False
        self.sizes: list[int] = []
        self.kept_from = 0
        self.masked_at: list[int] = []
        # A masked view `mask_batch` did not use (its stubs must outlive the attempt's outcome).
        self.unused: list[dict[str, Any]] = []
        # Found by `summary_stage`: earlier summaries, the units summarised and the summary.
        self.earlier: list[int] = []
        self.material: list[int] = []
        self.room = 0
        self.ceiling = 0
        self.body = ""
        self.consumed = 0
        # How the summary was asked for: `prefix` (the conversation itself) or `segmented`.
        self.form: str | None = None
        # Found by `keep_identifiers`: identifiers found, kept by the summary and added.
        self.identifiers: dict[str, int] | None = None
        # Built by `rebuild`.
        self.new_view: list[dict[str, Any]] = []
        self.new_task_index: int | None = None
        self.summarised: list[int] = []
        self.after = self.before
        self.cut = False

    def measure(self, messages: list[dict[str, Any]]) -> int:
        """Return the size of a view of `messages` with the request's tools, as sent."""
        request = self.request
        tools = request.tools
        if request.sent is not None:
            messages, tools = request.sent(messages, tools)
        return request.policy.measure(messages, tools, request.estimator)

    def outcome(
        self, kind: str, reason: str, *, after: int | None = None, **extra: Any
    ) -> CompactionOutcome:
        """Return the attempt's outcome (`after`: the size of the new view, if any)."""
        after = self.before if after is None else after
        if self.stages:
            # The masking stage was applied; the summary stage decides what is kept.
            extra.setdefault("details", {})["stages"] = [
                {**self.stages[0], "outcome": "applied" if kind == "succeeded" else "discarded"},
                {
                    "stage": "summary",
                    "before": self.stages[0]["after"],
                    "after": after,
                    "calls": self.calls,
                    "outcome": kind,
                    "reason": reason,
                },
            ]
        return CompactionOutcome(
            outcome=kind,
            reason=reason,
            before=self.before,
            after=after,
            target_reached=kind == "succeeded" and after <= self.target_at,
            calls=self.calls,
            triggers=self.request.triggers,
            **extra,
        )

    def pin(self) -> CompactionOutcome | None:
        """Steps 1 to 3: pin the head, task and plan, split the rest into units, keep the recent."""
        request = self.request
        if protocol_problems(self.view):
            return self.outcome("failed", "boundary_violation")
        try:
            self.head_end, self.items = _layout(self.view, request.task_index)
        except ValueError:
            return self.outcome("failed", "boundary_violation")
        self.units = [item for item in self.items if isinstance(item, _Unit)]
        if not self.units:
            return self.outcome("skipped", "nothing_to_compact")
        pinned_size = self.measure(self.pinned())
        if pinned_size >= self.trigger_at:
            # No summary can bring the view below the trigger: spend no call on trying.
            return self.outcome("skipped", "pinned_too_large")
        target_at = self.target_at
        self.keep_budget = target_at - pinned_size - int(target_at * SUMMARY_RESERVE_SHARE)
        self.count_only = not SIZE_TRIGGERS.intersection(request.triggers)
        self.keep()
        return None

    def pinned(self) -> list[dict[str, Any]]:
        """Return the pinned messages: the system head, the task, and the plan as a message."""
        request, view = self.request, self.view
        pinned = view[: self.head_end]
        if request.task_index is not None:
            pinned = [*pinned, view[request.task_index]]
        if request.plan:
            pinned = [*pinned, {"role": "user", "content": f"{PLAN_HEADER}\n{request.plan}"}]
        return pinned

    def keep(self) -> None:
        """Step 3: measure each unit and find the first of the longest recent run that is kept."""
        policy, estimator = self.request.policy, self.request.estimator
        view, units = self.view, self.units
        self.sizes = [policy.measure(view[u.start : u.end], [], estimator) for u in units]
        keep_budget = self.keep_budget
        if self.count_only:
            keep_budget = min(keep_budget, sum(self.sizes) // 2)
        kept_from, kept_size = len(units), 0
        while kept_from > 0 and kept_size + self.sizes[kept_from - 1] <= keep_budget:
            kept_from -= 1
            kept_size += self.sizes[kept_from]
        self.kept_from = kept_from

    def mask_stage(self) -> CompactionOutcome | None:
        """Mask the tool results of the units not kept; end with `masked` when that is enough."""
        request = self.request
        if request.mask is None or self.count_only:
            return None
        if request.mask_batch is None:
            masked_view, self.masked_at = _masked(request, self.view, self.units[: self.kept_from])
        else:
            masked_view, self.masked_at = self.mask_batch(request.mask_batch)
        if not self.masked_at:
            return None
        masked_size = self.measure(masked_view)
        self.stages.append(
            {"stage": "masking", "before": self.before, "after": masked_size, "calls": 0}
        )
        if masked_size < self.before and masked_size < self.trigger_at:
            self.stages.clear()
            return self.outcome(
                "succeeded",
                "masked",
                after=masked_size,
                messages=masked_view,
                task_index=request.task_index,
                details={"stage": "masking", "masked": self.masked_at, "summarised": []},
            )
        self.view = masked_view
        self.keep()
        return None

    def mask_batch(self, batch: int) -> tuple[list[dict[str, Any]], list[int]]:
        """Return the view masked oldest first, and where (nothing when it frees below `batch`).

        Masks until the view is at the target and at least `batch` is freed, over the units not
        kept and then the kept ones but the newest; from version 6 (`spare_newest`) never the
        newest, also when no unit is kept.
        """
        request, view = self.request, self.view
        policy, estimator = request.policy, request.estimator
        goal = max(self.before - self.target_at, batch)
        masked_view = list(view)
        masked_at: list[int] = []
        freed = 0
        reach = max(self.kept_from, len(self.units) - 1)
        if request.spare_newest:
            reach = len(self.units) - 1
        for unit in self.units[:reach]:
            for index in range(unit.start, unit.end):
                stub = request.mask(index)  # type: ignore[misc]
                if stub is None:
                    continue
                masked_view[index] = stub
                masked_at.append(index)
                freed += policy.measure([view[index]], [], estimator) - policy.measure(
                    [stub], [], estimator
                )
                if freed >= goal:
                    # Counted message by message; the view as sent says what was freed.
                    freed = self.before - self.measure(masked_view)
                    if freed >= goal:
                        return masked_view, masked_at
        # The stubs stay alive with the attempt: the context knows each by its identity, which a
        # message made later in the attempt must not take over.
        self.unused = masked_view
        if self.before - self.measure(masked_view) < batch:
            return list(view), []
        return masked_view, masked_at

    def summary_stage(self, summarise: _Summariser) -> CompactionOutcome | None:
        """Step 4: choose the material and its room, then summarise it with `summarise`."""
        ended = self.choose_material()
        if ended is not None:
            return ended
        failure = None
        if self.request.prefix_summary:
            failure = self.prefix_summary()
            if failure is None:
                return None
        left = self.request.policy.max_compaction_calls - self.calls
        if failure is not None and left <= 0:
            return self.outcome("failed", failure)
        # Summaries read the units as they were before masking; an earlier summary is the
        # summary so far.
        original, units = self.request.messages, self.units
        texts = [
            "\n".join(render_message(m) for m in original[units[n].start : units[n].end])
            for n in self.material
        ]
        running = "\n\n".join(_summary_body(self.view[units[n].start]) for n in self.earlier)
        summary, calls, failure = summarise(
            self.request, texts, running, self.room, left, self.ceiling
        )
        self.calls += calls
        self.form = "segmented"
        if failure:
            return self.outcome("failed", failure)
        self.body, self.consumed = summary
        # Cut to its ceiling as it was made (a kept section and the citation follow the mark).
        self.cut = self.body.endswith(SUMMARY_CUT)
        return None

    def prefix_summary(self) -> str | None:
        """Summarise in one request: the conversation as last sent, then the instruction.

        The request's messages and tools are the conversation's own, so a provider's prompt
        cache serves all but the instruction. Returns None when it made the summary (`form` is
        `prefix`), else why not, for the segmented request to take over: it does not fit the
        budget (no call made), or the call failed or answered nothing usable.
        """
        request, units = self.request, self.units
        if not self.material:
            return "nothing_to_send"
        kept = len(request.messages) - units[self.material[-1]].end
        instruction = PREFIX_INSTRUCTIONS.format(
            except_kept=PREFIX_EXCEPT.format(kept=kept) if kept else "", limit=self.room
        )
        messages = [*request.messages, {"role": "user", "content": instruction}]
        try:
            reply = request.summarise(messages, self.room, True)
        except LeaseLostError:
            raise
        except ContextBudgetExceeded:
            return "prefix_request_over_budget"
        except ModelCallLimitReached:
            return "model_call_limit_reached"
        except GatewayError as exc:
            self.calls += 1
            return f"gateway_error: {exc.kind}"
        except EngineError as exc:
            self.calls += 1
            return f"summary_refused: {type(exc).__name__}"
        self.calls += 1
        text = reply.strip()
        if not text:
            return "empty_summary"
        self.body = _clipped(text, self.ceiling, request.estimator)
        self.cut = self.body.endswith(SUMMARY_CUT)
        self.consumed = len(self.material)
        self.form = "prefix"
        return None

    def keep_identifiers(self) -> CompactionOutcome | None:
        """Append what the summary lost of its sources' identifiers, and cite the sources.

        The section takes what is left of the summary's room once the summary is placed, and
        shrinks until it fits and the new view is still smaller than the old one (to nothing when
        no room is left): it never fails an attempt that would succeed without it. The citation
        needs only to fit under the ceiling (a longer summary kept whole still cites).
        """
        request = self.request
        reference = request.reference
        if reference is None:
            return None
        sources, carried, background, cited_refs = self._identifier_sources(reference)
        body, estimator = self.body, request.estimator

        def fits(text: str, room: int) -> bool:
            # Within `room`, and the new view still smaller than the old one.
            if _units(text, estimator) > room:
                return False
            return self.measure(self.assemble(text, self.consumed)[0]) < self.before

        footer = f"\n\n{SOURCES_HEADER}{cited(cited_refs)}" if cited_refs else ""
        if footer and request.readable:
            footer += SEARCH_NOTE if request.searchable else READ_BACK_NOTE
        if not fits(body + footer, self.ceiling):
            footer = ""  # no room left even for the citation: the summary stays as it is
        limit = max(self.room - _units(body + footer, estimator) - SEGMENT_SLACK, 0)
        for _ in range(_SEGMENT_RETRIES):
            kept = kept_verbatim(
                body,
                sources,
                limit,
                carried=carried,
                background=background,
                rules=request.identifier_rules,
            )
            section = f"\n\n{kept.section}" if kept.section else ""
            # Measured as sent: a character may take more than one unit (Chinese text).
            if not section or fits(body + section + footer, self.room):
                break
            limit = int(limit * 0.6)
        else:
            kept = kept_verbatim(
                body,
                sources,
                0,
                carried=carried,
                background=background,
                rules=request.identifier_rules,
            )
            section = ""
        self.body = body + section + footer
        self.identifiers = {"found": kept.found, "kept": kept.kept, "added": kept.added}
        return None

    def _identifier_sources(self, reference: Callable[[int], str | None]):
        """Return what `keep_identifiers` checks: the summarised records' (reference, text), the
        kept lines of earlier summaries, those summaries' own text, and every reference cited."""
        original, units = self.request.messages, self.units
        sources: list[tuple[str, str]] = []
        carried: list[tuple[str, str, str]] = []
        background: list[tuple[str, str]] = []
        cited_refs: list[str] = []
        for n in sorted({*self.earlier, *self.material[: self.consumed]}):
            for index in range(units[n].start, units[n].end):
                ref = reference(index)
                if ref is None:
                    continue
                cited_refs.append(ref)
                if n in self.earlier:
                    # An earlier summary: its kept lines keep their own references.
                    prose, kept = section_sources(_summary_body(self.view[index]))
                    carried.extend(kept)
                    background.append((ref, prose))
                elif message_text(original[index]) != masked(ref):
                    # A result an earlier stage masked was not in the material: its stub names
                    # nothing but the reference, which the citation holds.
                    sources.append((ref, _source_text(original[index])))
        return sources, carried, background, cited_refs

    def choose_material(self) -> CompactionOutcome | None:
        """Choose the units to summarise, the room a summary is asked to fit (under the trigger;
        from version 7, under the target but no less than its reserve) and the most it may take
        (`ceiling`, under the trigger)."""
        if self.kept_from == 0:
            return self.outcome("skipped", "nothing_to_compact")
        view, units = self.view, self.units
        # An earlier summary is updated, never nested: it is summarised with what precedes it.
        self.earlier = [
            n for n, unit in enumerate(units) if _is_summary(view[unit.start : unit.end])
        ]
        if self.earlier:
            self.kept_from = max(self.kept_from, self.earlier[-1] + 1)
        self.material = [n for n in range(self.kept_from) if n not in self.earlier]
        if self.count_only and sum(self.sizes[: self.kept_from]) < MIN_COUNT_TRIGGER_GAIN:
            return self.outcome("skipped", "no_gain")
        # A summary may take what is left under the trigger once everything else is placed.
        # It is asked for that much, and its kept-verbatim section fills it; from version 7,
        # for what is left under the target (no less than the reserve `pin` set aside for it,
        # which a head too large for the target does not leave), and a longer reply is still
        # kept whole up to the trigger's room.
        skeleton = self.measure(self.assemble("", len(self.material))[0])
        self.room = self.ceiling = self.trigger_at - 1 - skeleton
        if self.request.summary_to_target:
            reserve = int(self.target_at * SUMMARY_RESERVE_SHARE)
            self.room = min(self.ceiling, max(self.target_at - 1 - skeleton, reserve))
        if self.room < MIN_SUMMARY_ROOM:
            return self.outcome("failed", "no_room_for_summary")
        return None

    def assemble(
        self, body: str, consumed: int
    ) -> tuple[list[dict[str, Any]], int | None, list[int]]:
        """Return the view with earlier summaries and the first `consumed` units as `body`."""
        dropped = {*self.earlier, *self.material[:consumed]}
        return _assemble(self.view, self.items, self.head_end, self.request, dropped, body)

    def rebuild(self) -> CompactionOutcome | None:
        """Step 5: build the new view around the summary, cut to fit when it is too long."""
        body, consumed = self.body, self.consumed
        self.new_view, self.new_task_index, self.summarised = self.assemble(body, consumed)
        if protocol_problems(self.new_view):
            return self.outcome("failed", "boundary_violation")
        self.after = self.measure(self.new_view)
        if self.after >= self.trigger_at:
            # Longer than its room (a summariser may ignore its output limit): cut to fit.
            self.new_view, self.new_task_index, self.summarised, self.after = _cut_to_fit(
                lambda text: self.assemble(text, consumed), self.measure, body, self.trigger_at
            )
            self.cut = True
        return None

    def check(self) -> CompactionOutcome:
        """Accept the new view only when it is smaller than before and below the trigger."""
        after = self.after
        if after >= self.before:
            return self.outcome("failed", "no_reduction", after=after)
        if after >= self.trigger_at:
            return self.outcome("failed", "above_trigger", after=after)
        summarised_units = len(self.earlier) + self.consumed
        reason = "compacted" if self.consumed == len(self.material) else "compacted_partly"
        return self.outcome(
            "succeeded",
            reason,
            after=after,
            messages=self.new_view,
            task_index=self.new_task_index,
            details={
                "stage": "summary",
                "summarised_units": summarised_units,
                "kept_units": len(self.units) - summarised_units,
                "summary_room": self.room,
                "summary_cut": self.cut,
                # Where in the old view the summarised and the (still shown) masked messages
                # were, for exact source ranges.
                "summarised": self.summarised,
                "masked": sorted(set(self.masked_at) - set(self.summarised)),
                **({"identifiers": self.identifiers} if self.identifiers is not None else {}),
                **({"form": self.form} if self.request.prefix_summary else {}),
            },
        )


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
    if _units(text, estimator) <= limit:
        return text
    while text and _units(text + SUMMARY_CUT, estimator) > limit:
        over = _units(text + SUMMARY_CUT, estimator) - limit
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
    text = text.split(f"\n\n{PLAN_HEADER}\n", 1)[0]
    # The compactor's citations are made anew by the next compaction, from its own sources.
    return text.split(f"\n\n{SOURCES_HEADER}", 1)[0].strip()


def _source_text(message: dict[str, Any]) -> str:
    """Return what a message says, for its identifiers: its text and the calls it makes (tool
    names and arguments), without the call ids that only pair calls with results."""
    functions = [call.get("function") or {} for call in tool_calls_of(message)]
    calls = [f"{function.get('name')}({function.get('arguments')})" for function in functions]
    return "\n".join([message_text(message), *calls]).strip()


def _units(text: str, estimator: TokenEstimator) -> int:
    """Return the size of `text` as a summary's output, in the estimator's units."""
    empty = estimator.upper_bound([{"role": "user", "content": ""}], [])
    return estimator.upper_bound([{"role": "user", "content": text}], []) - empty


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
