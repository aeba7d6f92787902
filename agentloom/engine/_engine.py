"""The agent loop: model steps, tools, supplements, verification, delegation and checkpoints.

One loop step (`_InstanceLoop.step`), at a safe point (no tool call waiting for its result):

    settle pending calls -> accept supplements -> check cancellation -> prepare (compaction)
    -> hard budget check -> gateway call -> record the response -> check cancellation again
    -> run its tools -> save

`ask_model` prepares and sends the request, `cancel_response` answers the calls of a response that
came after a cancel request, `run_group` runs the tools and `conclude` takes a final answer: it is
verified when the version asks for it, then the supplement queue is drained one last time:
supplements that arrived meanwhile are journaled and answered in another step, so a run never
ends with a supplement still queued. Every gateway call — action, compaction or
verification, failed or not — is reported through `on_model_call` and counts against the
per-execution limit; a request over the effective budget is never sent.

A refusal is not always the end of a step. One the gateway adapts to (`ModelGateway.adapt`) is
sent once more, rebuilt and checked again. One for length (`context_length`) teaches the run a
smaller window (`_budget.learned_window`): written into every context's binding and the
checkpoint, journaled as a run note, announced through `on_learned`; the step is then prepared
again against it (compacting) and sent once more. A second refusal of the step ends the run, and
a window that leaves less room for a question than the publish floor ends it saying to republish.

Cancellation is checked after every model response, before any tool runs: calls returned after
a cancel request are answered with a `cancelled` result and never run. A running tool receives
the cancellation signal (see `_watch`); a delegation's child stops at its next safe point. While a
model call or a tool runs, the run's watch (`EngineHooks.watch`) renews the run's lease, never
past the call's own deadline; once the lease is lost the engine raises `LeaseLostError` right
after the call and writes nothing more. A run's status notes ("run stopped: …") are recorded as
feedback shown on the assistant side, never in the user's voice.
"""

from __future__ import annotations

import inspect
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, fields, replace
from typing import Any

from agentloom.engine._approval import (
    WAITING_APPROVAL,
    Decision,
    decision_feedback,
    denied_result,
    pending_approvals,
)
from agentloom.engine._asking import (
    WAITING_INPUT,
    Answer,
    InputRequired,
    answer_feedback,
    pending_questions,
    question_feedback,
    reply_of,
)
from agentloom.engine._budget import (
    LearnedLimit,
    ModelBudget,
    TokenEstimator,
    budget_refusal,
    estimator_from_binding,
    learned_window,
)
from agentloom.engine._calibration import (
    CalibratedEstimator,
    Calibration,
    calibration_config,
    resumed_estimator,
)
from agentloom.engine._clock import Clock, system_clock
from agentloom.engine._compaction import CompactionPolicy
from agentloom.engine._compaction_versions import compaction_of
from agentloom.engine._context import (
    ContextBinding,
    ContextManager,
    ContextOptions,
    JournalContextManager,
    SpanHook,
    unspanned,
)
from agentloom.engine._errors import (
    ConfigurationError,
    ContextBudgetExceeded,
    EngineError,
    GatewayError,
    LeaseLostError,
    ModelCallCancelled,
    ModelCallLimitReached,
    PayloadRuleBroken,
    ToolCancelled,
    ToolError,
)
from agentloom.engine._frame import InstanceFrame
from agentloom.engine._gate import check_payload, sent_request
from agentloom.engine._gateway import CallStream, ModelGateway, ModelRequest, ModelResponse
from agentloom.engine._large import READ_RECORD, LargeRecords
from agentloom.engine._measure import (
    QUESTION_ROOM_FLOOR,
    one_measure_per_step,
    question_room,
    step_measure,
)
from agentloom.engine._policy import TriggerPolicy, load_policy
from agentloom.engine._projection import ProjectedHistory
from agentloom.engine._protocol import CANCELLED_RESULT, INTERRUPTED_RESULT, message_text
from agentloom.engine._records import MAIN_INSTANCE, Record
from agentloom.engine._redaction import Redactor, StreamRedactor
from agentloom.engine._refs import RecordStore
from agentloom.engine._rendering import Rendering, rendering_of
from agentloom.engine._server_count import ServerEstimator, fallback_note, server_estimator_of
from agentloom.engine._tools import (
    DelegateTool,
    ReadRecordTool,
    SubAgent,
    Tool,
    ToolContext,
    ToolOutput,
    Toolset,
    argument_errors,
    build_toolset,
    builtin_tools,
)
from agentloom.engine._usage import reported_prompt_tokens
from agentloom.engine._watch import CallWatch, WatchedCall, Watcher, WatchHooks

__all__ = [
    "DEFAULT_MAX_MODEL_CALLS",
    "Checkpoint",
    "Engine",
    "EngineConfig",
    "EngineHooks",
    "ExecutionLimits",
    "ModelCallRecord",
    "RunOutcome",
    "WindowLearned",
    "create_engine",
]

DEFAULT_MAX_MODEL_CALLS = 32
# Why a tool call the model made never ran: the `error` of its `execute_tool` span (a bounded
# set, never content). Cancelled before it started, denied by a person, arguments that are not
# what its schema asks, a tool the agent does not have (unknown, or listed by its server but
# unusable), a call a resume found pending (its outcome unknown; never run again).
NOT_RUN = ("cancelled", "denied", "invalid_arguments", "tool_unavailable", "outcome_unknown")
# The deadline of one model call when its gateway names none (see `ModelGateway.deadline_seconds`).
DEFAULT_MODEL_CALL_SECONDS = 900.0


@dataclass(frozen=True)
class ExecutionLimits:
    """Limits of one execution (a start or a resume); they reset when a run is resumed."""

    max_model_calls: int = DEFAULT_MAX_MODEL_CALLS

    def __post_init__(self) -> None:
        calls = self.max_model_calls
        if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
            raise ConfigurationError("max_model_calls", "must be a positive integer")


ContextManagerFactory = Callable[..., ContextManager]
# The keyword arguments a context-manager factory is called with, once for each instance: a
# `ContextBinding` and `ContextOptions`.
CONTEXT_MANAGER_OPTIONS = ("binding", "options")

_FACTORY_EXPECTED = (
    "expected a factory that returns a ContextManager, called once per instance with the keyword "
    f"arguments {', '.join(CONTEXT_MANAGER_OPTIONS)}, such as the class JournalContextManager or "
    "a subclass of it"
)


def check_context_manager_factory(factory: Any) -> None:
    """Refuse a `context_manager` the engine could not call for each instance.

    An instance is refused rather than shared: each instance (a run's main one and every
    delegated one) keeps its own context, so the engine builds a new manager for each.
    """
    if isinstance(factory, ContextManager):
        kind = type(factory).__name__
        problem = f"got a {kind} instance: pass its class, the engine builds one per instance"
    elif not callable(factory):
        problem = f"got {type(factory).__name__} {factory!r}, which is not callable"
    elif inspect.isabstract(factory):
        missing = ", ".join(sorted(factory.__abstractmethods__))
        problem = f"{factory.__name__} is abstract (it lacks {missing})"
    else:
        problem = _unbound_options(factory)
    if problem:
        raise ConfigurationError("context_manager", f"{_FACTORY_EXPECTED}; {problem}")


def _unbound_options(factory: Callable[..., Any]) -> str:
    """Return why `factory` cannot take the factory options ("" when it can, or cannot tell)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return ""  # no signature to read (a builtin): the first instance will tell
    try:
        signature.bind(**dict.fromkeys(CONTEXT_MANAGER_OPTIONS))
    except TypeError as exc:
        name = getattr(factory, "__name__", type(factory).__name__)
        return f"{name}{signature} does not take them ({exc})"
    return ""


@dataclass(frozen=True)
class EngineHooks:
    """Where the application plugs into an engine: every callback of one run, each optional.

    - `save(checkpoint)` at every safe point (see `Checkpoint`); without it nothing is kept;
    - `on_model_call(record)` after every gateway call, failed or not (see `ModelCallRecord`);
    - `should_cancel()` answers whether the run has been asked to stop: asked at every safe
      point, after every model response and, without a `watch`, every `cancel_poll_seconds`
      while a tool or a streamed call runs;
    - `supplements(final)` returns the `(source_key, text)` pairs queued for the main instance
      (`final` is True when the run is about to end);
    - `watch` (a `CallWatch`, such as `Watcher(hooks).run(key)`) watches each model call and
      tool while it runs (a `WatchedCall`): it renews the run's lease, never past the call's
      deadline, and relays a cancel request to a tool or a streamed call (see `_watch`). A
      process running many engines gives them one `Watcher`; without one no lease is renewed;
    - `on_delta(instance, delta)` receives a streamed call's output as it arrives (`delta` holds
      `content` and `reasoning` text, redacted with a hold-back so that a secret split across
      pieces is caught, `tool_calls`, the names of calls just decided, and the call's `purpose`:
      a summary call's text is not an answer); the journal still gets the reply once, whole;
    - `decisions()` returns the decisions made on the run's tool calls that need approval, by
      call id (see `_approval`);
    - `answers()` returns the person's answers to the questions the run waits on, by question
      key, and `ask(call_id, tool, server, questions, seconds)` asks the person while a call is
      open and returns the answers, or None when no one answered within `seconds` (see
      `_asking`); without `ask` no person answers an open call;
    - `on_learned(limit)` is called once when the run applies what it learned from a refusal
      (a `LearnedLimit`: a smaller context window, or the reasoning rule a gateway adapted to);
    - `span(kind, facts)` opens the span of an operation for as long as it lasts and yields a
      dict the engine fills with what is known only at its end (see `SpanHook`): `execute_tool`
      around each tool call that runs (`name`, `call_id`; `error` at the end when it failed),
      and around the answer to each call that never runs (`error`: why, one of `NOT_RUN`),
      `invoke_agent` around a sub-agent's instance, inside its delegation tool's call (`name`,
      `instance`; `status` at the end), and `compaction` around each compaction attempt, its
      summary calls included (`triggers`; the `rows` it logged at the end). Model calls are
      reported (`on_model_call`) inside the operation that made them.
    """

    save: Callable[[Checkpoint], None] | None = None
    on_model_call: Callable[[ModelCallRecord], None] | None = None
    decisions: Callable[[], Mapping[str, Decision]] | None = None
    answers: Callable[[], Mapping[str, Answer]] | None = None
    ask: Callable[..., Mapping[str, Answer] | None] | None = None
    should_cancel: Callable[[], bool] | None = None
    supplements: Callable[[bool], list[tuple[str, str]]] | None = None
    watch: CallWatch | None = None
    on_delta: Callable[[str, dict[str, Any]], None] | None = None
    on_learned: Callable[[LearnedLimit], None] | None = None
    span: SpanHook | None = None


@dataclass(frozen=True)
class EngineConfig:
    """Options of an engine beyond its model, tools, binding and hooks; all have defaults.

    `limits` bound one execution; `compaction_policy` and `context_manager` (a factory called
    with `binding=` a `ContextBinding` and `options=` `ContextOptions` for each instance,
    default `JournalContextManager`) replace how context is kept; `secrets` are
    removed from everything the engine hands out; `clock` stamps records and `sleeper` is what
    the `sleep` tool waits with; `sub_agents` (objects or dicts) are offered as delegation tools;
    `verify_completion` asks the model to verify a final answer before the run succeeds.

    `record_store` is where `format: 2` checkpoints find the journal records and inherited
    history they refer to; without it only self-contained `format: 1` frames can be resumed.
    `calibration` (`{"samples": n}`, see `_calibration`) measures triggers in the provider's
    reported tokens; a resumed run follows its checkpoint's binding instead.

    `cache_key` goes with every model call (`ModelRequest.cache_key`): the session's, so that
    its calls meet one prompt cache where the provider takes a key.

    `cancel_poll_seconds` is how often `should_cancel` is asked while a tool or a streamed call
    runs (without a `watch` hook), and `model_call_seconds` the deadline of a model call whose
    gateway names none.
    """

    limits: ExecutionLimits = field(default_factory=ExecutionLimits)
    compaction_policy: CompactionPolicy | None = None
    context_manager: ContextManagerFactory = JournalContextManager
    secrets: tuple[str, ...] = ()
    clock: Clock = system_clock
    sleeper: Callable[[float], None] | None = None
    sub_agents: tuple[SubAgent, ...] = ()
    verify_completion: bool = False
    record_store: RecordStore | None = None
    calibration: dict[str, Any] | None = None
    cancel_poll_seconds: float = 0.5
    model_call_seconds: float = DEFAULT_MODEL_CALL_SECONDS
    cache_key: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "secrets", tuple(self.secrets))
        subs = (s if isinstance(s, SubAgent) else SubAgent.from_dict(s) for s in self.sub_agents)
        object.__setattr__(self, "sub_agents", tuple(subs))
        object.__setattr__(self, "calibration", calibration_config(self.calibration))
        check_context_manager_factory(self.context_manager)
        for name in ("cancel_poll_seconds", "model_call_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigurationError(name, "must be a positive number of seconds")


@dataclass(frozen=True)
class Checkpoint:
    """What one save hands the application: the frame by reference and the records it adds.

    `frame` is `format: 2` (no records, views as references); `records` are the
    `(instance, Record)` pairs not journaled yet, in journal order. Storing both in one
    transaction keeps every reference resolvable.
    """

    frame: dict[str, Any]
    records: list[tuple[str, Record]]
    _source: InstanceFrame | None = field(default=None, repr=False, compare=False)

    @property
    def counters(self) -> dict[str, int]:
        return (self.frame.get("context") or {}).get("counters") or {}

    def full(self) -> dict[str, Any]:
        """Return the same moment as a self-contained `format: 1` frame (call it during save)."""
        if self._source is None:
            raise EngineError("this checkpoint has no frame to expand")
        return self._source.to_dict()

    @classmethod
    def of(cls, frame: InstanceFrame) -> Checkpoint:
        return cls(frame=frame.encode(), records=frame.unsaved(), _source=frame)


@dataclass(frozen=True)
class ModelCallRecord:
    """One gateway call as reported to `on_model_call`, redacted."""

    purpose: str
    instance: str
    request_estimate: int
    response: dict[str, Any] | None
    usage: dict[str, Any] | None
    latency_ms: float
    error: str | None
    # The module id of the estimator that measured `request_estimate`.
    estimator: str = ""
    # For a calibrated estimator: the ratio and reported base the estimate used (else None).
    calibration: dict[str, Any] | None = None
    # A streamed call stopped by a cancel: billed for what was generated, usage never reported.
    cancelled: bool = False
    # What the hard check used with a server estimator: `{server, fallback, upper_bound}` (the
    # server's count with the margins or None, None or how the bound was made without it, the
    # bound compared with the budget); None with any other estimator.
    counts: dict[str, Any] | None = None
    # What a failed call's refusal said beside its kind, when the provider layer read it:
    # `{window, requested, evidence}` (a replay rebuilds the refusal from it); else None.
    refusal: dict[str, Any] | None = None


@dataclass(frozen=True)
class RunOutcome:
    """How an execution ended. `answer` is set only on success; a candidate is kept regardless."""

    status: str  # "succeeded" | "failed" | "cancelled" | "waiting_approval" | "waiting_input"
    answer: str | None
    error: str | None
    checkpoint: Checkpoint
    candidate_answer: str | None = None
    # While `waiting_approval`: each undecided call, `{call_id, tool, arguments}`.
    pending_approvals: list[dict[str, Any]] = field(default_factory=list)
    # While `waiting_input`: each question of the server, with its call, tool and server.
    pending_questions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def frame(self) -> dict[str, Any]:
        """Return the final frame as self-contained `format: 1` data."""
        return self.checkpoint.full()


class Engine:
    """Runs and resumes agent runs; build it with `create_engine`."""

    def __init__(
        self,
        *,
        gateway: ModelGateway,
        tools: Iterable[str | Tool],
        binding: ContextBinding,
        hooks: EngineHooks,
        config: EngineConfig,
    ):
        self.gateway = gateway
        self.binding = binding
        self.policy = binding.policy
        self.budget = binding.budget
        self.hooks = hooks
        self.config = config
        self.estimator = binding.estimator
        self.redactor = Redactor(config.secrets)
        self.registry = builtin_tools(clock=config.clock, sleeper=config.sleeper)
        tools = list(tools)
        for tool in tools:
            if isinstance(tool, Tool):
                self.registry[tool.name] = tool
        self.tools = tools
        self.watch = hooks.watch or _cancel_relay(hooks.should_cancel, config.cancel_poll_seconds)
        # Fail at construction, not mid-run, when a version names a tool that does not exist.
        build_toolset(self.tools, self.registry)
        for sub_agent in config.sub_agents:
            build_toolset(sub_agent.tools, self.registry)

    def start(
        self,
        *,
        run_number: int,
        attempt: int,
        system_prompt: str,
        question: str,
        history: ProjectedHistory | None = None,
        calibration_start: float | None = None,
        calibration_base: dict[str, Any] | None = None,
        token_counts: Mapping[str, int] | None = None,
    ) -> RunOutcome:
        """Run a new question: a new main instance with the inherited history and the task.

        `calibration_start` is the ratio a calibrated version starts from (the connection's
        recent calls); it is kept in the checkpoint, so a replay can start from it too.
        `calibration_base` is the session's last reported call (a checkpoint's
        `state.calibration["base"]`): a first request that extends it exactly is measured from
        its reported tokens; it is kept in the checkpoint as well. `token_counts` are server
        tokenizer counts known beforehand (a replay passes the ones its run recorded, in
        `state.token_counts`), so it measures the same way without the server.
        """
        estimator = self.estimator
        if isinstance(estimator, ServerEstimator):
            # The run records the counts it measures with, for its checkpoint.
            estimator = estimator.for_run()
            estimator.remember(token_counts)
        settings = self.config.calibration
        if settings is not None:
            start = Calibration.from_dict(
                {
                    "start": calibration_start,
                    "base": calibration_base,
                    "start_base": calibration_base,
                },
                keep=settings["samples"],
            )
            estimator = CalibratedEstimator(estimator, start)
        rendering = self.binding.rendering
        if history is not None and history.from_journal and history.rendering != rendering.version:
            raise ConfigurationError(
                "history",
                f"was projected with rendering {history.rendering}, the run uses "
                f"{rendering.version}",
            )
        execution = _Execution(self, replace(self.binding, estimator=estimator))
        context = execution.new_context()
        context.create(
            instance=MAIN_INSTANCE,
            system_prompt=system_prompt,
            task=question,
            run_number=run_number,
            attempt=attempt,
            history=history,
        )
        return execution.run(context)

    def resume(self, frame_dict: dict[str, Any], *, attempt: int) -> RunOutcome:
        """Continue a run from its checkpoint with the budget, policy and estimator it was bound to.

        Pending tool calls get an `unknown` result and are not re-executed; the model-call limit
        starts again; counters and baselines come from the checkpoint.
        """
        execution, context = self._restored(frame_dict)
        state = context.frame.state
        state.attempt = attempt
        state.terminal = None
        state.model_calls = 0
        return execution.run(context)

    def continue_run(self, frame_dict: dict[str, Any]) -> RunOutcome:
        """Continue a run that waited for approval or answers: run its open tool group.

        Not a resume: the attempt, the model calls counted and the open calls stay; a call still
        undecided ends the execution `waiting_approval` again, a question still unanswered
        `waiting_input`. The call that waited on answers is sent again with them.
        """
        execution, context = self._restored(frame_dict)
        execution.model_calls = context.frame.state.model_calls
        return execution.run(context, continuing=True)

    def _restored(self, frame_dict: dict[str, Any]) -> tuple[_Execution, ContextManager]:
        """Return an execution bound as the checkpoint says, and its context restored."""
        frame = InstanceFrame.from_dict(
            self.redactor.value(frame_dict), store=self.config.record_store
        )
        policy, budget, estimator = self._bound(frame.binding)
        if isinstance(estimator, ServerEstimator):
            # The counts the run measured with, so it measures the same way without the server.
            estimator = estimator.for_run()
            estimator.remember(frame.state.token_counts)
        estimator = resumed_estimator(estimator, frame.binding, frame.state.calibration)
        bound = ContextBinding(
            policy,
            budget,
            estimator,
            large_records=frame.binding.get("large_records"),
            rendering=rendering_of(frame.binding),
            compaction=compaction_of(frame.binding),
        )
        execution = _Execution(self, bound)
        context = execution.new_context()
        context.restore(frame)
        return execution, context

    def _bound(self, binding: dict[str, Any]) -> tuple[TriggerPolicy, ModelBudget, TokenEstimator]:
        """Return what a checkpoint is bound to; a legacy frame without a binding uses ours."""
        policy = load_policy(binding["policy"]) if "policy" in binding else self.policy
        budget = ModelBudget.from_dict(binding["budget"]) if binding.get("budget") else self.budget
        estimator = self.estimator
        bound = binding.get("estimator")
        if bound and bound != estimator.binding():
            estimator = estimator_from_binding(bound, getattr(estimator, "counter", None))
        return policy, budget, estimator


class WindowLearned(GatewayError):
    """A length refusal the run learned a smaller window from: kind `context_length`.

    `limit` is what was learned; `budget` the budget applied (None: the window leaves no input
    room at all, nothing was applied).
    """

    def __init__(self, refusal: GatewayError, limit: LearnedLimit, budget: ModelBudget | None):
        super().__init__(refusal.kind, refusal.message, status=refusal.status)
        self.limit = limit
        self.budget = budget


def _learned_budget(budget: ModelBudget, window: int) -> ModelBudget | None:
    """Return the budget for a learned window (None: it leaves no input room at all).

    The reservation stays as it is where the window still holds it; one chosen for a larger
    assumed window (discovery's 4,096 output limit for an unreported window) keeps its shares of
    this one instead (`ModelBudget.within`).
    """
    try:
        return ModelBudget(window, budget.max_output_tokens, budget.safety_margin_tokens)
    except ConfigurationError:
        pass
    try:
        return budget.within(window)
    except ConfigurationError:
        return None


class _CancelRelay(WatchHooks):
    """An engine's own watch hooks, without a `watch` hook: no lease, `should_cancel` relayed."""

    def __init__(self, should_cancel: Callable[[], bool], poll_seconds: float):
        self.should_cancel = should_cancel
        self.cancel_poll_seconds = poll_seconds

    def cancels_asked(self, runs: set[Any]) -> set[Any]:
        return set(runs) if self.should_cancel() else set()


class _Unwatched:
    """The watch of an engine with nothing to watch: no lease, no cancellation to relay."""

    def watching(self, call: WatchedCall) -> AbstractContextManager[Any]:
        return nullcontext(call)


def _cancel_relay(should_cancel: Callable[[], bool] | None, poll_seconds: float) -> CallWatch:
    """Return the watch of an engine without a `watch` hook: cancellation relayed, if asked."""
    if should_cancel is None:
        return _Unwatched()
    return Watcher(_CancelRelay(should_cancel, poll_seconds)).run(None)


class _Execution:
    """One start or resume: the model-call count and the instances it drives."""

    def __init__(self, engine: Engine, binding: ContextBinding):
        self.engine = engine
        self.binding = binding
        self.rendering: Rendering = binding.rendering
        self.policy: TriggerPolicy = binding.policy
        self.budget: ModelBudget = binding.budget
        self.estimator = binding.estimator
        self.large_records: LargeRecords | None = binding.large_records
        self.model_calls = 0
        self.main: ContextManager | None = None
        # Every context of the execution (a learned budget applies to each), and what it learned.
        self.contexts: list[ContextManager] = []
        self.learned: list[LearnedLimit] = []
        # How the latest request sent was measured (the one a refusal is about), else None.
        self.last_measured: dict[str, Any] | None = None
        # Set by a watch when the lease is lost, and once a cancel request has been seen.
        self.lease_lost = threading.Event()
        self.cancel_seen = threading.Event()
        self.span: SpanHook = engine.hooks.span or unspanned

    def new_context(self) -> ContextManager:
        engine = self.engine
        config = engine.config
        # The options are CONTEXT_MANAGER_OPTIONS, which the config checked the factory takes.
        context = config.context_manager(
            binding=self.binding,
            options=ContextOptions(
                compaction_policy=config.compaction_policy,
                clock=config.clock,
                redactor=engine.redactor,
                record_store=config.record_store,
                payload=engine.gateway.payload,
                span=engine.hooks.span,
            ),
        )
        self.contexts.append(context)
        return context

    def run(self, context: ContextManager, *, continuing: bool = False) -> RunOutcome:
        self.main = context
        engine = self.engine
        delegates = [DelegateTool(sub, self.run_child) for sub in engine.config.sub_agents]
        toolset = build_toolset([*engine.tools, *delegates], engine.registry)
        loop = _InstanceLoop(self, context, toolset, parent=None)
        status, answer, error = loop.run(continuing=continuing)
        self.keep_counts()
        state = context.managed.state
        return RunOutcome(
            status=status,
            answer=answer if status == "succeeded" else None,
            error=error,
            checkpoint=Checkpoint.of(context.frame),
            candidate_answer=state.candidate_answer,
            pending_approvals=loop.waiting,
            pending_questions=(
                pending_questions(state.asking) if status == WAITING_INPUT and state.asking else []
            ),
        )

    def decisions(self) -> Mapping[str, Decision]:
        source = self.engine.hooks.decisions
        return source() if source is not None else {}

    def answers(self) -> Mapping[str, Answer]:
        source = self.engine.hooks.answers
        return source() if source is not None else {}

    def keep_counts(self) -> None:
        """Put the server tokenizer's counts the run measured with into the main checkpoint."""
        server = server_estimator_of(self.estimator)
        if server is not None and self.main is not None:
            self.main.managed.state.token_counts = server.recorded()

    @property
    def largest_ok(self) -> int | None:
        """Return the measured size of the largest request of the run that succeeded."""
        return self.main.managed.state.largest_ok if self.main is not None else None

    def succeeded(self, measured: dict[str, Any]) -> None:
        if self.main is not None:
            state = self.main.managed.state
            state.largest_ok = max(state.largest_ok or 0, measured["upper_bound"])

    def save_main(self) -> None:
        self.keep_counts()
        save = self.engine.hooks.save
        if save is not None and self.main is not None:
            frame = self.main.frame
            save(Checkpoint.of(frame))
            frame.mark_saved()

    def cancel_requested(self) -> bool:
        """Return True once the run has been asked to stop (asked again until it has)."""
        should_cancel = self.engine.hooks.should_cancel
        if not self.cancel_seen.is_set() and should_cancel and should_cancel():
            self.cancel_seen.set()
        return self.cancel_seen.is_set()

    def watch(
        self,
        *,
        deadline: float | None,
        signal: threading.Event | None = None,
        on_cancel: Callable[[], None] | None = None,
    ) -> AbstractContextManager[Any]:
        """Return the watch of one call: lease renewal, and for a tool or a stream cancellation."""
        call = WatchedCall(
            deadline_seconds=deadline,
            lost=self.lease_lost,
            cancelled=signal if signal is not None else threading.Event(),
            relay_cancel=signal is not None,
            on_cancel=on_cancel,
        )
        return self.engine.watch.watching(call)

    def check_lease(self) -> None:
        """Raise `LeaseLostError` when a watch found the lease lost: nothing more is written."""
        if self.lease_lost.is_set():
            raise LeaseLostError("the run's lease was lost while a call was in flight")

    def call_model(self, request: ModelRequest) -> ModelResponse:
        """Send one request through the gateway: the only way any model call is made.

        A refusal the gateway adapts to (`ModelGateway.adapt`) is answered by sending the request
        once more, its payload rebuilt and checked again. A refusal for length teaches the run a
        smaller window (`learn_window`) and raises `WindowLearned`, a `GatewayError` of kind
        `context_length`: the caller may compact against the window and ask again.
        """
        adapted = False
        while True:
            try:
                return self._send(request)
            except ModelCallCancelled:
                raise
            except GatewayError as exc:
                if not adapted:
                    adapted = True
                    limit = self.engine.gateway.adapt(exc)
                    if limit is not None:
                        self.announce(limit)
                        continue
                if exc.kind == "context_length" and self.last_measured is not None:
                    raise self.learn_window(exc) from exc
                raise

    def _send(self, request: ModelRequest) -> ModelResponse:
        """Check, measure and send one request once; report it whatever happens."""
        engine = self.engine
        self.last_measured = None
        limit = engine.config.limits.max_model_calls
        if self.model_calls >= limit:
            raise ModelCallLimitReached(
                f"model_call_limit_reached: {self.model_calls} model calls used in this "
                f"execution (limit {limit})"
            )
        # The gateway decides what goes on the wire: that payload is checked and measured.
        payload = engine.gateway.payload(request)
        rules = engine.gateway.payload_rules
        if rules is not None:
            check_payload(
                payload, rules, purpose=request.purpose, notes_placed=self.rendering.notes_wait
            )
        messages, tools = sent_request(payload)
        sent = replace(request, messages=messages, tools=tools)
        measured = self._measure(sent)
        refusal = budget_refusal(request.purpose, measured["upper_bound"], self.budget)
        if refusal is not None:
            raise ContextBudgetExceeded(refusal + fallback_note(self.estimator))
        self.model_calls += 1
        if self.main is not None:
            self.main.managed.state.model_calls = self.model_calls
        self.last_measured = measured
        started = time.perf_counter()
        stream = self._stream(request)
        try:
            response = self._complete(request, stream)
        except GatewayError as exc:
            cancelled = stream is not None and stream.cancelled.is_set()
            error = ModelCallCancelled() if cancelled else exc
            self._report(
                request,
                measured,
                started,
                None,
                f"{error.kind}: {error.message}",
                cancelled,
                refusal=None if cancelled else _refusal(exc),
            )
            self.check_lease()
            if cancelled:
                self.cancel_seen.set()
                raise error from None
            raise
        response = replace(response, message=engine.redactor.value(response.message))
        self._report(request, measured, started, response, None)
        self.check_lease()
        self.succeeded(measured)
        self._learn(sent, response, measured)
        if _cut_before_any_text(response):
            limit = payload.get(rules.output_limit_field) if rules else None
            raise GatewayError(
                "output_limit",
                f"the answer was cut by the output limit ({limit or request.max_output_tokens} "
                "tokens) before any text; a thinking model counts its chain of thought in that "
                "limit, so raise max_output_tokens",
            )
        return response

    def announce(self, limit: LearnedLimit) -> None:
        """Tell the application what the run learned and applies (`EngineHooks.on_learned`)."""
        self.learned.append(limit)
        on_learned = self.engine.hooks.on_learned
        if on_learned is not None:
            on_learned(limit)

    def learn_window(self, exc: GatewayError) -> WindowLearned:
        """Learn a smaller window from a length refusal of the request last sent, and apply it.

        The window (`_budget.learned_window`, the reservation keeping its shares of it:
        `ModelBudget.within`) is written into every context's binding and the
        checkpoint, journaled as a run note and announced; a window that leaves no input room at
        all is announced and journaled only (the version must be republished).
        """
        measured = self.last_measured
        assert measured is not None
        budget = self.budget
        named, counted = _said_tokens(exc, "window"), _said_tokens(exc, "input_tokens")
        refused = measured["upper_bound"]
        largest_ok = self.largest_ok
        window = learned_window(
            budget, named=named, refused=refused, largest_ok=largest_ok, counted=counted
        )
        evidence = getattr(exc, "evidence", None)
        if not isinstance(evidence, str) or not evidence.strip():
            evidence = f"{exc.kind}: {exc.message}"
        limit = LearnedLimit(
            kind="context_window",
            value=window,
            evidence=evidence.strip()[:200],
            refused=refused,
            largest_ok=largest_ok,
        )
        learned = _learned_budget(budget, window)
        if learned is not None:
            self.budget = learned
            self.binding = replace(self.binding, budget=learned)
            for context in self.contexts:
                context.apply_budget(learned)
        if self.main is not None:
            self.main.add_run_note(
                f"context window learned: {window:,} tokens ({limit.evidence}; the refused "
                f"request measured {refused:,}); requests are measured against it from now on"
            )
        self.announce(limit)
        self.save_main()
        return WindowLearned(exc, limit, learned)

    def _stream(self, request: ModelRequest) -> CallStream | None:
        """Return the stream of one call when the gateway streams, its deltas redacted."""
        if not self.engine.gateway.streams:
            return None
        on_delta = self.engine.hooks.on_delta
        relay = (
            _DeltaRelay(request.instance, request.purpose, on_delta, self.engine.redactor)
            if on_delta
            else None
        )
        return CallStream(relay)

    def _complete(self, request: ModelRequest, stream: CallStream | None) -> ModelResponse:
        """Make the gateway call under a watch; a stream is closed as soon as a cancel is seen."""
        gateway = self.engine.gateway
        deadline = gateway.deadline_seconds or self.engine.config.model_call_seconds
        if self.engine.config.cache_key is not None:
            request = replace(request, cache_key=self.engine.config.cache_key)
        if stream is None:
            with self.watch(deadline=deadline):
                response = gateway.complete(request)
        else:
            with self.watch(deadline=deadline, signal=stream.cancelled, on_cancel=stream.cancel):
                response = gateway.complete(request, stream=stream)
            if stream.cancelled.is_set():
                raise ModelCallCancelled()
            if isinstance(stream.on_delta, _DeltaRelay):
                stream.on_delta.flush()
        if not isinstance(response.message, dict):
            raise GatewayError("protocol", "The model's answer could not be understood.")
        return response

    def _measure(self, request: ModelRequest) -> dict[str, Any]:
        """Return the request's estimate, the upper bound the hard check uses, calibration and
        (with a server estimator) the counts the bound was made from."""
        estimator = self.estimator
        server = server_estimator_of(estimator)
        # Counted first: the figures below are then read from the cache, not asked again.
        counts = server.counts(request.messages, request.tools) if server is not None else None
        # The step's trigger and prepared checks measured this same payload: read, not redone.
        measure = step_measure(estimator)
        if isinstance(estimator, CalibratedEstimator):
            decision = measure.decision(request.messages, request.tools)
            measured = {
                "estimate": decision["estimate"],
                "upper_bound": measure.upper_bound(request.messages, request.tools),
                "calibration": {
                    "ratio": decision["ratio"],
                    "base_tokens": decision["base_tokens"],
                    "raw": decision["raw"],
                },
            }
        else:
            measured = {
                "estimate": measure.estimate(request.messages, request.tools),
                "upper_bound": measure.upper_bound(request.messages, request.tools),
                "calibration": None,
            }
        if counts is not None:
            counts = {**counts, "upper_bound": measured["upper_bound"]}
        return {**measured, "counts": counts}

    @staticmethod
    def _recorded_counts(measured: dict[str, Any]) -> dict[str, Any] | None:
        """Return what a call's record says the hard check used (`ModelCallRecord.counts`)."""
        counts = measured["counts"]
        if counts is None:
            return None
        return {key: counts[key] for key in ("server", "fallback", "upper_bound")}

    def _learn(
        self, request: ModelRequest, response: ModelResponse, measured: dict[str, Any]
    ) -> None:
        """Let a calibrated estimator learn from an action call's prompt tokens.

        They are the provider's reported tokens; a call that reported none (a stream without
        usage) learns from the server tokenizer's exact count of the payload, when there is one.
        """
        estimator = self.estimator
        if not isinstance(estimator, CalibratedEstimator) or request.purpose != "action":
            return
        reported = reported_prompt_tokens(response.usage)
        counts = measured.get("counts") or {}
        if reported is None and counts.get("server") is not None:
            reported = counts["estimate"]
        if reported:
            estimator.observe(request.messages, request.tools, reported)
            if self.main is not None:
                self.main.managed.state.calibration = estimator.calibration.to_dict()

    def _report(
        self,
        request: ModelRequest,
        measured: dict[str, Any],
        started: float,
        response: ModelResponse | None,
        error: str | None,
        cancelled: bool = False,
        *,
        refusal: dict[str, Any] | None = None,
    ) -> None:
        on_model_call = self.engine.hooks.on_model_call
        if on_model_call is None:
            return
        redactor = self.engine.redactor
        on_model_call(
            ModelCallRecord(
                purpose=request.purpose,
                instance=request.instance,
                request_estimate=measured["estimate"],
                response=response.to_dict() if response else None,
                usage=redactor.value(response.usage) if response else None,
                latency_ms=round((time.perf_counter() - started) * 1000, 3),
                error=redactor.text(error) if error else None,
                estimator=self.estimator.module_id,
                calibration=measured["calibration"],
                cancelled=cancelled,
                counts=self._recorded_counts(measured),
                refusal=redactor.value(refusal) if refusal else None,
            )
        )

    def run_child(self, sub_agent: SubAgent, task: str) -> str:
        """Run a sub-agent as a child instance and return its final answer."""
        main = self.main
        assert main is not None
        state = main.managed.state
        child_id = f"{state.run_number}.{state.next_child}"
        state.next_child += 1
        child = self.new_context()
        child.create(
            instance=child_id,
            system_prompt=sub_agent.system_prompt,
            task=task,
            run_number=state.run_number,
            attempt=state.attempt,
        )
        main.frame.children[child_id] = child.frame
        toolset = build_toolset(sub_agent.tools, self.engine.registry)
        with self.span("invoke_agent", {"name": sub_agent.name, "instance": child_id}) as late:
            status, answer, error = _InstanceLoop(self, child, toolset, parent=main).run()
            late["status"] = status
        if status == "cancelled":
            raise ToolCancelled(f"sub-agent {sub_agent.name} ({child_id}) was cancelled")
        if status != "succeeded":
            reason = f": {error}" if error else ""
            raise ToolError(f"sub-agent {sub_agent.name} ({child_id}) {status}{reason}")
        return answer or ""


class _DeltaRelay:
    """Pass a stream's pieces to `on_delta`, redacted, holding back what may begin a secret."""

    def __init__(
        self,
        instance: str,
        purpose: str,
        on_delta: Callable[[str, dict[str, Any]], None],
        redactor: Redactor,
    ):
        self.instance = instance
        self.purpose = purpose
        self.on_delta = on_delta
        self.redactor = redactor
        self.content = StreamRedactor(redactor)
        self.reasoning = StreamRedactor(redactor)

    def __call__(self, content: str, reasoning: str, tool_names: list[str]) -> None:
        names = [self.redactor.text(name) for name in tool_names]
        self._send(self.content.feed(content), self.reasoning.feed(reasoning), names)

    def flush(self) -> None:
        """Send what was held back, once the call has answered in full."""
        self._send(self.content.flush(), self.reasoning.flush(), [])

    def _send(self, content: str, reasoning: str, names: list[str]) -> None:
        if content or reasoning or names:
            delta = {
                "content": content,
                "reasoning": reasoning,
                "tool_calls": names,
                "purpose": self.purpose,
            }
            self.on_delta(self.instance, delta)


def _said_tokens(error: GatewayError, name: str) -> int | None:
    """Return a positive token count a refusal carries as `name` (None: none, or not one)."""
    value = getattr(error, name, None)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def _refusal(error: GatewayError) -> dict[str, Any] | None:
    """Return what a refusal said beside its kind (`window`, `requested`, `evidence`), if any."""
    said = {name: getattr(error, name, None) for name in ("window", "requested", "evidence")}
    if said["window"] is None and said["requested"] is None and said["evidence"] is None:
        return None
    return said


def _cut_before_any_text(response: ModelResponse) -> bool:
    """Return True for a reply the length limit ended before any answer or tool call."""
    message = response.message
    return (
        response.finish_reason == "length"
        and not message_text(message).strip()
        and not message.get("tool_calls")
    )


# How an instance ended: (status, final answer, error).
_Ending = tuple[str, str | None, str | None]


class _InstanceLoop:
    """The loop of one instance: the main instance (parent None) or a sub-agent's child."""

    def __init__(
        self,
        execution: _Execution,
        context: ContextManager,
        toolset: Toolset,
        parent: ContextManager | None,
    ):
        self.execution = execution
        self.context = context
        self.toolset = toolset
        self.parent = parent
        # The calls this instance waits on a person's decision for (main instance only).
        self.waiting: list[dict[str, Any]] = []
        reader = getattr(context, "read_record", None)
        self.reader = (
            ReadRecordTool(reader)
            if execution.large_records is not None and reader is not None
            else None
        )

    def offered(self, schemas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Return the tools of the next action request, `read_record` among them when offered.

        From rendering 4 it is offered from the first request: decided before `prepare`, the
        offer could not follow a masking made by that very preparation, and tools that never
        change keep the provider's prompt cache. Before, only while the view held a reference.
        """
        if self.reader is None:
            return schemas
        if self.execution.rendering.offers_reader_first or self.context.holds_references():
            return [*schemas, self.reader.schema()]
        return schemas

    @property
    def is_main(self) -> bool:
        return self.parent is None

    def save(self) -> None:
        # A child's frame hangs in its parent's, so saving the main frame saves every instance.
        self.execution.save_main()

    def take_supplements(self, *, final: bool) -> int:
        """Journal queued supplements (the run's queue feeds the main instance only).

        Return how many entered the view; supplements held in the checkpoint count too.
        """
        source = self.execution.engine.hooks.supplements
        if self.is_main and source is not None:
            for source_key, text in source(final):
                self.context.queue_supplement(str(source_key), text)
        return len(self.context.accept_supplements())

    def awaiting(self, calls: list[dict[str, Any]]) -> bool:
        """Return whether the main instance must wait for decisions before `calls` run."""
        if not self.is_main:
            return False

        def needs(name: str) -> bool:
            tool = self.toolset.get(name)
            return tool is not None and tool.needs_approval

        self.waiting = pending_approvals(calls, needs, self.execution.decisions())
        if self.waiting:
            self.save()
        return bool(self.waiting)

    def open_group(self) -> list[dict[str, Any]]:
        """Return the calls of the open tool group, as an assistant message spells them."""
        return [
            {"id": call["id"], "function": {"name": call["name"], "arguments": call["arguments"]}}
            for call in self.context.managed.state.pending_tool_calls
        ]

    def run(self, *, continuing: bool = False) -> _Ending:
        """Take loop steps until the instance ends; return (status, answer, error).

        `continuing` first runs the open tool group the run waited on decisions for.
        """
        schemas = self.toolset.schemas()
        self.save()
        ended = self.run_group(self.open_group()) if continuing else None
        while ended is None:
            ended = self.step(schemas)
        return ended

    def step(self, schemas: list[dict[str, Any]]) -> _Ending | None:
        """Take one loop step from a safe point; return how the instance ended, or None."""
        context = self.context
        self.settle()
        # A resume answers a call that waited on a person `unknown`; its questions stay journaled.
        context.managed.state.asking = None
        self.journal_asked()
        self.take_supplements(final=False)
        if self.execution.cancel_requested():
            return self.finish("cancelled", None, None)
        response = self.ask_model(schemas)
        if not isinstance(response, ModelResponse):
            return response
        record = context.add_assistant(response.message)
        calls = record.message.get("tool_calls") or []
        if self.execution.cancel_requested():
            return self.cancel_response(record, calls)
        if calls:
            # Saved before the tools run: if the worker dies now, resume finds the calls
            # pending and answers them `unknown` instead of asking the model to repeat them.
            self.save()
            return self.run_group(calls)
        return self.conclude(message_text(record.message))

    def ask_model(self, schemas: list[dict[str, Any]]) -> ModelResponse | _Ending:
        """Prepare the action request (compacting when a trigger holds) and send it.

        Return the model's response, or how the instance ended: the request was refused, the
        call failed, or a cancel was seen. When the server refused a request of this step for
        length (the action call, or a summary call of its compaction), the run has learned a
        smaller window: the request is prepared again against it (compacting) and sent once
        more; a second refusal ends the run, and the next run measures against the window.
        """
        execution = self.execution
        call_model = execution.call_model
        for second in (False, True):
            learned = len(execution.learned)
            # The trigger check, the prepared check and the check of the payload sent measure
            # the same payload when nothing changed between them: once.
            with one_measure_per_step():
                prepared = self.context.prepare(
                    "action", tools=self.offered(schemas), call_model=call_model
                )
                if prepared.request is None:
                    failure = prepared.stop_reason
                elif execution.cancel_seen.is_set():
                    return self.finish("cancelled", None, None)
                else:
                    try:
                        return call_model(prepared.request)
                    except ModelCallCancelled:
                        return self.finish("cancelled", None, None)
                    except WindowLearned as exc:
                        failure = f"{exc.kind}: {exc.message}"
                    except GatewayError as exc:
                        return self.finish("failed", None, f"{exc.kind}: {exc.message}")
                    except (
                        ModelCallLimitReached,
                        ContextBudgetExceeded,
                        PayloadRuleBroken,
                    ) as exc:
                        return self.finish("failed", None, str(exc))
            windows = [w for w in execution.learned[learned:] if w.kind == "context_window"]
            if not windows:
                return self.finish("failed", None, failure)
            republish = self.republish(windows[-1], schemas)
            if republish is not None:
                return self.finish("failed", None, republish)
            if second:
                return self.finish(
                    "failed",
                    None,
                    f"{failure} (refused again once the learned window of "
                    f"{windows[-1].value:,} tokens was applied; the next run measures against it)",
                )
        raise AssertionError("unreachable")

    def republish(self, limit: LearnedLimit, schemas: list[dict[str, Any]]) -> str | None:
        """Return why the run cannot go on under a learned window (None: it can).

        A window that leaves no input room, or less room for a question than the floor a version
        is published with (`_measure.question_room`), needs a version made for it.
        """
        execution = self.execution
        budget = execution.budget
        head = f"context_window_learned: the server's context window is {limit.value:,} tokens"
        if budget.context_window != limit.value:
            return (
                f"{head}, which leaves no room for input beside the output limit "
                f"({budget.max_output_tokens:,}) and the safety margin "
                f"({budget.safety_margin_tokens:,}); republish the agent version for this window"
            )
        messages = self.context.managed.messages
        first = messages[0] if messages else {}
        system = message_text(first) if first.get("role") == "system" else ""
        large = execution.large_records
        room = question_room(
            policy=execution.policy,
            budget=budget,
            estimator=getattr(execution.estimator, "bound_estimator", execution.estimator),
            system_prompt=system,
            tools=self.offered(schemas),
            large_record_limit=large.limit(budget) if large is not None else 0,
        )
        if room.fits:
            return None
        return (
            f"{head}, which leaves room for a question of {room.room:,}, below the floor of "
            f"{QUESTION_ROOM_FLOOR:,}; republish the agent version for this window (a smaller "
            "output limit, fewer tools or a shorter system prompt)"
        )

    def settle(self) -> None:
        """Answer the calls a resume finds pending `unknown` (never run again), a span each."""
        pending = [
            (call["id"], call["name"]) for call in self.context.managed.state.pending_tool_calls
        ]
        self.context.settle_pending()
        for call_id, name in pending:
            self.refuse(call_id, name, "outcome_unknown", None)

    def cancel_response(self, record: Record, calls: list[dict[str, Any]]) -> _Ending:
        """End cancelled after a response: its calls get a `cancelled` result and never run."""
        for call in calls:
            self.refuse(call["id"], call["function"]["name"], "cancelled", CANCELLED_RESULT)
        if not calls:
            self.context.managed.state.candidate_answer = message_text(record.message)
        return self.finish("cancelled", None, None)

    def run_group(self, calls: list[dict[str, Any]]) -> _Ending | None:
        """Run a tool group's calls and save, unless the instance must wait for decisions or
        for a person's answers to a server's questions."""
        if self.awaiting(calls):
            return WAITING_APPROVAL, None, None
        if self.run_tools(calls):
            self.save()
            return WAITING_INPUT, None, None
        self.journal_asked()
        self.save()
        return None

    def journal_asked(self) -> None:
        """Journal the questions and answers of a closed tool group as feedback, after it."""
        state = self.context.managed.state
        asked, state.asked = state.asked, []
        for text in asked:
            self.context.add_feedback(text)

    def wait_for_answers(self, call_id: str, name: str, need: InputRequired) -> None:
        """Keep a server's questions and request state in the checkpoint: the run waits."""
        state = self.context.managed.state
        state.asking = {
            "call_id": call_id,
            "tool": name,
            "server": need.server,
            "questions": need.questions,
            "request_state": need.request_state,
        }
        state.asked = [
            *state.asked,
            *(question_feedback(need.server, name, call_id, q) for q in need.questions),
        ]

    def answered(self, call_id: str, name: str) -> tuple[bool, Any]:
        """Return (waiting, reply) for a call of the group: whether it still waits on answers,
        and the answers to send it again with when it waited on them and has them all."""
        state = self.context.managed.state
        asking = state.asking
        if not (self.is_main and asking and asking["call_id"] == call_id):
            return False, None
        answers = self.execution.answers()
        reply = reply_of(asking, answers)
        if reply is None:
            return True, None
        state.asked = [
            *state.asked,
            *(
                answer_feedback(name, call_id, q["key"], answers[q["key"]])
                for q in asking["questions"]
            ),
        ]
        state.asking = None
        # Saved before the call is sent again: a worker lost during it leaves it `unknown`.
        self.save()
        return False, reply

    def person(self, call_id: str, name: str) -> Callable[..., Any] | None:
        """Return how a tool asks the person while its call is open (None: no one can)."""
        hook = self.execution.engine.hooks.ask
        if hook is None or not self.is_main:
            return None
        state = self.context.managed.state

        def ask(server: str, questions: list[dict[str, Any]], seconds: float) -> Any:
            notes = [question_feedback(server, name, call_id, q) for q in questions]
            answers = hook(call_id, name, server, questions, seconds)
            for question in questions:
                answer = None if answers is None else answers.get(question["key"])
                notes.append(answer_feedback(name, call_id, question["key"], answer))
            state.asked = [*state.asked, *notes]
            if answers is None:
                return None
            return {key: answer.response() for key, answer in answers.items()}

        return ask

    def conclude(self, answer: str) -> _Ending | None:
        """Take a final answer: verify it when asked, drain the supplements, then succeed.

        Return None when the answer failed verification or supplements arrived: another step
        follows.
        """
        state = self.context.managed.state
        state.candidate_answer = answer
        if self.is_main and self.execution.engine.config.verify_completion:
            if self.execution.cancel_requested():
                return self.finish("cancelled", None, None)
            passed, error = self.verify(state.candidate_answer)
            if error is not None:
                return self.finish("failed", None, error)
            if not passed:
                self.save()
                return None
        if self.take_supplements(final=True):
            self.save()
            return None
        return self.finish("succeeded", state.candidate_answer, None)

    def finish(self, status: str, answer: str | None, error: str | None) -> _Ending:
        if status == "cancelled":
            self.context.add_run_note("run cancelled at a safe point")
        elif status == "failed":
            self.context.add_run_note(f"run stopped: {error}")
        self.context.add_status(status, error)
        self.save()
        return status, answer, error

    def verify(self, candidate: str) -> tuple[bool, str | None]:
        """Return (passed, error): an error ends the run, a failed verdict asks for another step."""
        prepared = self.context.prepare("verification", candidate_answer=candidate)
        if prepared.request is None:
            return False, prepared.stop_reason
        try:
            response = self.execution.call_model(prepared.request)
        except ModelCallCancelled:
            # Not passed and no error: the loop's next safe point ends the run cancelled.
            return False, None
        except GatewayError as exc:
            return False, f"verification_failed: {exc.kind}: {exc.message}"
        except (ModelCallLimitReached, ContextBudgetExceeded, PayloadRuleBroken) as exc:
            return False, str(exc)
        verdict = message_text(response.message).strip()
        self.context.add_feedback(f"verification: {verdict or '(no verdict)'}")
        return verdict.upper().startswith("PASS"), None

    def run_tools(self, calls: list[dict[str, Any]]) -> bool:
        """Run every call of one assistant message; each gets exactly one result.

        A call reached after a cancel request gets a `cancelled` result and does not run; a
        tool stopped by the cancellation signal gets a result saying it was interrupted.
        Return True when a server's questions stop the group (it waits for the person).
        """
        for call in calls:
            call_id = call["id"]
            name = call["function"]["name"]
            if self.execution.cancel_requested():
                self.refuse(call_id, name, "cancelled", CANCELLED_RESULT)
                continue
            waiting, reply = self.answered(call_id, name)
            if waiting:
                return True
            if reply is None and self.denied(call_id, name):
                continue
            if self.run_call(call_id, name, call["function"]["arguments"], reply):
                return True
        return False

    def denied(self, call_id: str, name: str) -> bool:
        """Journal the decision on a call that needs approval; return whether it was denied
        (it then has its `denied` result)."""
        tool = self.toolset.get(name)
        if not (tool is not None and tool.needs_approval and self.is_main):
            return False
        decision = self.execution.decisions().get(call_id)
        if decision is None:
            return False
        self.context.add_feedback(decision_feedback(name, call_id, decision))
        # Journaled before the call runs: a worker lost during it keeps the record.
        self.save()
        if not decision.approved:
            self.refuse(call_id, name, "denied", denied_result(decision.note))
        return not decision.approved

    def tool_span(self, call_id: str, name: str) -> AbstractContextManager[dict[str, Any]]:
        """Return the `execute_tool` span of one call (`EngineHooks.span`)."""
        return self.execution.span("execute_tool", {"name": name, "call_id": call_id})

    def refuse(self, call_id: str, name: str, why: str, result: str | None) -> None:
        """Answer a call that never runs with `result` (None: answered already) in a span whose
        `error` says why (one of `NOT_RUN`): the trace keeps every call the model made."""
        with self.tool_span(call_id, name) as late:
            if result is not None:
                self.context.add_tool_result(call_id, result)
            late["error"] = why

    def run_call(self, call_id: str, name: str, arguments: str, reply: Any) -> bool:
        """Run one call and record its result; return True when it waits on a person instead."""
        tool = self.toolset.get(name)
        if tool is None and name == READ_RECORD:
            tool = self.reader
        if tool is None:
            error = f"ERROR: tool {name!r} is not available to this agent."
            self.refuse(call_id, name, "tool_unavailable", error)
            self.context.add_feedback(f"refused call to unavailable tool {name!r} ({call_id})")
            return False
        try:
            parsed = tool_arguments(tool, arguments)
        except ToolError as exc:
            self.refuse(call_id, name, "invalid_arguments", f"ERROR: {exc}")
            self.context.add_feedback(f"tool {name} ({call_id}) failed: {exc}")
            return False
        with self.tool_span(call_id, name) as late:
            waits, late["error"] = self.call_tool(tool, call_id, name, parsed, reply)
        return waits

    def call_tool(
        self, tool: Tool, call_id: str, name: str, arguments: dict[str, Any], reply: Any
    ) -> tuple[bool, str | None]:
        """Run one tool call and record its result; return whether it waits on a person, and
        `tool_error` when it failed."""
        try:
            result = self._run_tool(tool, arguments, call_id, reply, self.person(call_id, name))
        except InputRequired as need:
            if self.is_main:
                self.wait_for_answers(call_id, name, need)
                return True, None
            error = f"{need.server} asked for a person's answer, and none can answer here"
            self.context.add_tool_result(call_id, f"ERROR: {error}")
            self.context.add_feedback(f"tool {name} ({call_id}) failed: {error}")
            return False, "tool_error"
        except ToolCancelled:
            self.context.add_tool_result(call_id, INTERRUPTED_RESULT)
            return False, None
        except ToolError as exc:
            self.context.add_tool_result(call_id, f"ERROR: {exc}")
            self.context.add_feedback(f"tool {name} ({call_id}) failed: {exc}")
            return False, "tool_error"
        if isinstance(result, ToolOutput):
            text = f"ERROR: {result.text}" if result.error else result.text
            self.context.add_tool_result(call_id, text, detail=result.detail)
            if result.error:
                self.context.add_feedback(f"tool {name} ({call_id}) failed: {result.error}")
                return False, "tool_error"
            return False, None
        self.context.add_tool_result(call_id, result)
        return False, None

    def _run_tool(
        self,
        tool: Tool,
        arguments: dict[str, Any],
        call_id: str = "",
        reply: Any = None,
        ask: Callable[..., Any] | None = None,
    ) -> str | ToolOutput:
        signal = threading.Event()
        context = ToolContext(
            cancelled=signal,
            set_plan=getattr(self.context, "set_plan", None),
            search=getattr(self.context, "search_history", None),
            reply=reply,
            call_id=call_id,
            ask=ask,
        )
        limit = tool.limit_seconds(arguments)
        try:
            if limit is None:
                result = tool.run_in(arguments, context)
            else:
                with self.execution.watch(deadline=limit, signal=signal):
                    result = tool.run_in(arguments, context)
        except (ToolError, ToolCancelled, InputRequired, LeaseLostError):
            self.execution.check_lease()
            raise
        except Exception as exc:
            self.execution.check_lease()
            # A tool bug must not end the run or leak a traceback: the model sees a short error.
            raise ToolError(f"the tool failed unexpectedly ({type(exc).__name__})") from exc
        self.execution.check_lease()
        return result if isinstance(result, str | ToolOutput) else str(result)


def tool_arguments(tool: Tool, raw_arguments: str) -> dict[str, Any]:
    """Return a call's arguments, or raise `ToolError` when they are not what `tool` takes."""
    try:
        arguments = json.loads(raw_arguments or "{}")
    except json.JSONDecodeError as exc:
        raise ToolError(f"the arguments are not valid JSON ({exc.msg})") from exc
    if not isinstance(arguments, dict):
        raise ToolError("the arguments must be a JSON object")
    problems = argument_errors(tool.parameters, arguments)
    if problems:
        raise ToolError("invalid arguments: " + "; ".join(problems))
    return arguments


def create_engine(
    gateway: ModelGateway,
    tools: Iterable[str | Tool],
    binding: ContextBinding,
    *,
    hooks: EngineHooks | None = None,
    config: EngineConfig | None = None,
    context_manager: ContextManagerFactory | None = None,
    compaction_policy: CompactionPolicy | None = None,
) -> Engine:
    """Return an engine for one published version.

    Three things define what the model is asked and how much room it has, and every engine needs
    them, so they are positional: the `gateway` that answers, the `tools` offered (built-in tool
    names or `Tool` objects) and the `binding` new runs are measured and rendered with (a
    `ContextBinding`: the context policy, the model budget, the estimator, large records and
    the rendering version; a resumed run follows its checkpoint's). Everything else has a
    default and is named: `hooks` (`EngineHooks`) is where the application plugs in, one run at
    a time; `config` (`EngineConfig`) holds the options.

    The engine's two replaceable parts are named here: `context_manager` replaces the default
    manager (a factory, as `EngineConfig.context_manager`) and `compaction_policy` the compaction
    algorithm; each fills that field of `config`, which may not set it to something else.
    """
    if not isinstance(binding, ContextBinding):
        kind = type(binding).__name__
        raise ConfigurationError("binding", f"expected a ContextBinding, got {kind}")
    return Engine(
        gateway=gateway,
        tools=tools,
        binding=binding,
        hooks=hooks or EngineHooks(),
        config=_config_with(
            config or EngineConfig(),
            context_manager=context_manager,
            compaction_policy=compaction_policy,
        ),
    )


def _config_with(config: EngineConfig, **given: Any) -> EngineConfig:
    """Return `config` with the options given to `create_engine` by keyword filled in."""
    given = {name: value for name, value in given.items() if value is not None}
    defaults = {option.name: option.default for option in fields(EngineConfig)}
    for name, value in given.items():
        current = getattr(config, name)
        if current is not defaults[name] and current is not value:
            raise TypeError(f"create_engine() got {name} both by keyword and in config")
    return replace(config, **given) if given else config
