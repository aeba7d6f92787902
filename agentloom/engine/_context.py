"""The context manager: sources, the model-visible view and execution state of one instance.

`JournalContextManager` appends every record to the instance's sources and mirrors it into the
view under these rules:

- a tool result is kept whole in its record; the view shows at most its first 24,000 characters
  followed by a marker saying how many were cut — or, under a large-record policy (`large`), a
  head-and-tail excerpt with its reference when it is too large for its share of the budget;
  `read_record` reads such records back;
- nothing is placed between a tool call and its results: feedback that arrives while a tool group
  is open waits in `state.deferred_messages`, and supplements wait in `state.queued_supplements`
  until the group is complete;
- feedback shows as a user message starting `[feedback] `; a supplement as a user message;
  status records are not shown; a run-status note ("run stopped: …") is feedback shown on the
  assistant side (`[run note] …`), so it is never read as the user's latest request;
- the plan (`set_plan`, the `update_plan` tool) is capped at `measure.plan_reserve`; a longer
  plan is refused; from rendering 4 a new instance starts with the plan its inherited history
  last set (`ProjectedHistory.plan`);
- the verification request shows the most recent complete evidence groups that fit the
  effective budget, oldest dropped first (with a note saying how many), before its hard check;
- `prepare("action")` compacts when a trigger holds; every request (action, compaction,
  verification) is checked against the effective budget and is not sent when it is over it;
- after a failed compaction, retries the trigger wants wait for growth (in the trigger's unit) or
  model steps (`THROTTLE_*`), logged as `throttled` attempts; a request over the hard budget is
  never throttled, since it could not be sent without its compaction;
- compaction works in stages: with a large-record policy, older tool results are first masked to
  one-line references (no model call); a summary follows only when that is not enough. Each stage
  is logged with its own before and after. From compaction version 5 a masking frees at least the
  policy's batch (`mask_batch_at`), oldest results first, or does not happen.

Every message is redacted before it is recorded or shown.
"""

from __future__ import annotations

import abc
import bisect
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any

from agentloom.engine._budget import (
    BoundMeasure,
    JsonBytesEstimator,
    ModelBudget,
    TokenEstimator,
    budget_refusal,
)
from agentloom.engine._calibration import CalibratedEstimator
from agentloom.engine._clock import Clock, iso_utc, system_clock
from agentloom.engine._compaction import (
    BudgetCompactionPolicy,
    CompactionOutcome,
    CompactionPolicy,
    CompactionRequest,
)
from agentloom.engine._compaction_versions import Compaction, compaction_binding, compaction_named
from agentloom.engine._errors import (
    ConfigurationError,
    ContextBudgetExceeded,
    EngineError,
    ToolError,
)
from agentloom.engine._frame import ExecutionState, InstanceFrame, ManagedContext, block_origins
from agentloom.engine._gate import sent_request
from agentloom.engine._gateway import PURPOSES, ModelRequest, ModelResponse
from agentloom.engine._identifiers import cited
from agentloom.engine._large import LargeRecords, RecordSizer, masked, parse_ref, run_ref
from agentloom.engine._measure import input_size, measure_context, plan_reserve, step_measure
from agentloom.engine._policy import TRIGGER_BUDGET, TriggerPolicy, load_policy
from agentloom.engine._projection import ProjectedHistory
from agentloom.engine._protocol import (
    FEEDBACK_PREFIX,
    TOOL_RESULT_VIEW_CHARS,
    UNKNOWN_RESULT,
    clean_assistant_message,
    message_text,
    place_run_note,
    protocol_problems,
    render_message,
    run_note,
    tool_calls_of,
)
from agentloom.engine._ranges import union_ranges
from agentloom.engine._records import (
    MAIN_INSTANCE,
    USER_INPUT_KEY,
    Counters,
    Record,
    assistant_key,
    feedback_key,
    status_key,
    supplement_key,
    tool_key,
)
from agentloom.engine._redaction import Redactor
from agentloom.engine._refs import (
    LARGE_KEYS,
    TOOL_DETAIL,
    Origin,
    RecordStore,
    materialize,
)
from agentloom.engine._rendering import Rendering, rendering_binding, rendering_named
from agentloom.engine._search import (
    UNMEASURED_RESULT_CHARS,
    Hit,
    SearchQuery,
    rank,
    render_hits,
    searchable_text,
)
from agentloom.engine._server_count import fallback_note, server_estimator_of
from agentloom.engine._usage import add_usage

__all__ = [
    "THROTTLE_GROWTH_SHARE",
    "THROTTLE_STEPS",
    "VERIFIER_INSTRUCTIONS",
    "CallModel",
    "ContextBinding",
    "ContextManager",
    "ContextOptions",
    "JournalContextManager",
    "PreparedContext",
]

CallModel = Callable[[ModelRequest], ModelResponse]

# After a failed compaction (or one skipped as pinned_too_large) the next attempt waits until the
# view has grown by this share of the effective budget, or until this many model steps have been
# taken: a retry on an unchanged view would fail the same way and pay for its calls again.
THROTTLE_GROWTH_SHARE = 0.1
THROTTLE_STEPS = 4

VERIFIER_INSTRUCTIONS = (
    "You check whether an AI agent's candidate answer completes the task, using only the "
    "evidence shown. Reply PASS if it does. Otherwise reply FAIL: followed by the reason."
)


@dataclass(frozen=True)
class PreparedContext:
    """A request ready to send, or the reason it must not be sent."""

    request: ModelRequest | None
    estimate: int
    stop_reason: str | None = None
    compaction: CompactionOutcome | None = None


class ContextManager(abc.ABC):
    """Creates or restores an instance's context, records what happens and prepares requests."""

    @abc.abstractmethod
    def create(
        self,
        *,
        instance: str,
        system_prompt: str,
        task: str,
        run_number: int,
        attempt: int,
        history: ProjectedHistory | None = None,
    ) -> None:
        """Start a new instance context: system message, inherited history, the task."""

    @abc.abstractmethod
    def restore(self, frame: InstanceFrame) -> None:
        """Continue an instance from its checkpoint frame."""

    @property
    @abc.abstractmethod
    def frame(self) -> InstanceFrame:
        """Return the instance's checkpoint frame."""

    @property
    @abc.abstractmethod
    def managed(self) -> ManagedContext:
        """Return the view and the execution state."""

    @abc.abstractmethod
    def add_assistant(self, message: dict[str, Any]) -> Record:
        """Record an action response (one model step); its tool calls open a tool group."""

    @abc.abstractmethod
    def add_tool_result(
        self, call_id: str, content: str, *, detail: dict[str, Any] | None = None
    ) -> Record:
        """Record the complete result of a pending tool call (`detail`: kept, never shown)."""

    @abc.abstractmethod
    def add_feedback(self, text: str) -> Record:
        """Record execution feedback and show it once no tool group is open."""

    def add_run_note(self, text: str) -> Record:
        """Record a run-status note (stopped, cancelled); by default plain feedback."""
        return self.add_feedback(text)

    @abc.abstractmethod
    def add_status(self, status: str, error: str | None) -> Record:
        """Record the terminal state of this execution."""

    @abc.abstractmethod
    def queue_supplement(self, source_key: str, text: str) -> None:
        """Hold a supplement taken from the queue until the next safe point."""

    @abc.abstractmethod
    def accept_supplements(self) -> list[Record]:
        """Record and show the queued supplements if no tool group is open."""

    @abc.abstractmethod
    def settle_pending(self) -> list[Record]:
        """Answer every pending tool call with an `unknown` result; never re-execute it."""

    def apply_budget(self, budget: ModelBudget) -> None:  # noqa: B027 - optional, no-op default
        """Measure against `budget` from now on: a window the run learned from a refusal.

        A manager that keeps a budget writes it into its checkpoint's binding, so a resume and a
        replay see what the run saw. The default keeps nothing: the retried request is refused
        again and the run ends with the server's refusal.
        """

    @abc.abstractmethod
    def prepare(
        self,
        purpose: str,
        *,
        tools: list[dict[str, Any]] | None = None,
        call_model: CallModel | None = None,
        candidate_answer: str | None = None,
        messages: list[dict[str, Any]] | None = None,
    ) -> PreparedContext:
        """Return the request for `purpose`, or why it must not be sent."""


@dataclass(frozen=True)
class ContextBinding:
    """What a context is measured and rendered with: what its checkpoint is bound to.

    `policy` (a `TriggerPolicy`, a policy dict, or None for the legacy policy) and `budget` (a
    `ModelBudget` or its dict) say when to compact and how much room there is; `estimator`
    measures requests; `large_records` (a `LargeRecords` or its dict, None: off) shows records
    too large for their share as excerpts; `rendering` (a `Rendering` or a version, None: the
    current one) is how views are made; `compaction` (a `Compaction` or a version, None: the
    current one) is the procedure that compacts.
    """

    policy: TriggerPolicy | Mapping[str, Any] | None
    budget: ModelBudget | Mapping[str, Any]
    estimator: TokenEstimator = field(default_factory=JsonBytesEstimator)
    large_records: LargeRecords | Mapping[str, Any] | None = None
    rendering: Rendering | int | None = None
    compaction: Compaction | int | None = None

    def __post_init__(self) -> None:
        policy, budget = self.policy, self.budget
        if not isinstance(policy, TriggerPolicy):
            policy = load_policy(dict(policy) if policy is not None else None)
        if not isinstance(budget, ModelBudget):
            budget = ModelBudget.from_dict(dict(budget))
        rendering = self.rendering
        if not isinstance(rendering, Rendering):
            rendering = rendering_named(rendering)  # an unknown version fails here, not mid-run
        object.__setattr__(self, "policy", policy)
        object.__setattr__(self, "budget", budget)
        object.__setattr__(self, "large_records", LargeRecords.from_config(self.large_records))
        object.__setattr__(self, "rendering", rendering)
        compaction = self.compaction
        if not isinstance(compaction, Compaction):
            compaction = compaction_named(compaction)
        object.__setattr__(self, "compaction", compaction)


# The span of one operation (`EngineHooks.span`): called with its kind and what is known as it
# starts, it is entered for as long as the operation lasts and yields a dict for what is known
# only at its end.
SpanHook = Callable[[str, dict[str, Any]], AbstractContextManager[dict[str, Any]]]


class _Unspanned:
    """The span of an engine without a `span` hook: nothing, a new dict each time."""

    __slots__ = ()

    def __enter__(self) -> dict[str, Any]:
        return {}

    def __exit__(self, *exc: object) -> None:
        return None


_UNSPANNED = _Unspanned()


def unspanned(kind: str, facts: dict[str, Any]) -> AbstractContextManager[dict[str, Any]]:
    """Open no span (an engine without a `span` hook)."""
    return _UNSPANNED


@dataclass(frozen=True)
class ContextOptions:
    """What a context manager works with besides its binding; each has a default.

    `compaction_policy` compacts (default `BudgetCompactionPolicy`); `clock` stamps records;
    `redactor` removes secrets; `record_store` is where records referred to are read back;
    `payload` is what goes on the wire for a request (the gateway's): what is measured;
    `tool_result_chars` is the most of one tool result a view shows; `span` opens the span of
    each compaction attempt around its work (`EngineHooks.span`).
    """

    compaction_policy: CompactionPolicy | None = None
    clock: Clock = system_clock
    redactor: Redactor | None = None
    record_store: RecordStore | None = None
    payload: Callable[[ModelRequest], dict[str, Any]] | None = None
    tool_result_chars: int = TOOL_RESULT_VIEW_CHARS
    span: SpanHook | None = None


class JournalContextManager(ContextManager):
    """Keeps append-only records beside a view that may be replaced by a validated compaction."""

    def __init__(self, binding: ContextBinding, options: ContextOptions | None = None):
        options = options or ContextOptions()
        self.policy = binding.policy
        # What goes on the wire for a request (the gateway's `payload`): what is measured.
        self.payload = options.payload
        self.rendering = binding.rendering
        self.compaction = binding.compaction
        self.budget = binding.budget
        self.estimator = binding.estimator
        self.compaction_policy = options.compaction_policy or BudgetCompactionPolicy()
        self.clock = options.clock
        self.redactor = options.redactor or Redactor()
        self.tool_result_chars = options.tool_result_chars
        self.large_records = binding.large_records
        self.record_store = options.record_store
        self.span = options.span or unspanned
        self._sizer: RecordSizer | None = None
        # Stubs made by the masking stage of the compaction under way, with their origins.
        self._masks: dict[int, dict[str, Any]] = {}
        self._frame: InstanceFrame | None = None
        # Indexes over the records, so appending stays cheap on long instances.
        self._keys: set[str] = set()
        self._kinds: dict[str, int] = {}

    # -- lifecycle -------------------------------------------------------------------------

    def binding(self) -> dict[str, Any]:
        """Return the policy, budget and estimator this context is measured with, the rendering
        version its views are made with and the compaction version it compacts with."""
        binding = {
            "policy": self.policy.bound(),
            "budget": self.budget.to_dict(),
            "estimator": self.estimator.binding(),
        }
        if isinstance(self.estimator, CalibratedEstimator):
            binding["calibration"] = {"samples": self.estimator.calibration.keep}
        if self.large_records is not None:
            binding["large_records"] = self.large_records.to_dict()
        binding.update(rendering_binding(self.rendering))
        binding.update(compaction_binding(self.compaction))
        return binding

    def create(
        self,
        *,
        instance: str,
        system_prompt: str,
        task: str,
        run_number: int,
        attempt: int,
        history: ProjectedHistory | None = None,
    ) -> None:
        history = history or ProjectedHistory()
        inherited = self.redactor.value(list(history.messages))
        problems = protocol_problems(inherited)
        if problems:
            raise ConfigurationError("history", f"breaks the tool-call protocol: {problems[0]}")
        system = {"role": "system", "content": self.redactor.text(system_prompt)}
        # History projected from the journal is stored as one reference to its block.
        origins = block_origins(history.origins) if history.from_journal else []
        self._frame = InstanceFrame(
            instance=instance,
            messages=[system, *inherited],
            origins=[None, *origins],
            history=history.block() if history.from_journal else None,
            state=ExecutionState(
                run_number=run_number,
                attempt=attempt,
                # The plan the inherited history last set (rendering 4; `inherited_plan`).
                plan=(
                    self.redactor.text(history.plan)
                    if history.plan and self.rendering.inherits_plan
                    else None
                ),
                calibration=(
                    self.estimator.calibration.to_dict()
                    if isinstance(self.estimator, CalibratedEstimator)
                    else None
                ),
            ),
            counters=Counters(
                user_turns=history.user_turns,
                model_steps=history.model_steps,
                baseline_user_turns=history.baseline_user_turns,
                baseline_model_steps=history.baseline_model_steps,
            ),
            inherited_watermark=history.watermark,
            binding=self.binding(),
        )
        self._index_records()
        self._frame.state.task_index = len(self._frame.messages)
        message = {"role": "user", "content": self.redactor.text(task)}
        record = self._append("user_input", message, USER_INPUT_KEY)
        self._frame.counters.user_turns += 1
        self._show(message, {"own": record.seq})

    def restore(self, frame: InstanceFrame) -> None:
        self._frame = frame
        self._index_records()
        # A frame saved by older code may end in calls that state does not list as pending.
        if not frame.state.pending_tool_calls:
            frame.state.pending_tool_calls = self._unanswered_calls(frame.messages)

    @property
    def opened(self) -> bool:
        """Return whether the context has been created or restored (`frame` raises until then)."""
        return self._frame is not None

    @property
    def frame(self) -> InstanceFrame:
        if self._frame is None:
            raise EngineError("the context has not been created or restored")
        return self._frame

    @property
    def managed(self) -> ManagedContext:
        return ManagedContext(messages=self.frame.messages, state=self.frame.state)

    @property
    def has_open_group(self) -> bool:
        return bool(self.frame.state.pending_tool_calls)

    # -- records ---------------------------------------------------------------------------

    def _index_records(self) -> None:
        self._keys = {record.entry_key for record in self.frame.records}
        self._kinds = {}
        for record in self.frame.records:
            self._kinds[record.kind] = self._kinds.get(record.kind, 0) + 1

    def _append(self, kind: str, message: dict[str, Any], entry_key: str) -> Record:
        frame = self.frame
        if entry_key in self._keys:
            raise EngineError(f"entry key {entry_key!r} is already used in {frame.instance}")
        seq = frame.records[-1].seq + 1 if frame.records else 1
        record = Record(seq, kind, message, entry_key, iso_utc(self.clock()))
        frame.add_record(record)
        self._keys.add(entry_key)
        self._kinds[kind] = self._kinds.get(kind, 0) + 1
        return record

    def _count(self, kind: str) -> int:
        return self._kinds.get(kind, 0)

    def _show(self, message: dict[str, Any], origin: Origin = None) -> None:
        state = self.frame.state
        if state.waiting_notes:
            shown = place_run_note(state.waiting_notes, message, group_open=self.has_open_group)
            state.waiting_notes = [seq for seq in state.waiting_notes if seq not in shown]
            for seq in shown:
                self.frame.show(self._record(seq).message, {"own": seq})
        self.frame.show(message, origin)

    def _record(self, seq: int) -> Record:
        records = self.frame.records
        return records[bisect.bisect_left(records, seq, key=lambda r: r.seq)]

    def add_assistant(self, message: dict[str, Any]) -> Record:
        if self.has_open_group:
            raise EngineError("a new model step cannot start before every tool call has a result")
        frame, state = self.frame, self.frame.state
        step = self._count("assistant") + 1
        cleaned = clean_assistant_message(
            self.redactor.value(message), keep_reasoning=self.rendering.keeps_reasoning
        )
        # Ids are assigned here so they are unique in the session, whatever the provider sent.
        prefix = f"r{state.run_number}" if frame.instance == MAIN_INSTANCE else f"r{frame.instance}"
        for number, call in enumerate(cleaned.get("tool_calls") or [], start=1):
            call["id"] = f"{prefix}-{step}-{number}"
        record = self._append("assistant", cleaned, assistant_key(step))
        frame.counters.model_steps += 1
        self._show(cleaned, {"own": record.seq})
        state.pending_tool_calls = [
            {
                "id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
            }
            for call in tool_calls_of(cleaned)
        ]
        state.call_boundary = record.seq if state.pending_tool_calls else None
        return record

    def add_tool_result(
        self, call_id: str, content: str, *, detail: dict[str, Any] | None = None
    ) -> Record:
        state = self.frame.state
        if call_id not in {call["id"] for call in state.pending_tool_calls}:
            raise EngineError(f"tool call {call_id!r} is not pending")
        message = {"role": "tool", "tool_call_id": call_id, "content": self.redactor.text(content)}
        if detail is not None:
            message[TOOL_DETAIL] = self.redactor.value(detail)
        record = self._append("tool_result", message, tool_key(call_id))
        origin: dict[str, Any] = {"own": record.seq, "cap": self.tool_result_chars}
        sizer = self.sizer
        if sizer is not None:
            ref = self.ref(record.seq)
            chars = sizer.excerpt_chars(message["content"], ref)
            if chars is not None:
                origin = {"own": record.seq, "ex": chars, "ref": ref}
        self._show(materialize(origin, message), origin)
        state.pending_tool_calls = [c for c in state.pending_tool_calls if c["id"] != call_id]
        if not state.pending_tool_calls:
            state.call_boundary = None
            deferred, state.deferred_messages = state.deferred_messages, []
            for waiting in deferred:
                self._show(waiting)
        return record

    def add_feedback(self, text: str) -> Record:
        message = {"role": "user", "content": FEEDBACK_PREFIX + self.redactor.text(text)}
        return self._add_feedback_message(message)

    def add_run_note(self, text: str) -> Record:
        """Record a run-status note as feedback, shown where the rendering places it.

        Never in the user's voice; under rendering 2 a system message that waits for the next
        message (`place_run_note`), so no request ends with it.
        """
        message = run_note(self.redactor.text(text), role=self.rendering.note_role)
        if not self.rendering.notes_wait:
            return self._add_feedback_message(message)
        record = self._append("feedback", message, feedback_key(self._count("feedback") + 1))
        self.frame.state.waiting_notes = [*self.frame.state.waiting_notes, record.seq]
        return record

    def _add_feedback_message(self, message: dict[str, Any]) -> Record:
        record = self._append("feedback", message, feedback_key(self._count("feedback") + 1))
        if self.has_open_group:
            self.frame.state.deferred_messages = [*self.frame.state.deferred_messages, message]
        else:
            self._show(message, {"own": record.seq})
        return record

    def add_status(self, status: str, error: str | None) -> Record:
        state = self.frame.state
        error = self.redactor.text(error) if error else error
        key = status_key(state.attempt)
        number = 2
        # Resuming twice under one attempt number must not make the journal drop a state.
        while key in self._keys:
            key, number = f"{status_key(state.attempt)}.{number}", number + 1
        record = self._append("status", {"status": status, "error": error}, key)
        state.terminal = {"status": status, "error": error}
        return record

    def queue_supplement(self, source_key: str, text: str) -> None:
        state = self.frame.state
        journaled = supplement_key(source_key) in self._keys
        queued = any(item["source_key"] == source_key for item in state.queued_supplements)
        # The queue may hand the same item out twice (a crash before it was marked consumed).
        if not journaled and not queued:
            item = {"source_key": source_key, "text": self.redactor.text(text)}
            state.queued_supplements = [*state.queued_supplements, item]

    def accept_supplements(self) -> list[Record]:
        state = self.frame.state
        if self.has_open_group or not state.queued_supplements:
            return []
        accepted = []
        queued, state.queued_supplements = state.queued_supplements, []
        for item in queued:
            message = {"role": "user", "content": item["text"]}
            record = self._append("supplement", message, supplement_key(item["source_key"]))
            accepted.append(record)
            self._show(message, {"own": record.seq})
        return accepted

    def settle_pending(self) -> list[Record]:
        return [
            self.add_tool_result(call["id"], UNKNOWN_RESULT)
            for call in list(self.frame.state.pending_tool_calls)
        ]

    @staticmethod
    def _unanswered_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        start = len(messages)
        while start > 0 and messages[start - 1].get("role") == "tool":
            start -= 1
        if start == 0:
            return []
        answered = {m.get("tool_call_id") for m in messages[start:]}
        return [
            {
                "id": str(call.get("id")),
                "name": (call.get("function") or {}).get("name"),
                "arguments": (call.get("function") or {}).get("arguments"),
            }
            for call in tool_calls_of(messages[start - 1])
            if call.get("id") not in answered
        ]

    # -- large records ---------------------------------------------------------------------

    @property
    def sizer(self) -> RecordSizer | None:
        """Return what measures records against the large-record limit (None: no policy)."""
        if self.large_records is None:
            return None
        if self._sizer is None:
            estimator = getattr(self.estimator, "bound_estimator", self.estimator)
            self._sizer = RecordSizer(self.large_records.limit(self.budget), estimator)
        return self._sizer

    def ref(self, seq: int) -> str:
        """Return the reference of this instance's own record `seq`."""
        return run_ref(self.frame.state.run_number, self.frame.instance, seq)

    def holds_references(self) -> bool:
        """Return True when the view shows an excerpt or a masked result (`read_record` helps)."""
        return self.frame.holds_references()

    def read_record(self, ref: str, offset: int = 0, limit: int | None = None) -> str:
        """Return a slice of a record this instance may see; ToolError for anything else."""
        sizer = self.sizer
        if sizer is None:
            raise ToolError("this agent version does not read records back")
        text = self._readable(ref)
        if text is None:
            raise ToolError(f"{ref} is not a record this agent can read")
        return sizer.read(text, ref.strip(), offset, limit)

    def _readable(self, ref: str) -> str | None:
        frame = self.frame
        parsed = parse_ref(ref)
        if parsed.get("run") == frame.state.run_number and parsed["instance"] == frame.instance:
            index = bisect.bisect_left(frame.records, parsed["seq"], key=lambda r: r.seq)
            if index < len(frame.records) and frame.records[index].seq == parsed["seq"]:
                record = frame.records[index]
                return None if record.kind == "status" else message_text(record.message)
            return None
        if frame.instance != MAIN_INSTANCE or self.record_store is None:
            # A sub-agent inherits nothing: it reads only its own records.
            return None
        if "s" in parsed:
            found = self.record_store.main_record(up_to=frame.inherited_watermark, seq=parsed["s"])
        elif parsed["instance"] == MAIN_INSTANCE and parsed["run"] != frame.state.run_number:
            found = self.record_store.main_record(
                up_to=frame.inherited_watermark, run=parsed["run"], local=parsed["seq"]
            )
        else:
            found = None
        return message_text(found) if found is not None else None

    def search_history(self, query: SearchQuery) -> str:
        """Answer `search_history`: the records this instance may read that match `query`.

        The same visibility as `read_record`: the instance's own records of this run, and for the
        main instance the session's main records up to its inherited watermark (the store's
        search, which never reads past it). A sub-agent searches only its own records.
        """
        frame = self.frame
        run = frame.state.run_number
        candidates = [
            Hit(self.ref(record.seq), record.kind, run, text, (1, record.seq))
            for record in frame.records
            if record.kind != "status" and query.admits(record.kind, run)
            for text in [searchable_text(record.message)]
            if text
        ]
        if frame.instance == MAIN_INSTANCE and self.record_store is not None:
            candidates += self.record_store.search(query, up_to=frame.inherited_watermark)
        sizer = self.sizer
        if sizer is None:
            fits = lambda text: len(text) <= UNMEASURED_RESULT_CHARS  # noqa: E731
        else:
            fits = lambda text: sizer.size(text) <= sizer.limit  # noqa: E731
        return render_hits(query, rank(query, candidates), fits)

    def _reference(self, index: int) -> str | None:
        """Return the reference of the view message at `index` (a summary: what it summarised).

        A record's is `r<run>:<seq>` or `s:<seq>`; a handoff summary cites the span of the records
        it stood for, so identifiers carried from it keep pointing into the journal.
        """
        origin = self.frame.origins[index] if index < len(self.frame.origins) else None
        if not origin:
            return None
        if "own" in origin:
            return self.ref(origin["own"])
        if "s" in origin:
            return origin.get("ref") or f"s:{origin['s']}"
        earlier = {s["revision"]: s.get("sources") or {} for s in self.frame.compactions}
        sources = self._sources_at([index], earlier)
        # Cited by span (first to last of each kind), short enough to repeat on a kept line.
        spans = [(ranges[0][0], ranges[-1][1], kind) for kind, ranges in sources.items() if ranges]
        refs = [
            f"s:{first}–{last}" if kind == "session" else f"{self.ref(first)}–{last}"
            for first, last, kind in spans
        ]
        return cited(refs) or None

    def _mask(self, index: int) -> dict[str, Any] | None:
        """Return the one-line stub for the tool result at `index` of the view, if it has one."""
        frame = self.frame
        message, origin = frame.messages[index], frame.origins[index]
        if self.large_records is None or not origin or message.get("role") != "tool":
            return None
        if "mask" in origin:
            return None
        if "own" in origin:
            ref = self.ref(origin["own"])
        elif "s" in origin:
            ref = origin.get("ref") or f"s:{origin['s']}"
        else:
            return None
        if len(masked(ref)) >= len(message_text(message)):
            # A stub is used only where it is smaller than what it stands for.
            return None
        plain = {key: value for key, value in origin.items() if key not in (*LARGE_KEYS, "cap")}
        stub = {**message, "content": masked(ref)}
        self._masks[id(stub)] = {**plain, "mask": 1, "ref": ref}
        return stub

    def apply_budget(self, budget: ModelBudget) -> None:
        self.budget = budget
        self._sizer = None
        if self._frame is not None:
            self._frame.binding["budget"] = budget.to_dict()

    def plan_limit(self) -> int:
        """Return the largest plan this context keeps, in the policy's unit (`plan_reserve`)."""
        return plan_reserve(policy=self.policy, budget=self.budget, estimator=self._measurer())

    def set_plan(self, plan: str | None) -> None:
        """Replace the plan; compaction carries it verbatim into the handoff summary.

        A plan larger than `plan_limit` is refused with a `ToolError` that names both sizes,
        and the previous plan stays.
        """
        plan = self.redactor.text(plan) if plan else None
        if plan:
            size = input_size(policy=self.policy, estimator=self._measurer(), text=plan)
            limit = self.plan_limit()
            if size > limit:
                raise ToolError(
                    f"the plan is {size} in size, above the limit of {limit}; keep fewer or "
                    "shorter steps (the previous plan stays)"
                )
        self.frame.state.plan = plan

    def _measurer(self) -> TokenEstimator:
        # What compaction measures with: a calibrated estimator's bound estimator.
        return getattr(self.estimator, "bound_estimator", self.estimator)

    # -- requests --------------------------------------------------------------------------

    def prepare(
        self,
        purpose: str,
        *,
        tools: list[dict[str, Any]] | None = None,
        call_model: CallModel | None = None,
        candidate_answer: str | None = None,
        messages: list[dict[str, Any]] | None = None,
    ) -> PreparedContext:
        if purpose not in PURPOSES:
            raise ConfigurationError("purpose", f"must be one of {PURPOSES}")
        tools = list(tools or [])
        outcome = None
        if purpose == "action":
            if self.has_open_group:
                raise EngineError("cannot prepare an action request while tool calls are pending")
            outcome = self.compact_if_triggered(tools, call_model)
            messages = list(self.frame.messages)
        elif purpose == "verification":
            messages = self.verification_messages(candidate_answer or "")
            tools = []
        elif messages is None:
            raise ConfigurationError("messages", "a compaction request needs its messages")
        request = ModelRequest(
            purpose=purpose,
            messages=list(messages),
            tools=tools,
            max_output_tokens=self.budget.max_output_tokens,
            instance=self.frame.instance,
            # A summary request on the conversation's prefix carries its tools, not to call them.
            tool_choice="none" if purpose == "compaction" and tools else None,
        )
        estimate = step_measure(self.estimator).upper_bound(*self.sent(request))
        reason = budget_refusal(purpose, estimate, self.budget)
        if reason is not None:
            note = fallback_note(self.estimator)
            if outcome is not None and not outcome.succeeded:
                # Why compaction could not make room: the run's stated reason names it.
                reason += f" (compaction {outcome.outcome}: {outcome.reason})"
            return PreparedContext(None, estimate, reason + note, outcome)
        return PreparedContext(request, estimate, None, outcome)

    def sent(self, request: ModelRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Return the messages and tool schemas that go on the wire for `request`."""
        if self.payload is None:
            return list(request.messages), list(request.tools)
        return sent_request(self.payload(request))

    def _sent_view(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Return what goes on the wire for an action request of `messages` and `tools`."""
        return self.sent(
            ModelRequest(
                purpose="action",
                messages=messages,
                tools=tools,
                max_output_tokens=self.budget.max_output_tokens,
                instance=self.frame.instance,
            )
        )

    def triggers(self, tools: list[dict[str, Any]]) -> tuple[int, tuple[str, ...]]:
        """Return the size of the action request and the triggers that fire for it."""
        frame = self.frame
        messages, tools = self._sent_view(frame.messages, tools)
        measure = step_measure(self.estimator)
        size = measure_context(
            policy=self.policy,
            budget=self.budget,
            estimator=measure,
            messages=messages,
            tools=tools,
        ).size
        fired = self.policy.fired(size=size, counters=frame.counters, budget=self.budget)
        if (
            (
                isinstance(self.estimator, CalibratedEstimator)
                or server_estimator_of(self.estimator) is not None
            )
            and TRIGGER_BUDGET not in fired
            and measure.upper_bound(messages, tools) > self.budget.effective_input_budget
        ):
            # Small in the provider's tokens (or by the template's own markers), but not provably
            # under the budget: it could not be sent, so it is compacted first.
            fired = (TRIGGER_BUDGET, *fired)
        return size, fired

    def compact_if_triggered(
        self, tools: list[dict[str, Any]], call_model: CallModel | None
    ) -> CompactionOutcome | None:
        """Compact the view when a trigger holds; return the attempt's outcome, or None.

        The attempt's span (`span("compaction", …)`) lasts as long as its work, its summary
        calls included, and ends with the rows it logged (`rows`: one a stage, or the throttled
        row it counted again) and how long each row's stage took (`stage_seconds`: a masking
        lasts until the first summary call, a summary from it to the end).
        """
        size, fired = self.triggers(tools)
        if not fired:
            return None
        with self.span("compaction", {"triggers": fired}) as late:
            logged = len(self.frame.state.compaction_log)
            started, first_call = time.perf_counter(), []

            def timed(request: ModelRequest) -> ModelResponse:
                if not first_call:
                    first_call.append(time.perf_counter())
                return call_model(request)  # type: ignore[misc]

            outcome = self._compact(tools, timed if call_model else None, size, fired)
            ended = time.perf_counter()
            log = self.frame.state.compaction_log
            rows = late["rows"] = log[logged:] or log[-1:]
            summary_from = first_call[0] if first_call else ended
            late["stage_seconds"] = [
                (summary_from - started if row.get("stage") == "masking" else ended - summary_from)
                if len(rows) > 1
                else ended - started
                for row in rows
            ]
        return outcome

    def _compact(
        self,
        tools: list[dict[str, Any]],
        call_model: CallModel | None,
        size: int,
        fired: tuple[str, ...],
    ) -> CompactionOutcome:
        frame = self.frame
        # The throttle spares only calls the trigger wants: a request over the hard budget
        # cannot be sent, so its compaction is always attempted.
        over_budget = (
            self.estimator.upper_bound(frame.messages, tools) > self.budget.effective_input_budget
        )
        if not over_budget and self._throttled(size):
            outcome = CompactionOutcome(
                outcome="skipped",
                reason="throttled",
                before=size,
                after=size,
                target_reached=False,
                calls=0,
                triggers=fired,
            )
            self._commit(outcome)
            return outcome

        # What this attempt's own calls cost, as the provider reported it.
        spent = {"prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0, "unreported": 0}

        def summarise(
            summary_messages: list[dict[str, Any]], limit: int, with_tools: bool = False
        ) -> str:
            prepared = self.prepare(
                "compaction", messages=summary_messages, tools=tools if with_tools else None
            )
            if prepared.request is None:
                raise ContextBudgetExceeded(prepared.stop_reason or "")
            if call_model is None:
                raise EngineError("no model to summarise with")
            # The summary may take the room left under the trigger, and no more.
            request = replace(
                prepared.request, max_output_tokens=min(prepared.request.max_output_tokens, limit)
            )
            response = call_model(request)
            add_usage(spent, response.usage)
            reply = response.message
            if tool_calls_of(reply):
                raise EngineError("a summary request answered with tool calls")
            return message_text(reply)

        self._masks = {}
        outcome = self.compaction_policy.compact(
            CompactionRequest(
                messages=list(frame.messages),
                tools=tools,
                task_index=frame.state.task_index,
                plan=frame.state.plan,
                triggers=fired,
                policy=self.policy,
                budget=self.budget,
                estimator=self._compaction_measure(),
                summarise=summarise,
                mask=self._mask if self.large_records is not None else None,
                sent=self._sent_view,
                reference=self._reference if self.compaction.kept_verbatim else None,
                readable=self.large_records is not None,
                prefix_summary=self.compaction.prefix_summary,
                identifier_rules=self.compaction.identifier_rules,
                mask_batch=(
                    self.policy.mask_batch_at(self.budget)
                    if self.compaction.batches_masks
                    else None
                ),
                spare_newest=self.compaction.spares_newest,
                summary_to_target=self.compaction.summarises_to_target,
            )
        )
        self._commit(outcome, spent if outcome.calls else None)
        self._throttle_after(outcome, size)
        return outcome

    def _compaction_measure(self) -> TokenEstimator:
        """Return what a compaction attempt measures with: the hard check's bound from
        compaction version 5, the bound estimator's estimate before."""
        estimator = getattr(self.estimator, "bound_estimator", self.estimator)
        return BoundMeasure(estimator) if self.compaction.measures_bound else estimator

    def _throttled(self, size: int) -> bool:
        """Return True while a failed compaction's retry waits for growth or model steps."""
        throttle = self.frame.state.compaction_throttle
        if not throttle:
            return False
        grown = size - throttle["size"] >= int(
            self.budget.effective_input_budget * THROTTLE_GROWTH_SHARE
        )
        stepped = self.frame.counters.model_steps - throttle["model_steps"] >= THROTTLE_STEPS
        return not (grown or stepped)

    def _throttle_after(self, outcome: CompactionOutcome, size: int) -> None:
        """Hold retries back after a failure (kept in the checkpoint, so across resumes too)."""
        state = self.frame.state
        if outcome.outcome == "failed" or outcome.reason == "pinned_too_large":
            state.compaction_throttle = {
                "size": size,
                "model_steps": self.frame.counters.model_steps,
                "reason": outcome.reason,
            }
        elif outcome.succeeded:
            state.compaction_throttle = None

    def _commit(self, outcome: CompactionOutcome, spent: dict[str, int] | None = None) -> None:
        """Adopt a successful compaction and log every attempt; records are never touched.

        An attempt logs one row per stage it ran (masking, then summary), each with its own
        before and after and the model steps taken so far (`steps`: what it saved is counted
        on read, by the action requests that followed); the snapshot records the exact sources
        it summarised and masked. `spent` is what the attempt's own calls reported (prompt,
        cached and completion tokens, and how many reported none).
        """
        frame = self.frame
        covered_seq = frame.records[-1].seq if frame.records else 0
        revision = None
        masks, self._masks = self._masks, {}
        if outcome.succeeded and outcome.messages is not None:
            revision = len(frame.compactions) + 1
            frame.counters.advance_baselines()
            # Kept messages are the view's own dicts, so they keep their origins; masked stubs
            # carry theirs; the summary (and anything else a policy made) is new and inline.
            known = {
                id(message): origin
                for message, origin in zip(frame.messages, frame.origins, strict=True)
            }
            known.update(masks)
            origins = [
                known.get(id(message), {"summary": revision}) for message in outcome.messages
            ]
            sources = self._summarised_sources(outcome)
            sources["masked"] = self._sources_at(outcome.details.get("masked", []))
            frame.replace_view(list(self.redactor.value(outcome.messages)), origins)
            frame.state.task_index = outcome.task_index
            frame.add_snapshot(
                {
                    "revision": revision,
                    "covered_seq": covered_seq,
                    "messages": list(frame.messages),
                    "inherited_watermark": frame.inherited_watermark,
                    "counters": frame.counters.to_dict(),
                    "metrics": outcome.metrics(),
                    "sources": sources,
                },
                list(origins),
            )
        metrics = outcome.metrics()
        if revision is not None:
            metrics = {
                **metrics,
                "stage": outcome.details.get("stage", "summary"),
                "sources": sources,
            }
            for key in ("identifiers", "form"):
                # What the summary kept of its sources' identifiers (compaction version 2 on),
                # and how it was asked for (version 3 on).
                if key in outcome.details:
                    metrics[key] = outcome.details[key]
        log = frame.state.compaction_log
        if outcome.reason == "throttled" and log and log[-1].get("reason") == "throttled":
            # One row for a stretch of throttled steps, counting them, not one row per step.
            frame.state.compaction_log = [
                *log[:-1],
                {**log[-1], "after": metrics["after"], "repeats": log[-1].get("repeats", 1) + 1},
            ]
            return
        at = iso_utc(self.clock())
        steps = frame.counters.model_steps
        if spent is not None:
            metrics = {**metrics, "spent": dict(spent)}
        rows = []
        stages = outcome.details.get("stages")
        if stages:
            mask, summary = stages
            rows.append(
                {
                    "revision": None,
                    "covered_seq": covered_seq,
                    "before": mask["before"],
                    "after": mask["after"],
                    "target_reached": None,
                    "calls": 0,
                    "outcome": mask["outcome"],
                    "reason": "masked",
                    "trigger": list(outcome.triggers),
                    "stage": "masking",
                    "at": at,
                    "steps": steps,
                }
            )
            metrics = {**metrics, "before": summary["before"], "stage": "summary"}
        rows.append(
            {"revision": revision, "covered_seq": covered_seq, **metrics, "at": at, "steps": steps}
        )
        frame.state.compaction_log = [*log, *rows]

    def _sources_at(
        self, indexes: list[int], earlier: dict[int, dict[str, Any]] | None = None
    ) -> dict[str, list[list[int]]]:
        """Return the own local seqs and session seqs of the view messages at `indexes`.

        With `earlier` (sources by snapshot revision), a summary message counts as the records
        its compaction summarised; an inherited summary counts as the session records its view
        says it stood for (`src`), so ranges stay exact across runs. Ranges are merged as
        ranges: an inherited one is never listed seq by seq.
        """
        own: list[list[int]] = []
        session: list[list[int]] = []
        for index in indexes:
            origin = self.frame.origins[index] if index < len(self.frame.origins) else None
            if not origin:
                continue
            if "own" in origin:
                own.append([origin["own"], origin["own"]])
            elif "s" in origin:
                session.append([origin["s"], origin["s"]])
            elif "src" in origin:
                # An inherited summary: the session records its view says it stood for.
                session.extend(origin["src"])
            elif "summary" in origin and "b" not in origin and earlier is not None:
                before = earlier.get(origin["summary"], {})
                own.extend(before.get("own", []))
                session.extend(before.get("session", []))
        return {"own": union_ranges(own), "session": union_ranges(session)}

    def _summarised_sources(self, outcome: CompactionOutcome) -> dict[str, list[list[int]]]:
        """Return the records a summary replaced: own local seqs and session seqs, as ranges.

        A summary that summarises an earlier one covers what that one covered, so the ranges
        stay exact through repeated compactions.
        """
        earlier = {s["revision"]: s.get("sources") or {} for s in self.frame.compactions}
        return self._sources_at(outcome.details.get("summarised", []), earlier)

    def verification_messages(self, candidate_answer: str) -> list[dict[str, Any]]:
        """Return the verification request: the task, the evidence and the candidate answer."""
        frame = self.frame
        task_index = frame.state.task_index
        if task_index is not None and task_index < len(frame.messages):
            task = message_text(frame.messages[task_index])
            evidence = frame.messages[task_index + 1 :]
        else:
            task = "(the task is not in the view; see the evidence)"
            evidence = [m for m in frame.messages if m.get("role") != "system"]
        # The candidate is the final message; it is shown on its own below.
        if evidence and evidence[-1].get("role") == "assistant" and not tool_calls_of(evidence[-1]):
            evidence = evidence[:-1]
        groups = _evidence_groups(evidence)
        candidate = self.redactor.text(candidate_answer)

        def request(start: int) -> list[dict[str, Any]]:
            shown = "\n\n".join(groups[start:]) or "(none)"
            if start:
                shown = (
                    f"[{start} earlier evidence group(s) omitted to fit the context budget]"
                    f"\n\n{shown}"
                )
            return [
                {"role": "system", "content": VERIFIER_INSTRUCTIONS},
                {
                    "role": "user",
                    "content": (
                        f"Task:\n{task}\n\nEvidence:\n{shown}\n\n"
                        f"Candidate answer:\n{candidate}\n\n"
                        "Verdict (PASS, or FAIL: reason):"
                    ),
                },
            ]

        # Keep the most recent complete groups that fit: the fewest omitted. With the note in
        # place, dropping one more group never makes the request larger, so a binary search finds
        # the first start that fits; if none does, the hard check refuses the shortest.
        effective = self.budget.effective_input_budget
        if not groups or self.estimator.upper_bound(request(0), []) <= effective:
            return request(0)
        low, high = 1, len(groups)
        while low < high:
            middle = (low + high) // 2
            if self.estimator.upper_bound(request(middle), []) <= effective:
                high = middle
            else:
                low = middle + 1
        return request(low)


def _evidence_groups(messages: list[dict[str, Any]]) -> list[str]:
    """Return verification evidence as rendered complete groups, in order.

    A tool call and all of its results form one group; any other message is a group of its own.
    """
    groups: list[str] = []
    index = 0
    while index < len(messages):
        end = index + 1
        if tool_calls_of(messages[index]):
            while end < len(messages) and messages[end].get("role") == "tool":
                end += 1
        groups.append("\n\n".join(render_message(m) for m in messages[index:end]))
        index = end
    return groups
