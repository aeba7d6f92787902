"""Replay: what a session would hand a new run, and a run re-driven from its own recordings.

`replay_run` builds a fresh engine from the run's frozen version, answers every model call with
the run's stored `ModelCall` responses (or their recorded errors; calls `discarded` after a lost
lease were never used and are skipped), every tool call with the tool result recorded in the
journal (a tool stopped by a cancel stops again; `update_plan`, which only sets the engine's own
plan, runs again), and the supplements, cancellation and lost-worker stops of each attempt at the
points the journal shows. It then compares the records and views it produced with
the journal and the stored checkpoint, ignoring timestamps. Any difference means the journal,
the checkpoint or the stored model responses are not what the engine made of them.

A tool server's questions are asked again as the run met them (`question_rounds`): a call that
waited raises them, and the run continues with the answers the person gave; a question asked
during a call gets the recorded answers (or none, when no one answered in time).
"""

from __future__ import annotations

import difflib
import json
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agentloom.engine import (
    CANCELLED_RESULT,
    INTERRUPTED_RESULT,
    SEARCH_HISTORY,
    UNKNOWN_RESULT,
    WAITING_APPROVAL,
    WAITING_INPUT,
    Answer,
    Checkpoint,
    ContextBinding,
    Decision,
    Engine,
    EngineConfig,
    EngineError,
    EngineHooks,
    ExecutionLimits,
    GatewayError,
    InputRequired,
    JournalContextManager,
    ModelGateway,
    ModelRequest,
    ModelResponse,
    RunOutcome,
    Tool,
    ToolCancelled,
    ToolContext,
    ToolError,
    ToolOutput,
    block_masks,
    builtin_tools,
    compaction_of,
    create_engine,
    is_run_note,
    iter_frame_records,
    rendering_of,
)
from agentloom.errors import ApplicationError
from agentloom.toolservers import failure_reason
from context_app.engine_adapter import gateway_for, pinned_prompt, run_measures, version_binding
from context_app.services.server_tools import server_tools_of
from sessions_app.models import MAIN_INSTANCE, ModelCall, Run, SessionMessage
from sessions_app.selectors.approvals import decisions_of
from sessions_app.selectors.checkpoints import JournalStore, full_checkpoint
from sessions_app.selectors.history import history_for_new_run, main_records_after
from sessions_app.selectors.runs import call_responses
from sessions_app.selectors.views import compliant_view, view_content

ERROR_PREFIX = "ERROR: "
# Tools that only change or read the engine's own state and the journal up to the run's
# watermark: deterministic, so a replay runs them again (a search reads the journal's index as
# `read_record` reads the journal).
_ENGINE_TOOLS = {"update_plan", SEARCH_HISTORY}


# --- replay --session --------------------------------------------------------------------------


def describe_session_history(session) -> str:
    """Return a readable account of the history a new run of `session` would receive."""
    binding = version_binding(session.agent_version)
    view = compliant_view(session, binding)
    watermark = view.watermark if view else 0
    history = history_for_new_run(session, binding)
    lines = [f"session {session.pk} · agent version {session.agent_version.number}"]
    if view is None:
        lines.append("no compliant reusable view: projecting every main-instance record")
    else:
        lines.append(
            f"view r{view.revision} (saved by run {view.run.number}) · watermark {view.watermark}"
            f" · {len(view_content(view)[0])} message(s)"
        )
    appended = main_records_after(session, watermark)
    lines.append(f"records appended after seq {watermark}: {len(appended)}")
    for record in appended:
        text = json.dumps(record.message, ensure_ascii=False)
        lines.append(f"  #{record.seq:<6} run {record.run_id:<4} {record.kind:<12} {text[:100]}")
    lines.append(
        f"counters: user_turns={history.user_turns} model_steps={history.model_steps} "
        f"baselines=({history.baseline_user_turns}, {history.baseline_model_steps})"
    )
    lines.append(f"projected history: {len(history.messages)} message(s)")
    return "\n".join(lines)


# --- replay --run ------------------------------------------------------------------------------


class _StopAttempt(Exception):
    """Raised from the save hook where the original worker died."""


class _Asked:
    """The run's rounds of a server's questions, by tool, and the answers of the round met last."""

    def __init__(self, rounds: list[dict[str, Any]]):
        self.rounds: dict[str, deque] = defaultdict(deque)
        for asked in rounds:
            self.rounds[asked["tool"]].append(asked)
        self.current: dict[str, Answer] = {}

    def take(self, tool: str) -> dict[str, Any]:
        """Take the next round of `tool`, its answers becoming the current ones."""
        asked = self.rounds[tool].popleft()
        self.current = {
            key: Answer(entry["action"], entry["by"], entry["at"], entry.get("content"))
            for key, entry in (asked["answers"] or {}).items()
        }
        return asked

    def follows(self, tool: str, call_id: str, *, open_call: bool) -> bool:
        """Return whether the next round of `tool` is one of call `call_id`, of that kind."""
        waiting = self.rounds[tool]
        return (
            bool(waiting)
            and waiting[0]["call_id"] == call_id
            and (waiting[0]["open_call"] == open_call)
        )

    def answered(self, pending: list[dict[str, Any]]) -> bool:
        return bool(pending) and all(item["key"] in self.current for item in pending)


class _ReplayTool(Tool):
    """A tool that answers with results recorded in the journal, in order, never running."""

    def __init__(self, original: Tool, recorded: deque, asked: _Asked | None = None):
        self.name = original.name
        self.description = original.description
        self.parameters = original.parameters
        self.needs_approval = original.needs_approval
        self._recorded = recorded
        self._asked = asked

    def run_in(self, arguments: dict[str, Any], context: ToolContext) -> str | ToolOutput:
        asked = self._asked
        if asked is not None and asked.follows(self.name, context.call_id, open_call=False):
            taken = asked.take(self.name)
            raise InputRequired(
                server=taken["server"], questions=taken["questions"], request_state=None
            )
        while asked is not None and asked.follows(self.name, context.call_id, open_call=True):
            taken = asked.take(self.name)
            if context.ask is not None:
                context.ask(taken["server"], taken["questions"], 0.0)
        return self.run(arguments)

    def run(self, arguments: dict[str, Any]) -> str | ToolOutput:
        if not self._recorded:
            raise ToolError(f"replay: no recorded result left for tool {self.name!r}")
        message = self._recorded.popleft()
        result = message.get("content") or ""
        if result == INTERRUPTED_RESULT:
            raise ToolCancelled("stopped by a cancellation, as recorded")
        if "detail" in message:
            # A tool-server result: its text, its whole result and whether it failed.
            failed = result.startswith(ERROR_PREFIX)
            text = result[len(ERROR_PREFIX) :] if failed else result
            error = failure_reason(text) if failed else None
            return ToolOutput(text, detail=message["detail"], error=error)
        if result.startswith(ERROR_PREFIX):
            raise ToolError(result[len(ERROR_PREFIX) :])
        return result


class _RecordedGateway(ModelGateway):
    """A gateway that answers with the run's stored responses (or raises their errors), in order.

    Its payloads are the run's provider's (`shape`), so requests are measured and checked as
    they were when the run was made.
    """

    provider = "replay"
    model_id = "replay"

    def __init__(self, steps: list[ModelResponse | GatewayError], shape: ModelGateway | None):
        self._steps = deque(steps)
        self.used = 0
        if shape is not None:
            self.payload = shape.payload
            self.payload_rules = shape.payload_rules

    def complete(self, request: ModelRequest) -> ModelResponse:
        if not self._steps:
            raise EngineError(f"replay: no stored model call left for request {self.used + 1}")
        self.used += 1
        step = self._steps.popleft()
        if isinstance(step, GatewayError):
            raise step
        return step


@dataclass
class _Attempt:
    number: int
    status: str | None = None
    error: str | None = None
    # Main-instance records of the run's frame before this attempt's status row.
    records_before_status: int = 0
    # The status row was written outside the engine (lease sweep, cancel while queued, a run
    # that could not build its engine), so the frame does not hold it.
    outside_engine: bool = False
    # No engine ever ran this attempt: nothing was journaled between it and the one before.
    never_ran: bool = False
    # For an attempt cancelled while running: how many main records the frame held when the
    # engine saw the cancel (its `cancelled` results and the run note come after).
    cancel_at: int | None = None


@dataclass
class ReplayReport:
    differences: list[str] = field(default_factory=list)
    model_calls: int = 0
    attempts: int = 0

    @property
    def ok(self) -> bool:
        return not self.differences


def _provider_shape(version) -> ModelGateway | None:
    """Return the version's gateway, never called: what its requests look like on the wire."""
    try:
        gateway = gateway_for(version)
    except ApplicationError:
        return None
    return gateway


def _response_steps(calls: list[ModelCall]) -> list[Any]:
    """Return the stored answers and errors in order; a refusal carries again what it said
    (`ModelCall.refusal`: the window it named, the size it refused, its words), so the replay
    learns what the run learned."""
    steps: list[Any] = []
    for call, response in zip(calls, call_responses(calls), strict=True):
        if call.error:
            kind, _, message = call.error.partition(": ")
            error = GatewayError(kind, message)
            for name, value in (call.refusal or {}).items():
                if name in ("window", "requested", "evidence"):
                    setattr(error, name, value)
            steps.append(error)
        else:
            steps.append(ModelResponse.from_dict(response))
    return steps


def _recorded_tool_results(rows: list[SessionMessage]) -> dict[str, deque]:
    """Return, per tool name, the results the run's tools produced, in the order they ran."""
    names: dict[str, str] = {}
    for row in rows:
        if row.kind == "assistant":
            for call in row.message.get("tool_calls") or []:
                names[call["id"]] = call["function"]["name"]
    results: dict[str, deque] = defaultdict(deque)
    for row in rows:
        if row.kind != "tool_result":
            continue
        content = row.message.get("content") or ""
        name = names.get(row.message.get("tool_call_id"))
        # Placeholders for interrupted or cancelled calls and refusals are made by the engine,
        # not a tool.
        if (
            name is None
            or content in (UNKNOWN_RESULT, CANCELLED_RESULT)
            or "is not available to this agent" in content
        ):
            continue
        results[name].append(row.message)
    return results


def _attempts(run: Run, main_rows: list[SessionMessage], engine_keys: set[str]) -> list[_Attempt]:
    """Return each execution of the run with how it ended and how far the journal got.

    `engine_keys` are the entry keys of the stored checkpoint's main records: a status or
    supplement row missing from them was written outside the engine.
    """
    attempts = {n: _Attempt(n) for n in range(1, run.attempt + 1)}
    count, since_previous = 0, 0
    cancel_from = None
    for row in main_rows:
        if row.kind == "supplement" and row.entry_key not in engine_keys:
            continue  # journaled when the run ended before showing it: no engine work
        if row.kind != "status":
            cancelled = row.kind == "tool_result" and row.message.get("content") == CANCELLED_RESULT
            note = row.kind == "feedback" and is_run_note(row.message)
            if cancelled or note:
                cancel_from = count if cancel_from is None else cancel_from
            else:
                cancel_from = None
            count += 1
            # The question alone is no sign of engine work: it is also journaled when a queued
            # run is cancelled or swept before any worker started it.
            since_previous += row.kind != "user_input"
            continue
        number = int(row.entry_key.split(":", 1)[1].split(".", 1)[0])
        attempt = attempts.setdefault(number, _Attempt(number))
        attempt.status = row.message.get("status")
        attempt.error = row.message.get("error")
        attempt.records_before_status = count
        attempt.outside_engine = row.entry_key not in engine_keys
        attempt.never_ran = attempt.outside_engine and since_previous == 0
        if attempt.status == "cancelled" and not attempt.outside_engine:
            attempt.cancel_at = cancel_from
        since_previous, cancel_from = 0, None
        if not attempt.outside_engine:
            count += 1
    return [attempts[n] for n in sorted(attempts)]


def _row_text(instance: str, kind: str, entry_key: str, message: Any) -> str:
    return json.dumps(
        {"instance": instance, "kind": kind, "entry_key": entry_key, "message": message},
        sort_keys=True,
        ensure_ascii=False,
    )


def _by_instance(items) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    for instance, kind, entry_key, message in items:
        grouped[instance].append(_row_text(instance, kind, entry_key, message))
    return grouped


def _diff(label: str, expected: list[str], actual: list[str]) -> list[str]:
    if expected == actual:
        return []
    lines = difflib.unified_diff(
        expected, actual, fromfile=f"{label} (stored)", tofile=f"{label} (replayed)", lineterm=""
    )
    return ["\n".join(lines)]


def _snapshot_text(snapshot: dict[str, Any]) -> str:
    comparable = {k: v for k, v in snapshot.items() if k != "metrics"}
    comparable["metrics"] = {
        k: v for k, v in (snapshot.get("metrics") or {}).items() if k not in {"at"}
    }
    return json.dumps(comparable, sort_keys=True, ensure_ascii=False)


@dataclass
class _Recordings:
    """What a run left behind: its journal rows, its model calls and its stored checkpoint."""

    rows: list[SessionMessage]
    main_rows: list[SessionMessage]
    calls: list[ModelCall]
    checkpoint: dict[str, Any]
    # The entry keys of the stored checkpoint's main records, and where each entered (local seq).
    position: dict[str, int]

    @classmethod
    def of(cls, run: Run) -> _Recordings:
        rows = list(SessionMessage.objects.filter(run=run).order_by("seq"))
        checkpoint = full_checkpoint(run) or {}
        stored_main = (checkpoint.get("context") or {}).get("records") or []
        return cls(
            rows=rows,
            main_rows=[row for row in rows if row.instance == MAIN_INSTANCE],
            calls=list(ModelCall.objects.filter(run=run, discarded=False).order_by("id")),
            checkpoint=checkpoint,
            position={record["entry_key"]: record["seq"] for record in stored_main},
        )

    @property
    def engine_keys(self) -> set[str]:
        return set(self.position)


def _replay_tools(
    snapshot: dict[str, Any], rows: list[SessionMessage], asked: _Asked
) -> list[Tool]:
    """Return the version's tools, each answering from the journal (engine-only tools run)."""
    recorded = _recorded_tool_results(rows)
    originals = builtin_tools()
    tools = [
        originals[name] if name in _ENGINE_TOOLS else _ReplayTool(originals[name], recorded[name])
        for name in snapshot.get("tools", [])
        if name in originals
    ]
    # Tool-server tools answer from the journal too: a replay never calls a server.
    tools += [_ReplayTool(tool, recorded[tool.name], asked) for tool in server_tools_of(snapshot)]
    return tools


class _ReplayHooks:
    """The hooks of a replay: supplements, cancels and stops where the journal shows them."""

    def __init__(self, recordings: _Recordings):
        self.position = recordings.position
        # Where each supplement entered the main instance, by its local record seq.
        self.supplements = deque(
            row
            for row in recordings.main_rows
            if row.kind == "supplement" and row.entry_key in self.position
        )
        self.main_managers: list[JournalContextManager] = []
        self.attempt: _Attempt | None = None
        self.last_frame: dict[str, Any] | None = None
        self.last_reference: dict[str, Any] | None = None

    def begin(self, attempt: _Attempt) -> None:
        self.attempt = attempt
        self.main_managers.clear()

    def manager_factory(self, **kwargs) -> JournalContextManager:
        manager = JournalContextManager(**kwargs)
        self.main_managers.append(manager)
        return manager

    def main_record_count(self) -> int:
        for manager in self.main_managers:
            if manager.opened and manager.frame.instance == MAIN_INSTANCE:
                return len(manager.frame.records)
        return 0

    def next_supplements(self, final: bool) -> list[tuple[str, str]]:
        taken: list[tuple[str, str]] = []
        count = self.main_record_count()
        while (
            self.supplements
            and self.position[self.supplements[0].entry_key] == count + len(taken) + 1
        ):
            row = self.supplements.popleft()
            taken.append((row.entry_key.split(":", 1)[1], row.message.get("content") or ""))
        return taken

    def should_cancel(self) -> bool:
        attempt = self.attempt
        if attempt.status != "cancelled":
            return False
        point = (
            attempt.cancel_at if attempt.cancel_at is not None else attempt.records_before_status
        )
        return self.main_record_count() >= point

    def save(self, checkpoint: Checkpoint) -> None:
        frame = checkpoint.full()
        self.last_frame = frame
        self.last_reference = checkpoint.frame
        attempt = self.attempt
        records = (frame.get("context") or {}).get("records") or []
        if attempt.outside_engine and len(records) >= attempt.records_before_status:
            raise _StopAttempt


def _replay_engine(
    run: Run,
    gateway: ModelGateway,
    tools: list[Tool],
    hooks: _ReplayHooks,
    *,
    rendering: int,
    compaction: int,
    decided: dict[str, Decision],
    asked: _Asked,
    start: dict[str, Any] | None = None,
) -> Engine:
    """Return an engine of the run's frozen version, driven by the replay's gateway and hooks.

    `start` holds the budget the run started with (`_start_binding`).
    """
    snapshot = run.session.agent_version.snapshot
    # No counter: a replay never asks a server's tokenizer; it measures with the counts its run
    # recorded (`_run_attempt`).
    policy, budget, estimator = run_measures(snapshot, start or {}, learned=False)
    return create_engine(
        gateway,
        tools,
        ContextBinding(
            policy,
            budget,
            estimator,
            large_records=snapshot.get("large_records"),
            rendering=rendering,
            compaction=compaction,
        ),
        hooks=EngineHooks(
            save=hooks.save,
            should_cancel=hooks.should_cancel,
            supplements=hooks.next_supplements,
            decisions=lambda: decided,
            answers=lambda: asked.current,
            ask=lambda *_question: asked.current or None,
        ),
        config=EngineConfig(
            limits=ExecutionLimits(max_model_calls=settings.RUN_MAX_MODEL_CALLS),
            context_manager=hooks.manager_factory,
            sub_agents=tuple(snapshot.get("sub_agents", [])),
            verify_completion=bool(snapshot.get("verify_completion")),
            # Records read back with `read_record` come from the journal, as in the run.
            record_store=JournalStore(run),
            calibration=snapshot.get("calibration"),
        ),
    )


def _run_attempt(
    engine: Engine,
    run: Run,
    attempt: _Attempt,
    *,
    resume_from: dict[str, Any] | None,
    first: bool,
    rendering: int,
    compaction: int,
    started: dict[str, Any],
    decided: dict[str, Decision],
    asked: _Asked,
    start: dict[str, Any],
    token_counts: dict[str, int] | None,
    masks: dict[int, str],
) -> RunOutcome:
    """Start (the first attempt that ran) or resume one attempt of the run, as it was.

    The first attempt's history shows as stubs the results it was given masked (`masks`, from
    its checkpoint's history block), not those runs masked since (rendering 7).
    """
    if first:
        outcome = engine.start(
            run_number=run.number,
            attempt=attempt.number,
            system_prompt=pinned_prompt(run.session.agent_version.snapshot, run.pinned),
            question=run.question,
            history=history_for_new_run(
                run.session,
                version_binding(
                    run.session.agent_version,
                    rendering=rendering,
                    compaction=compaction,
                    start=start,
                ),
                as_of=run,
                masks=masks,
            ),
            calibration_start=started.get("start"),
            calibration_base=started.get("start_base"),
            token_counts=token_counts,
        )
    else:
        # Resumed from the frame by reference, as the run was: its inherited history keeps
        # where each message came from (a self-contained frame has it inline).
        outcome = engine.resume(resume_from, attempt=attempt.number)
    # A wait whose calls were all decided, or whose questions were all answered, continued by
    # its own transition.
    while (
        outcome.status == WAITING_APPROVAL
        and all(item["call_id"] in decided for item in outcome.pending_approvals)
    ) or (outcome.status == WAITING_INPUT and asked.answered(outcome.pending_questions)):
        outcome = engine.continue_run(outcome.checkpoint.frame)
    return outcome


def _inherited_block(frame: dict[str, Any]) -> dict[str, Any]:
    """Return the history block a stored (`format: 2`) frame names (empty when none)."""
    return ((frame.get("context") or {}).get("inherited") or {}).get("history") or {}


def _differences(recordings: _Recordings, frame: dict[str, Any]) -> list[str]:
    """Return how the replayed frame differs from the journal and the stored checkpoint."""
    engine_keys = recordings.engine_keys
    # Statuses and unshown supplements journaled outside the engine are not the engine's records.
    stored = _by_instance(
        (row.instance, row.kind, row.entry_key, row.message)
        for row in recordings.rows
        if not (row.instance == MAIN_INSTANCE and row.kind in ("status", "supplement"))
        or row.entry_key in engine_keys
    )
    replayed = _by_instance(
        (instance, record["kind"], record["entry_key"], record["message"])
        for instance, record in iter_frame_records(frame)
    )
    differences: list[str] = []
    for instance in sorted(set(stored) | set(replayed)):
        differences += _diff(
            f"journal of instance {instance}", stored.get(instance, []), replayed.get(instance, [])
        )
    checkpoint = recordings.checkpoint
    differences += _diff(
        "model view",
        [json.dumps(m, sort_keys=True, ensure_ascii=False) for m in checkpoint.get("messages", [])],
        [json.dumps(m, sort_keys=True, ensure_ascii=False) for m in frame.get("messages", [])],
    )
    differences += _diff(
        "compaction snapshots",
        [_snapshot_text(s) for s in (checkpoint.get("context") or {}).get("compactions", [])],
        [_snapshot_text(s) for s in (frame.get("context") or {}).get("compactions", [])],
    )
    return differences


def _start_binding(recordings: _Recordings) -> dict[str, Any]:
    """Return the budget the run started with: the one its checkpoint's binding holds, unless
    the run was refused for length itself (it then learned a window from the version's frozen
    budget)."""
    binding = recordings.checkpoint.get("binding") or {}
    refused = any(call.error.startswith("context_length") for call in recordings.calls)
    if refused or "budget" not in binding:
        return {}
    return {"budget": binding["budget"]}


def replay_run(run: Run) -> ReplayReport:
    """Re-drive `run` from its recordings and return the differences found.

    Steps: read the recordings; build an engine of the run's version whose gateway, tools and
    hooks answer from them; run each attempt the journal shows; compare what it made.
    """
    recordings = _Recordings.of(run)
    report = ReplayReport(model_calls=len(recordings.calls))
    steps = _response_steps(recordings.calls)
    gateway = _RecordedGateway(steps, _provider_shape(run.session.agent_version))
    hooks = _ReplayHooks(recordings)
    # Calls that waited for approval are decided as they were in the run.
    decided = decisions_of(run)
    # The run is replayed under the rendering rules and the compaction it was made with.
    rendering = rendering_of(recordings.checkpoint.get("binding")).version
    compaction = compaction_of(recordings.checkpoint.get("binding")).version
    # A tool server's questions are met again as the run met them, with the answers it got.
    asked = _Asked(run.question_rounds or [])
    tools = _replay_tools(run.session.agent_version.snapshot, recordings.rows, asked)
    start = _start_binding(recordings)
    engine = _replay_engine(
        run,
        gateway,
        tools,
        hooks,
        rendering=rendering,
        compaction=compaction,
        decided=decided,
        asked=asked,
        start=start,
    )
    # A calibrated run started from its connection's ratio of that moment and the session's last
    # reported call, both kept in its state.
    started = (recordings.checkpoint.get("state") or {}).get("calibration") or {}
    frame = resume_from = None
    for attempt in _attempts(run, recordings.main_rows, recordings.engine_keys):
        if attempt.never_ran:
            continue
        hooks.begin(attempt)
        report.attempts += 1
        try:
            outcome = _run_attempt(
                engine,
                run,
                attempt,
                resume_from=resume_from,
                first=frame is None,
                rendering=rendering,
                compaction=compaction,
                started=started,
                decided=decided,
                asked=asked,
                start=start,
                token_counts=(recordings.checkpoint.get("state") or {}).get("token_counts"),
                masks=block_masks(_inherited_block(run.checkpoint or {})),
            )
            frame, resume_from = outcome.frame, outcome.checkpoint.frame
        except _StopAttempt:
            frame, resume_from = hooks.last_frame, hooks.last_reference
    if frame is None:
        report.differences.append("nothing was replayed")
        return report
    report.differences += _differences(recordings, frame)
    unused = len(steps) - gateway.used
    if unused:
        report.differences.append(f"{unused} stored model call(s) were not replayed")
    return report
