"""Execute one run on a worker: claim its lease, drive the engine, journal every step.

The worker never holds a row lock, nor a database connection, across a model call: it holds a
lease (a timestamp renewed by every save, and by the process's lease renewer while a model call
or a tool runs) instead, and every save checks that the lease is still its own. A model call is
recorded while the lease is held; one answered after the lease was lost is recorded `discarded`
(it was billed, but the run never used it).
"""

from __future__ import annotations

import datetime
import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentloom import metrics, tracing
from agentloom.engine import (
    EngineHooks,
    LeaseLostError,
    RecordStore,
    cached_prompt_tokens,
    estimate_error,
    reported_completion_tokens,
    reported_prompt_tokens,
)
from agentloom.errors import ApplicationError
from agentloom.providers import PriceInForce
from context_app.engine_adapter import (
    build_engine,
    estimator_name,
    pinned_prompt,
    price_for,
    version_binding,
    version_connection,
)
from models_app.models import ModelConnection
from models_app.services.connections import connection_learn
from sessions_app.models import MAIN_INSTANCE, ModelCall, Run
from sessions_app.selectors.approvals import decisions_of
from sessions_app.selectors.checkpoints import JournalStore, run_checkpoint
from sessions_app.selectors.context import last_reported_call, recent_ratio
from sessions_app.selectors.questions import answers_of
from sessions_app.selectors.resources import resource_uris_named
from sessions_app.services.journal import (
    JournalWriter,
    LeaseLost,
    RunSignals,
    lock_session,
    status_journal,
)
from sessions_app.services.legacy import adopt_legacy_run, is_legacy_checkpoint
from sessions_app.services.live import DeltaPublisher
from sessions_app.services.projection_points import new_run_history
from sessions_app.services.questions import ask_during_call
from sessions_app.services.renewer import RunLease, renewer
from sessions_app.services.runs import run_claim, supplements_close, supplements_take
from sessions_app.services.slots import database_slots
from sessions_app.services.usage import reasoning_tokens

log = logging.getLogger(__name__)


def _price_fields(price: PriceInForce | None) -> dict[str, Any]:
    """Return the ModelCall columns that copy `price` (all empty when it is unknown)."""
    if price is None:
        return {}
    prices = price.prices
    return {
        "price_currency": prices.currency,
        "price_input": prices.input,
        "price_cached_input": prices.cached_input,
        "price_output": prices.output,
        "price_max_prompt_tokens": prices.max_prompt_tokens,
        "price_source_url": price.source_url,
        "price_verified_on": price.verified_on,
        "price_source": price.source,
        "price_band": price.band or "",
    }


def _model_call_row(run_id: int, call: Any, price: PriceInForce | None = None) -> ModelCall:
    """Return the (unsaved) row of one gateway call, with the price in force when it was made.

    Every call is recorded, whatever became of its answer: the provider billed it. The save
    after it records it (`JournalWriter.add_call`); it is `discarded` when this worker no longer
    holds the run's lease then, and when a cancel stopped its stream, which also leaves its cost
    incomplete (usage comes only at a stream's end).
    """
    estimate = max(0, int(call.request_estimate or 0))
    reported = reported_prompt_tokens(call.usage)
    cancelled = bool(getattr(call, "cancelled", False))
    return ModelCall(
        run_id=run_id,
        instance=call.instance or MAIN_INSTANCE,
        purpose=call.purpose,
        request_estimate=estimate,
        estimator=estimator_name(call.estimator),
        reported_prompt_tokens=reported,
        cached_tokens=cached_prompt_tokens(call.usage),
        reported_completion_tokens=reported_completion_tokens(call.usage),
        estimate_error=estimate_error(estimate, reported),
        calibration=call.calibration,
        counts=getattr(call, "counts", None),
        refusal=getattr(call, "refusal", None),
        response=call.response,
        usage=call.usage,
        latency_ms=max(0.0, float(call.latency_ms or 0)),
        error=call.error or "",
        **_price_fields(price),
        discarded=cancelled,
        cost_incomplete=cancelled,
    )


def _run_span(run: Run) -> tuple[str, dict[str, Any], tuple[tuple[str, str], ...]]:
    """Return the name, attributes and links of a run's `invoke_agent` span (no content).

    A run that waited for approval continues in a new execution, queued by the decision: its
    span is a child of that decision's request and task (a trace of its own), linked to the
    span of the execution that stopped to wait. Two segments, each parented by what caused it,
    and the link between them; the run names the trace of its latest execution.
    """
    agent = run.session.agent.name
    waited = bool(run.checkpoint is not None and run.pending_approvals and run.trace_span_id)
    links = ((run.trace_id, run.trace_span_id),) if waited else ()
    return (
        f"invoke_agent {agent}".strip(),
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent or None,
            "gen_ai.agent.id": str(run.session.agent_id),
            "gen_ai.conversation.id": str(run.session_id),
            "agentloom.run.id": run.pk,
            "agentloom.run.number": run.number,
            "agentloom.run.attempt": run.attempt,
        },
        links,
    )


def _call_tracer(labels: tuple[str, str], session_id: int) -> Callable[[Any, ModelCall], None]:
    """Return what records a model call's `chat` span, ended now after its latency (tracing on
    only). What every call of the run shares — its name, provider, model, session and the
    content setting — is made once a run; a call adds its own."""
    provider, model = labels
    name = f"chat {model}"
    shared = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        "gen_ai.conversation.id": str(session_id),
    }
    capture = tracing.capture_content()

    def trace(call: Any, row: ModelCall) -> None:
        response = call.response if isinstance(call.response, dict) else {}
        attributes = {
            **shared,
            "gen_ai.response.model": response.get("model"),
            "gen_ai.response.id": response.get("id"),
            "gen_ai.usage.input_tokens": row.reported_prompt_tokens,
            "gen_ai.usage.output_tokens": row.reported_completion_tokens,
            "gen_ai.usage.cache_read.input_tokens": row.cached_tokens,
            "gen_ai.usage.reasoning.output_tokens": reasoning_tokens(row.usage),
            "agentloom.call.purpose": row.purpose,
        }
        if capture and response.get("message"):
            attributes["gen_ai.output.messages"] = tracing.content_attribute(response["message"])
        error = row.error.split(":", 1)[0][:60] if row.error else None
        tracing.ended_span(name, attributes, seconds=row.latency_ms / 1000, error=error)

    return trace


def _span_hook(run: Run, allowed: set[str]):
    """Return the engine's `span` hook: each tool call, sub-agent and compaction attempt of the
    run as a span under the current one, for as long as it lasts (tracing on only).

    A sub-agent's `invoke_agent` is a child of its delegation tool's `execute_tool` span (the
    conventions' agent invoked as a tool), so its calls and tools hang under it; a compaction's
    summary calls are children of its `agentloom.compaction` span. Names and attributes are
    bounded: a tool the version lists (else `other`), the sub-agents and stages it configured.
    """
    session = str(run.session_id)

    @contextmanager
    def span(kind: str, facts: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if kind == "execute_tool":
            tool = metrics.label(facts.get("name"), allowed)
            name, attributes = (
                f"execute_tool {tool}",
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.id": str(facts.get("call_id") or "")[:100] or None,
                },
            )
        elif kind == "invoke_agent":
            agent = str(facts.get("name") or "")[:100]
            name, attributes = (
                f"invoke_agent {agent}".strip(),
                {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": agent or None,
                    "gen_ai.conversation.id": session,
                    "agentloom.instance": str(facts.get("instance") or "")[:32] or None,
                },
            )
        else:
            name, attributes = (
                "agentloom.compaction",
                {
                    "agentloom.compaction.triggers": [str(t) for t in facts.get("triggers") or ()],
                },
            )
        with tracing.operation_span(name, attributes) as late:
            engine_late: dict[str, Any] = {}
            yield engine_late
            late.update(_late_attributes(kind, engine_late))
            if kind == "compaction":
                _stage_spans(engine_late)

    return span


# The stages a compaction attempt logs rows for (a throttled attempt's row names none: `other`).
_STAGES = ("masking", "summary")


def _stage_spans(late: dict[str, Any]) -> None:
    """Record a child span per stage of a compaction attempt, each as long as it lasted (the
    stages ran one after the other and the last ended now)."""
    rows = [row for row in late.get("rows") or () if isinstance(row, dict)]
    seconds = list(late.get("stage_seconds") or ())
    if len(seconds) != len(rows):
        return
    ended_before = 0.0
    for row, lasted in reversed(list(zip(rows, seconds, strict=True))):
        stage = metrics.label(row.get("stage"), _STAGES)
        tracing.ended_span(
            f"agentloom.compaction.stage {stage}",
            {
                "agentloom.compaction.stage": stage,
                "agentloom.compaction.outcome": row.get("outcome"),
                "agentloom.compaction.reason": row.get("reason"),
                "agentloom.compaction.tokens_before": row.get("before"),
                "agentloom.compaction.tokens_after": row.get("after"),
                "agentloom.compaction.calls": row.get("calls"),
            },
            seconds=lasted,
            ended_before=ended_before,
        )
        ended_before += lasted


def _late_attributes(kind: str, late: dict[str, Any]) -> dict[str, Any]:
    """Return the span attributes of what the engine knew only at an operation's end."""
    if kind == "execute_tool":
        return {"error": late.get("error")}
    if kind == "invoke_agent":
        status = late.get("status")
        return {
            "agentloom.instance.status": status,
            "error": "failed" if status == "failed" else None,
        }
    rows = [row for row in late.get("rows") or () if isinstance(row, dict)]
    if not rows:
        return {}
    stages = [str(row.get("stage") or "summary") for row in rows]
    return {
        "agentloom.compaction.stage": stages[-1],
        "agentloom.compaction.stages": stages if len(stages) > 1 else None,
        "agentloom.compaction.outcome": rows[-1].get("outcome"),
        "agentloom.compaction.reason": rows[-1].get("reason"),
        "agentloom.compaction.tokens_before": rows[0].get("before"),
        "agentloom.compaction.tokens_after": rows[-1].get("after"),
    }


def _count_call(labels: tuple[str, str], row: ModelCall) -> None:
    """Count a model call in the metrics as it returns (billed, whatever becomes of its save)."""
    provider, model = labels
    purpose = metrics.label(row.purpose)
    outcome = "error" if row.error else "ok"
    metrics.model_calls.labels(provider, model, purpose, outcome).inc()
    metrics.model_call_seconds.labels(provider, model, purpose).observe(row.latency_ms / 1000)
    tokens = {
        "input": row.reported_prompt_tokens,
        "cached": row.cached_tokens,
        "output": row.reported_completion_tokens,
        "reasoning": reasoning_tokens(row.usage),
    }
    for kind, count in tokens.items():
        if count:
            metrics.model_tokens.labels(provider, model, kind).inc(count)


def _fail_without_engine(
    run: Run, owner: str, error: str, carried: dict[str, Any] | None = None
) -> None:
    """End a claimed run that could not even start an engine, or whose engine broke (its journal
    gets a status); `carried` are the columns its writer had not saved yet (its trace)."""
    with transaction.atomic():
        lock_session(run.session_id)  # before the run's row: the journal's lock order
        updated = Run.objects.filter(pk=run.pk, lease_owner=owner).update(
            status=Run.Status.FAILED,
            error=error,
            finished_at=timezone.now(),
            lease_owner="",
            lease_expires_at=None,
            **(carried or {}),
        )
        if updated:
            run.refresh_from_db()
            status_journal(run, status=Run.Status.FAILED, error=error)


def run_execute(*, run_id: int, owner: str | None = None) -> str:
    """Run (or continue) `run_id` if its lease can be claimed; return what happened.

    Many runs execute at once in one process: the run's database work holds one of the
    process's database slots (and a connection) only while it lasts, and the process's lease
    renewer watches its model calls and tools.
    """
    owner = owner or uuid.uuid4().hex
    with database_slots.held():
        started = _start(run_id, owner)
    if isinstance(started, str):
        return started
    engine, run, writer, begin = started
    try:
        # Its attributes are made only when tracing is on.
        traced = tracing.span_from(*_run_span(run)) if tracing.configured() else nullcontext()
        with traced as span:
            if span is not None:
                writer.carried.update(_trace_fields(span))
            outcome = begin(engine)
            if span is not None:
                span.set_attribute("agentloom.run.status", str(outcome.status))
    except (LeaseLost, LeaseLostError):
        log.warning("run %s: lease lost, stopping without further writes", run_id)
        with database_slots.held():
            writer.record_unsaved_calls()
        return "lease lost"
    except Exception as error:
        # A bug must not leave the run "running" until its lease expires: fail it now, with
        # the journal as it stands, so it can be inspected and resumed.
        log.exception("run %s: unexpected error in the engine", run_id)
        with database_slots.held():
            writer.record_unsaved_calls()
            _fail_without_engine(
                run, owner, f"internal_error: {error.__class__.__name__}", writer.carried
            )
        return "failed"
    if writer.calls:
        # A call the engine made after its last save (none does today): billed all the same.
        with database_slots.held():
            writer.record_unsaved_calls()

    if outcome.status == Run.Status.WAITING_APPROVAL:
        with database_slots.held():
            if not _wait_for_approval(run_id, owner, outcome.pending_approvals):
                log.warning("run %s: lease lost before it could wait for approval", run_id)
                return "lease lost"
    if outcome.status == Run.Status.WAITING_INPUT:
        with database_slots.held():
            if not _wait_for_input(run_id, owner, outcome.pending_questions):
                log.warning("run %s: lease lost before it could wait for answers", run_id)
                return "lease lost"
    # The save that journaled the terminal status ended the run in the same transaction.
    return outcome.status


def _trace_fields(span: Any) -> dict[str, str]:
    """Return the run's columns that name this execution's trace, for its pages, and its span,
    for the link from a continuation (tracing on only). They go with the run's first save."""
    context = span.get_span_context()
    return {
        "trace_id": format(context.trace_id, "032x"),
        "trace_span_id": format(context.span_id, "016x"),
    }


def _wait_for_approval(run_id: int, owner: str, pending: list[dict[str, Any]]) -> bool:
    """Let the run wait for approval: no worker, no lease, the calls listed (its checkpoint was
    saved as the engine stopped). False when this worker no longer holds the lease."""
    now = timezone.now()
    updated = Run.objects.filter(pk=run_id, lease_owner=owner, status=Run.Status.RUNNING).update(
        status=Run.Status.WAITING_APPROVAL,
        lease_owner="",
        lease_expires_at=None,
        pending_approvals=pending,
        waiting_since=now,
        updated_at=now,
    )
    return updated == 1


def _wait_for_input(run_id: int, owner: str, questions: list[dict[str, Any]]) -> bool:
    """Let the run wait for a person's answers to a tool server's questions, like an approval
    (the questions and the server's request state are in its checkpoint). The answers of an
    earlier round were journaled and sent: a new round starts with none."""
    now = timezone.now()
    updated = Run.objects.filter(pk=run_id, lease_owner=owner, status=Run.Status.RUNNING).update(
        status=Run.Status.WAITING_INPUT,
        lease_owner="",
        lease_expires_at=None,
        pending_questions=questions,
        question_answers={},
        waiting_since=now,
        updated_at=now,
    )
    return updated == 1


def _start(run_id: int, owner: str):
    """Claim the run and build its engine; return what happened, or how to begin.

    That is the engine, the run, its journal writer and the call that starts or resumes it. The
    version's connection is read here once for the whole run (its engine, binding, secrets and
    the prices of its calls).
    """
    if not run_claim(run_id=run_id, owner=owner):
        return "not claimed"
    # The version's connection comes with the run: one statement for both.
    run = Run.objects.select_related(
        "session",
        "session__agent_version__model_connection",
        "session__space",
        "session__agent",
    ).get(pk=run_id)
    if run.checkpoint is not None and is_legacy_checkpoint(run.checkpoint):
        adopt_legacy_run(run)  # journal what survives before the engine continues the frame
        run.refresh_from_db(fields=["checkpoint"])
    version = run.session.agent_version
    connection = version_connection(version)
    hooks, writer = _hooks(run, owner, connection)
    try:
        engine = build_engine(
            version,
            hooks,
            record_store=SlottedStore(JournalStore(run)),
            held=database_slots.wrap,
            connection=connection,
            named_uris=lambda names: resource_uris_named(run.session_id, names),
            cache_key=f"agentloom-session-{run.session_id}",
            member_id=run.session.created_by_id,
        )
    except ApplicationError as error:
        _fail_without_engine(run, owner, error.detail)
        return "failed"
    if run.checkpoint is not None and (run.pending_approvals or run.pending_questions):
        # Queued again once every call it waited on was decided, or every question of a tool
        # server answered: its own transition.
        checkpoint = run_checkpoint(run)
        return engine, run, writer, lambda engine: engine.continue_run(checkpoint)
    if run.checkpoint is not None:
        checkpoint, attempt = run_checkpoint(run), run.attempt
        return engine, run, writer, lambda engine: engine.resume(checkpoint, attempt=attempt)
    binding = version_binding(version, connection=connection)
    start = {
        "run_number": run.number,
        "attempt": run.attempt,
        "system_prompt": pinned_prompt(version.snapshot, run.pinned),
        "question": run.question,
        "history": new_run_history(run.session, binding, as_of=run),
        "calibration_start": (
            recent_ratio(version.model_connection_id)
            if version.snapshot.get("calibration")
            else None
        ),
        "calibration_base": (
            last_reported_call(run) if version.snapshot.get("calibration") else None
        ),
    }
    return engine, run, writer, lambda engine: engine.start(**start)


def _hooks(
    run: Run, owner: str, connection: ModelConnection | None
) -> tuple[EngineHooks, JournalWriter]:
    """Return the run's engine hooks and the journal writer they save with.

    Only the save touches the database at a step, in one slot: the model calls are recorded by
    the save after them, and whether the run was asked to cancel or sent a supplement comes back
    from the run's own writes (each save, and the renewer's heartbeat), so the queue is read
    only when it grew.
    """
    run_id = run.pk
    writer = JournalWriter(run, lease_owner=owner)
    handed_out: set[int] = set()
    version = run.session.agent_version
    # The supplement count up to which the queue has been read (0: nothing to read yet).
    read_upto = 0

    def price(call: Any) -> PriceInForce | None:
        # The price in force when the call started (a scheduled band by the time of day),
        # copied into it as it is recorded.
        started = timezone.now() - datetime.timedelta(milliseconds=call.latency_ms or 0)
        return price_for(version, started, connection=connection)

    def supplements(final: bool) -> list[tuple[str, str]]:
        nonlocal read_upto
        added = writer.signals.supplements_added
        if added is not None and added <= read_upto:
            if not final or writer.signals.supplements_closed:
                # Closed at a count already read: by the renewal after the final answer.
                return []
            with database_slots.held():
                if supplements_close(run_id=run_id, added=added):
                    return []
        with database_slots.held():
            items = supplements_take(run_id=run_id, exclude=handed_out, final=final)
        if added is not None:
            read_upto = max(read_upto, added)
        handed_out.update(item.pk for item in items)
        return [(str(item.pk), item.text) for item in items]

    deltas = DeltaPublisher(run_id)
    verifies = bool(version.snapshot.get("verify_completion"))

    budget = version.snapshot.get("budget") or {}
    call_labels = (metrics.label(budget.get("provider")), metrics.label(budget.get("model_id")))
    trace_call = _call_tracer(call_labels, run.session_id) if tracing.configured() else None

    def on_model_call(call: Any) -> None:
        deltas.end_call(call.instance, call.purpose, failed=call.response is None)
        row = _model_call_row(run_id, call, price(call))
        writer.add_call(row)
        _count_call(call_labels, row)
        if trace_call is not None:
            trace_call(call, row)
        # The run's signals are as old as its last write, from before the call: renewing the
        # lease reads them again, in this slot, for the cancel check that follows the answer.
        # After the answer the run ends with, the same statement closes its supplement queue.
        writer.renew(close_queue_upto=read_upto if _ends_the_run(call, verifies) else None)

    def on_learned(learned: Any) -> None:
        # Recorded on the connection for new runs and versions; the run itself already
        # applied it (its checkpoint's binding and its journal hold it).
        _record_learned(run, learned)

    def signalled(signals: RunSignals) -> None:
        writer.signals = signals

    def should_cancel() -> bool:
        # As of the run's last write (a save, the renewal after a model call, the heartbeat).
        return writer.signals.cancel_requested

    held = database_slots.wrap
    decisions = decisions_of(run)
    answers = answers_of(run)
    hooks = EngineHooks(
        on_learned=held(on_learned),
        save=held(writer.sync),
        decisions=lambda: decisions,
        answers=lambda: answers,
        ask=_asker(run_id, owner),
        on_model_call=held(on_model_call),
        # The database channel writes deltas: each batch holds a slot like any other write.
        on_delta=held(deltas.publish),
        should_cancel=should_cancel,
        supplements=supplements,
        # No thread per call: the process's renewer watches every call of every run.
        watch=renewer.run(RunLease(run_id=run_id, owner=owner, on_signals=signalled)),
        span=_span_hook(run, writer.allowed_tools) if tracing.configured() else None,
    )
    return hooks, writer


def _ends_the_run(call: Any, verifies: bool) -> bool:
    """Return whether the engine takes `call`'s answer as the run's final answer at once.

    That is an action call of the main instance answered without tool calls, with no
    verification to come: the engine then drains the supplement queue and closes it, unless a
    cancel was asked (it ends the run cancelled instead). The renewal after such a call closes
    the queue itself when nothing was queued since it was last read, so that drain costs no
    statement; when something was, the queue stays open and is read as at any final safe point.
    """
    if verifies or call.error or call.purpose != ModelCall.Purpose.ACTION:
        return False
    if (call.instance or MAIN_INSTANCE) != MAIN_INSTANCE:
        return False
    message = (call.response or {}).get("message")
    return isinstance(message, dict) and not message.get("tool_calls")


def _asker(run_id: int, owner: str) -> Any:
    """Return the hook by which a call that is open asks the run's person (2025 revisions)."""

    def ask(call_id: str, tool: str, server: str, questions: list[dict], seconds: float) -> Any:
        listed = [{**q, "call_id": call_id, "tool": tool, "server": server} for q in questions]
        return ask_during_call(run_id, owner, listed, seconds)

    return ask


def _record_learned(run: Run, learned: Any) -> None:
    """Record what the run learned from its server on the version's connection, once.

    A failure to record it never fails the run that learned it: the run applied it already.
    """
    version = run.session.agent_version
    if version.model_connection_id is None:
        return
    budget = version.snapshot.get("budget") or {}
    try:
        connection_learn(
            connection_id=version.model_connection_id,
            kind=learned.kind,
            value=learned.value,
            evidence=learned.evidence,
            user_id=run.session.created_by_id,
            origin=f"run #{run.number} of session {run.session_id}",
            serves=(budget.get("provider"), budget.get("model_id")),
        )
    except ApplicationError as error:
        log.warning("run %s: what it learned was not recorded: %s", run.pk, error.detail)


class SlottedStore(RecordStore):
    """A record store whose every read holds a database slot (the arguments pass through)."""

    def __init__(self, store: RecordStore):
        self.store = store

    def records(self, *args, **kwargs):
        with database_slots.held():
            return self.store.records(*args, **kwargs)

    def journal(self, *args, **kwargs):
        with database_slots.held():
            return self.store.journal(*args, **kwargs)

    def history(self, *args, **kwargs):
        with database_slots.held():
            return self.store.history(*args, **kwargs)

    def main_record(self, *args, **kwargs):
        with database_slots.held():
            return self.store.main_record(*args, **kwargs)

    def search(self, *args, **kwargs):
        with database_slots.held():
            return self.store.search(*args, **kwargs)
