"""Journal sync: turn an engine checkpoint into ordered, encrypted, idempotent journal rows.

Called on every engine save with a `Checkpoint`: the frame by reference (`format: 2`) and the
records added since the last save. In ONE transaction it allocates session seqs for the new
records from `Session.next_seq` (bumped under the row's lock), inserts them (insert-or-ignore on
(run, instance, entry_key)), marks journaled supplements consumed, stores the encrypted
checkpoint (its compaction snapshots stored apart, once: `snapshots`) and renews the run's lease
in one UPDATE … RETURNING that also tells the worker
whether the run was asked to cancel or sent a supplement (or, in the save that journals the
run's terminal status, ends the run with that status), records the model calls made since the
last save, and records the references of a new compaction snapshot (saving it as a reusable view
when the prefix rule allows). A save costs what was added since the last one: the checkpoint
holds no records and no copy of the inherited history. A save of three new records is four
statements: the seqs, the records, the run, the model call.

A model call is recorded in the save after it (the one that journals its answer), so an answer
the journal holds is stored once: the call's row names the record (`ModelCall.response_seq`)
instead of copying its message. A call whose save never commits (the lease was lost, the engine
failed) is recorded on its own by `JournalWriter.record_unsaved_calls`, `discarded` when the
worker no longer held the lease, with its whole response.

Lock order: a transaction that locks a session's row and one of its runs' rows locks the
SESSION FIRST, then the run (`lock_run`). The writer's save, the sweep, `status_journal`'s
callers, the supplement queue, resume, cancel and legacy adoption all follow it; a transaction
that needs one of the two rows only (a model call's record, the heartbeat, closing the
supplement queue) may lock that row alone. Taking them the other way round lets PostgreSQL
abort one of two such transactions as a deadlock.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agentloom import metrics, tracing
from agentloom.engine import USER_INPUT_KEY, Checkpoint, LeaseLostError, status_key
from context_app.engine_adapter import redactor_for
from sessions_app.models import (
    MAIN_INSTANCE,
    ModelCall,
    Run,
    RunSupplement,
    Session,
    SessionMessage,
)
from sessions_app.selectors.checkpoints import pointed_snapshots
from sessions_app.selectors.runs import answer_reference
from sessions_app.services.live import forget_run
from sessions_app.services.reusable_views import snapshot_save
from sessions_app.services.rows import insert_rows
from sessions_app.services.search_index import OpenBlocks, index_records
from sessions_app.services.snapshots import snapshots_store, stored_frame
from sessions_app.services.usage import UsageOwner, compaction_counts, usage_add

SUPPLEMENT_KEY_PREFIX = "supplement:"


class LeaseLost(LeaseLostError):
    """The worker no longer holds the run's lease (swept, or claimed elsewhere): stop at once."""


@dataclass
class SyncResult:
    inserted: int = 0
    view_revision: int | None = None
    view_refusal: str | None = None
    seqs: dict[tuple[str, str], int] = field(default_factory=dict)


def _record_time(at: str | None) -> datetime:
    moment = parse_datetime(at) if at else None
    return moment or timezone.now()


# instance, kind, entry_key, message, at, and the local seq of a record an engine frame holds
# (None for rows written outside the engine).
JournalEntry = tuple[str, str, str, Any, datetime, int | None]


def append_records(
    *,
    run_id: int,
    session_id: int,
    records: Iterable[JournalEntry],
    known: set[tuple[str, str]] | None = None,
    run_number: int | None = None,
    open_blocks: OpenBlocks | None = None,
) -> list[SessionMessage]:
    """Append the run's records that are not journaled yet, in order; return the new rows.

    Call inside a transaction. Seqs come from `Session.next_seq`, bumped by one UPDATE … RETURNING
    that locks the session row until commit, never from an unlocked max(seq)+1;
    (run, instance, entry_key) makes a repeat a no-op.
    `known` (the run's journaled (instance, entry_key) pairs) spares the query when the caller
    already has it, and `run_number` the one that the search index would make for it: the new
    records are indexed in the same transaction (`services.search_index`), joining the writer's
    `open_blocks` while they have room.
    """
    if known is None:
        known = set(
            SessionMessage.objects.filter(run_id=run_id).values_list("instance", "entry_key")
        )
    fresh = [entry for entry in records if (entry[0], entry[2]) not in known]
    if not fresh:
        return []
    # Reserving the seqs locks the session row until commit: one statement, no read before it.
    seq = _reserve_seqs(session_id, len(fresh))
    rows = []
    for instance, kind, entry_key, message, at, local_seq in fresh:
        rows.append(
            SessionMessage(
                session_id=session_id,
                seq=seq,
                run_id=run_id,
                instance=instance,
                kind=kind,
                entry_key=entry_key,
                local_seq=local_seq,
                message=message,
                created_at=at,
            )
        )
        seq += 1
    insert_rows(rows, ignore_conflicts=True)
    index_records(rows, run_number=run_number, open_blocks=open_blocks)
    return rows


def lock_session(session_id: int) -> None:
    """Lock the session row for this transaction (it exists; deleted or not)."""
    if not Session.objects.select_for_update().filter(pk=session_id).values_list("pk"):
        raise Session.DoesNotExist(f"session {session_id} does not exist")


def lock_run(run_id: int, *, session_id: int) -> Run:
    """Lock run `run_id` of session `session_id` for this transaction, the session's row first."""
    lock_session(session_id)
    return Run.objects.select_for_update().get(pk=run_id)


def status_journal(run: Run, *, status: str, error: str) -> None:
    """Journal the terminal record `status:<attempt>` of `run`, written outside its engine.

    For a run stopped where no engine could write it: swept after its worker was lost, cancelled
    while queued, or unable to build its engine. Call inside the transaction that sets the run's
    status, holding the session's lock and then the run's (`lock_run`); a repeat is a no-op. A
    run that ends before any worker started it has not journaled its question yet; it is
    journaled first, so that every question stays in the session's history; the supplements it
    accepted and never showed follow its status, and its live deltas go (`forget_run`). The error
    is redacted like everything else written for the run.

    The run's end is counted here like one its engine saved: among the spend record's outcomes in
    this transaction, and in the metrics once it commits (its duration only when it had started),
    with a span `agentloom.run.end` under the current one (the request or task that ended it)
    when tracing is on.
    """
    now = timezone.now()
    redactor = redactor_for(run.session.agent_version)
    error = redactor.text(error) if error else error
    records = []
    if run.checkpoint is None:
        question = {"role": "user", "content": redactor.text(run.question)}
        records.append(
            (MAIN_INSTANCE, SessionMessage.Kind.USER_INPUT, USER_INPUT_KEY, question, now, None)
        )
    terminal = {"status": status, "error": error or None}
    records.append(
        (MAIN_INSTANCE, SessionMessage.Kind.STATUS, status_key(run.attempt), terminal, now, None)
    )
    append_records(run_id=run.pk, session_id=run.session_id, records=records, run_number=run.number)
    supplements_journal(run_id=run.pk, session_id=run.session_id)
    forget_run(run.pk)
    usage_add(owner=UsageOwner.of_run(run), ended=status)
    ending = {"status": status, "finished_at": run.finished_at or now}
    # The calls it waited on for a decision never ran.
    waited = [(item.get("tool"), item.get("call_id")) for item in run.pending_approvals or []]
    transaction.on_commit(lambda: _ended_outside(run, ending, error, waited))


def _ended_outside(
    run: Run, ending: dict[str, Any], error: str, waited: list[tuple[Any, Any]]
) -> None:
    """Count the end of a run ended outside its engine, and trace it (once it committed): a
    span `agentloom.run.end` and under it an `execute_tool` span for each call the run waited
    on for a decision, which never ran (`error.type` `cancelled` when the run was cancelled,
    else `outcome_unknown`)."""
    _count_ending(run, ending, [])
    if not tracing.configured():
        return
    attributes = {
        "gen_ai.conversation.id": str(run.session_id),
        "agentloom.run.id": run.pk,
        "agentloom.run.number": run.number,
        "agentloom.run.status": ending["status"],
    }
    with tracing.operation_span("agentloom.run.end", attributes) as late:
        if error:
            late["error"] = error.split(":", 1)[0][:60]
        never_ran = "cancelled" if ending["status"] == Run.Status.CANCELLED else "outcome_unknown"
        allowed = version_tools(run.session.agent_version) if waited else set()
        for tool, call_id in waited:
            name = metrics.label(tool, allowed)
            tracing.ended_span(
                f"execute_tool {name}",
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": str(call_id or "")[:100] or None,
                },
                seconds=0,
                error=never_ran,
            )


def version_tools(agent_version: Any) -> set[str]:
    """Return the tool names an agent version offers (its sub-agents' delegation tools too): the
    values a metric label or span name may carry for a tool; any other is `other`."""
    snapshot = agent_version.snapshot or {}
    names = {str(tool) for tool in snapshot.get("tools") or [] if isinstance(tool, str)}
    return names | {
        f"delegate_{agent.get('name')}"
        for agent in snapshot.get("sub_agents") or []
        if isinstance(agent, dict)
    }


def supplements_journal(
    *, run_id: int, session_id: int, known: set[tuple[str, str]] | None = None
) -> list[SessionMessage]:
    """Journal the accepted supplements of an ended run that no view has taken; return the rows.

    A supplement is journaled exactly once: when it enters the run's view, or — if the run ends
    first — here, at the run's terminal save (or at once, when it is sent to a run that has
    already ended), after the run's status. Its row has the key the engine gives it, so when a
    resume shows it at its first safe point, that record finds it journaled; it stays unconsumed
    until then. Call holding the session's lock.
    """
    now = timezone.now()
    waiting = RunSupplement.objects.filter(run_id=run_id, consumed_at__isnull=True).order_by(
        "position"
    )
    records = [
        (
            MAIN_INSTANCE,
            SessionMessage.Kind.SUPPLEMENT,
            f"{SUPPLEMENT_KEY_PREFIX}{item.pk}",
            {"role": "user", "content": item.text},
            now,
            None,
        )
        for item in waiting
    ]
    if not records:
        return []
    return append_records(run_id=run_id, session_id=session_id, records=records, known=known)


def _reserve_seqs(session_id: int, count: int) -> int:
    """Return the first of `count` session seqs, bumping `Session.next_seq` past them."""
    table = Session._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET next_seq = next_seq + %s WHERE id = %s RETURNING next_seq",  # noqa: S608 - the table name is ours
            [count, session_id],
        )
        row = cursor.fetchone()
    if row is None:
        raise Session.DoesNotExist(f"session {session_id} does not exist")
    return row[0] - count


@dataclass(frozen=True)
class RunSignals:
    """What a run was asked since its worker last wrote it: to cancel, and how many supplements
    it accepted (None for a run older than the count: its queue is always read); and whether
    its supplement queue is closed."""

    cancel_requested: bool
    supplements_added: int | None
    supplements_closed: bool = False


def update_returning_signals(
    run_id: int, owner: str | None, *, close_queue_upto: int | None = None, **fields: Any
) -> RunSignals | None:
    """Set `fields` of run `run_id` — fenced by `owner`'s lease on a running run, unless `owner`
    is None; return the run's signals, or None when no row matched.

    One statement (UPDATE … RETURNING): a worker's every write also tells it whether the run was
    asked to cancel or sent a supplement, so it never asks separately. Each value is prepared by
    its field as a queryset's `update` would (encrypted, JSON, dates; values, not expressions),
    without building a query: a run writes its row this way several times a step.

    `close_queue_upto` also closes the supplement queue in the same statement when no supplement
    came after the one of that count and no cancel was asked (what `supplements_close` does on
    its own): fenced by the count `supplement_add` sets under the run's lock, so a supplement
    accepted before it leaves the queue open, and one sent after it finds it closed.
    """
    meta = Run._meta
    quote = connection.ops.quote_name
    assignments, params = [], []
    for name, value in fields.items():
        if hasattr(value, "resolve_expression"):
            raise TypeError(f"{name}: a run's write takes values, not expressions")
        column = meta.get_field(name)
        prepared = column.get_db_prep_save(value, connection)
        placeholder = (
            column.get_placeholder(prepared, None, connection)
            if hasattr(column, "get_placeholder")
            else "%s"
        )
        assignments.append(f"{quote(column.column)} = {placeholder}")
        params.append(prepared)
    if close_queue_upto is not None:
        closed = quote("supplements_closed")
        assignments.append(
            f"{closed} = CASE WHEN {quote('supplements_added')} <= %s "
            f"AND NOT {quote('cancel_requested')} THEN %s ELSE {closed} END"
        )
        params += [close_queue_upto, True]
    fence = ""
    params.append(run_id)
    if owner is not None:
        fence = f" AND {quote('lease_owner')} = %s AND {quote('status')} = %s"
        params += [owner, Run.Status.RUNNING]
    sql = (
        f"UPDATE {quote(meta.db_table)} SET {', '.join(assignments)} "  # noqa: S608 - our names
        f"WHERE {quote(meta.pk.column)} = %s{fence} "
        "RETURNING cancel_requested, supplements_added, supplements_closed"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if len(rows) != 1:
        return None
    cancel, added, closed = rows[0]
    return RunSignals(
        cancel_requested=bool(cancel), supplements_added=added, supplements_closed=bool(closed)
    )


def renew_lease(
    *, run_id: int, owner: str, close_queue_upto: int | None = None
) -> RunSignals | None:
    """Extend `owner`'s lease on a running run; return what the run was asked meanwhile (its
    cancel flag and supplement count), or None once it no longer holds the lease.

    The heartbeat's write: fenced by the lease owner and the status, it sets only the lease's
    expiry (no other column, not even `updated_at`), so it can never undo another writer — and,
    after the answer the run ends with, closes its supplement queue (`close_queue_upto`: see
    `update_returning_signals`).
    """
    expires = timezone.now() + timedelta(seconds=settings.RUN_LEASE_SECONDS)
    return update_returning_signals(
        run_id, owner, close_queue_upto=close_queue_upto, lease_expires_at=expires
    )


def terminal_fields(checkpoint: Checkpoint) -> dict[str, Any]:
    """Return the Run columns that end the run if `checkpoint` journals its terminal status.

    That is the save whose records hold the main instance's `status` record of this execution
    (the frame's `state.terminal`, cleared when a run is resumed), the last thing an execution
    journals. Its answer is the candidate answer, kept only when the run succeeded. Empty for
    any other save, including a resumed format-1 frame's first, which journals older statuses.
    """
    state = checkpoint.frame.get("state") or {}
    terminal = state.get("terminal")
    journals_it = any(
        instance == MAIN_INSTANCE and record.kind == SessionMessage.Kind.STATUS
        for instance, record in checkpoint.records
    )
    if not terminal or not journals_it:
        return {}
    return ended_run_fields(terminal, state)


# What a run needs only to go on (`ExecutionState`): a run that succeeded is never resumed
# (`run_resume` takes failed and cancelled runs only), so its final checkpoint leaves these out;
# its sub-agents' records are journaled. Its candidate answer stays: a sweep that finds the
# status journaled and the row still running (a worker of an older release) ends it with it.
# What readers of an ended run read stays: the view, the binding, the counters and the inherited
# block (the Context page, replay), the plan, the calibration (a new run's start,
# `last_reported_call`), the server's token counts (replay) and the compaction log.
RESUME_ONLY_STATE = frozenset(
    {
        "run_number",
        "attempt",
        "pending_tool_calls",
        "call_boundary",
        "deferred_messages",
        "waiting_notes",
        "queued_supplements",
        "task_index",
        "children",
        "next_child",
        "terminal",
        "model_calls",
        "compaction_throttle",
        "largest_ok",
        "asking",
        "asked",
    }
)


def finished_checkpoint(stored: dict[str, Any], frame: dict[str, Any]) -> dict[str, Any]:
    """Return `stored` (the frame as stored: snapshots as pointers) as a run that succeeded
    keeps it: without the state only a resume reads (`RESUME_ONLY_STATE`), without the
    candidate answer (the run's `answer`), and each compaction log row without the sources its
    snapshot (`frame`'s, stored apart) holds equal; `selectors.checkpoints.run_checkpoint` reads
    the answer and the sources back. `frame` and `stored` are not changed.
    """
    snapshots = {
        snapshot.get("revision"): snapshot
        for snapshot in (frame.get("context") or {}).get("compactions") or []
    }
    state = {k: v for k, v in (stored.get("state") or {}).items() if k not in RESUME_ONLY_STATE}
    if state.get("candidate_answer") is not None:
        # The run's answer, which the same save writes to its row (`ended_run_fields`).
        del state["candidate_answer"]
    log = []
    for row in state.get("compaction_log") or []:
        snapshot = snapshots.get(row.get("revision")) if isinstance(row, dict) else None
        if snapshot is not None and "sources" in row and row["sources"] == snapshot.get("sources"):
            row = {k: v for k, v in row.items() if k != "sources"}
        log.append(row)
    if "compaction_log" in state:
        state["compaction_log"] = log
    return {**stored, "state": state}


def ended_run_fields(terminal: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """Return the Run columns of a run ended with `terminal` ({status, error}) in `state`."""
    status = terminal.get("status")
    return {
        "status": status,
        "answer": state.get("candidate_answer") if status == Run.Status.SUCCEEDED else None,
        "error": terminal.get("error") or "",
        "finished_at": timezone.now(),
        "lease_owner": "",
        "lease_expires_at": None,
        # Calls a wait listed no longer wait (their decisions stay, for replay); nor questions.
        "pending_approvals": [],
        "pending_questions": [],
        "waiting_since": None,
    }


def _count_ending(run: Run, ending: dict[str, Any], stages: list[tuple[str, str]]) -> None:
    """Count a run's end and its compaction stages in the metrics (once they committed)."""
    for stage, outcome in stages:
        metrics.compactions.labels(metrics.label(stage), metrics.label(outcome)).inc()
    status = ending.get("status")
    if status:
        metrics.runs_finished.labels(status).inc()
        if run.started_at is not None:
            seconds = (ending["finished_at"] - run.started_at).total_seconds()
            metrics.run_seconds.labels(status).observe(max(0.0, seconds))


def _compaction_log(frame: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Return the main instance's compaction log rows of a checkpoint frame."""
    state = (frame or {}).get("state") if isinstance(frame, dict) else None
    log = (state or {}).get("compaction_log") if isinstance(state, dict) else None
    return log if isinstance(log, list) else []


class JournalWriter:
    """Syncs one run's checkpoints into the journal for the worker holding its lease.

    It also keeps what the run's writes returned (`signals`: a cancel request, the supplement
    count) and the model calls made since the last save (`add_call`), recorded by the next one.
    """

    def __init__(self, run: Run, *, lease_owner: str | None):
        self.run_id = run.pk
        self.session_id = run.session_id
        self.inherited_watermark = run.inherited_watermark
        self.lease_owner = lease_owner
        self.written: dict[str, Any] | None = None
        self.signals = RunSignals(
            cancel_requested=run.cancel_requested,
            supplements_added=run.supplements_added,
            supplements_closed=run.supplements_closed,
        )
        self.calls: list[ModelCall] = []
        # The snapshots stored for the run: the ones its stored checkpoint points to.
        self.stored_snapshots = pointed_snapshots(run.checkpoint)
        self._run = run
        self._owner: UsageOwner | None = None
        # Compaction log rows counted in the spend record (those of earlier attempts were).
        self.compactions_counted = len(_compaction_log(run.checkpoint))
        # Run columns that go with the next save's write, not a statement of their own (the
        # trace of this execution, known once its span starts).
        self.carried: dict[str, Any] = {}
        # The names of the tool calls made, by (instance, call id), until their results come.
        self.tool_names: dict[tuple[str, Any], str | None] = {}
        rows = SessionMessage.objects.filter(run_id=run.pk).values_list(
            "instance", "entry_key", "local_seq"
        )
        if run.attempt == 1 and run.checkpoint is None and run.status == Run.Status.RUNNING:
            # A first attempt claimed before any save has journaled nothing: whatever journals
            # for a run outside its engine (`status_journal`) ends it, and an ended run runs
            # again only when resumed, as a later attempt.
            rows = rows.none()
        self.known: set[tuple[str, str]] = set()
        # The search-index blocks this writer's saves may still extend (a new writer starts
        # new ones).
        self.index_blocks: OpenBlocks = {}
        # Rows journaled before frames referred to records by local seq (format 1).
        self.unlocated: set[tuple[str, str]] = set()
        for instance, entry_key, local_seq in rows:
            self.known.add((instance, entry_key))
            if local_seq is None:
                self.unlocated.add((instance, entry_key))

    @property
    def owner(self) -> UsageOwner:
        """Return whose usage the run's calls are (read with the run, or once when first needed)."""
        if self._owner is None:
            self._owner = UsageOwner.of_run(self._run)
        return self._owner

    def add_call(self, call: ModelCall) -> None:
        """Keep a model call's row (unsaved) for the next save to record."""
        self.calls.append(call)

    def renew(self, *, close_queue_upto: int | None = None) -> RunSignals:
        """Renew the lease (the heartbeat's UPDATE … RETURNING) and keep the signals it returns;
        `close_queue_upto`: see `update_returning_signals`."""
        signals = renew_lease(
            run_id=self.run_id, owner=self.lease_owner or "", close_queue_upto=close_queue_upto
        )
        if signals is None:
            raise LeaseLost(f"run {self.run_id} is no longer leased by this worker")
        self.signals = signals
        return signals

    def record_unsaved_calls(self) -> None:
        """Record the calls no save recorded (its save failed, or never came): billed anyway.

        Each is `discarded` when this worker no longer holds the run's lease: the run never used
        its answer. Its response is kept whole, as no journal record holds it.
        """
        if not self.calls:
            return
        with transaction.atomic():
            held = self.lease_owner is None or bool(
                Run.objects.select_for_update()
                .filter(pk=self.run_id, lease_owner=self.lease_owner, status=Run.Status.RUNNING)
                .values_list("pk")
            )
            for call in self.calls:
                call.discarded = call.discarded or not held
            insert_rows(self.calls)
            usage_add(owner=self.owner, calls=self.calls)
        self.calls = []

    def _renew_lease(self, **fields: Any) -> None:
        if self.lease_owner is not None:
            fields.setdefault(
                "lease_expires_at", timezone.now() + timedelta(seconds=settings.RUN_LEASE_SECONDS)
            )
        fields["updated_at"] = timezone.now()
        signals = update_returning_signals(self.run_id, self.lease_owner, **fields)
        if signals is None:
            raise LeaseLost(f"run {self.run_id} is no longer leased by this worker")
        self.signals = signals

    def _locate(self, checkpoint: Checkpoint) -> None:
        """Give rows journaled under format 1 the local seqs their records have in the frame."""
        late = [
            (instance, record)
            for instance, record in checkpoint.records
            if (instance, record.entry_key) in self.unlocated
        ]
        for instance, record in late:
            SessionMessage.objects.filter(
                run_id=self.run_id, instance=instance, entry_key=record.entry_key
            ).update(local_seq=record.seq)
            self.unlocated.discard((instance, record.entry_key))

    def _mark_consumed(self, checkpoint: Checkpoint) -> None:
        """Mark the supplements that entered the view in this save consumed.

        One journaled when its run ended before any view took it is consumed only now, when a
        resume shows it: its row was journaled then, and this record finds it known.
        """
        ids = [
            record.entry_key[len(SUPPLEMENT_KEY_PREFIX) :]
            for instance, record in checkpoint.records
            if instance == MAIN_INSTANCE and record.kind == SessionMessage.Kind.SUPPLEMENT
        ]
        ids = [int(key) for key in ids if key.isdigit()]
        if ids:
            RunSupplement.objects.filter(
                run_id=self.run_id, pk__in=ids, consumed_at__isnull=True
            ).update(consumed_at=timezone.now())

    def _record_usage(self, frame: dict[str, Any], ending: dict[str, Any]) -> None:
        """Add the save's calls, the run's end and new compaction stages to the spend record.

        Compaction stages without a call or an ending to go with wait for the next save that
        writes one (the run's ending always does): a save adds no statement of its own for them.
        """
        log = _compaction_log(frame)
        if not self.calls and not ending:
            return
        rows = log[self.compactions_counted :]
        usage_add(
            owner=self.owner,
            calls=self.calls,
            ended=ending.get("status"),
            compactions=compaction_counts(rows),
        )
        self.compactions_counted = len(log)
        stages = [(row.get("stage") or "summary", row.get("outcome") or "") for row in rows]
        transaction.on_commit(lambda: _count_ending(self._run, ending, stages))

    def _count_tools(self, checkpoint: Checkpoint) -> None:
        """Count the tool results this save journals, by tool and outcome (after it commits)."""
        counted = []
        for instance, record in checkpoint.records:
            message = record.message if isinstance(record.message, dict) else {}
            if record.kind == SessionMessage.Kind.ASSISTANT:
                for call in message.get("tool_calls") or []:
                    if isinstance(call, dict):
                        name = (call.get("function") or {}).get("name")
                        self.tool_names[(instance, call.get("id"))] = name
            elif record.kind == SessionMessage.Kind.TOOL_RESULT:
                call_id = message.get("tool_call_id")
                name = self.tool_names.pop((instance, call_id), None)
                failed = str(message.get("content") or "").startswith("ERROR: ")
                counted.append((name, "error" if failed else "ok"))
        if counted:
            allowed = self.allowed_tools
            transaction.on_commit(
                lambda: [
                    metrics.tool_calls.labels(metrics.label(name, allowed), outcome).inc()
                    for name, outcome in counted
                ]
            )

    @property
    def allowed_tools(self) -> set[str]:
        return version_tools(self._run.session.agent_version)

    def _record_calls(self, new_rows: list[SessionMessage]) -> None:
        """Record the calls made since the last save; an answer this save journaled is referred
        to by its record's seq instead of copied (`answer_reference`)."""
        if not self.calls:
            return
        answers: dict[str, list[SessionMessage]] = {}
        for row in new_rows:
            if row.kind == SessionMessage.Kind.ASSISTANT:
                answers.setdefault(row.instance, []).append(row)
        rows = []
        for call in self.calls:
            # A copy: should this transaction roll back, the call is recorded whole later.
            row = copy.copy(call)
            response = call.response
            journaled = answers.get(call.instance) or []
            if not call.discarded and isinstance(response, dict) and journaled:
                rest = answer_reference(response, journaled[0].message)
                if rest is not None:
                    row.response_seq, row.response = journaled.pop(0).seq, rest
            rows.append(row)
        insert_rows(rows)

    def sync(self, checkpoint: Checkpoint, **run_fields: Any) -> SyncResult:
        """Persist `checkpoint` (and `run_fields`) atomically; return what was written.

        The save that journals the run's terminal status ends the run in the same transaction
        (`terminal_fields`), so no crash can leave the journal and the Run row disagreeing.
        """
        frame = checkpoint.frame
        ending = terminal_fields(checkpoint)
        run_fields.update(ending)
        with transaction.atomic():
            result = SyncResult()
            # Kept once the transaction commits, as `known` is.
            index_blocks = dict(self.index_blocks)
            # The session first, then the run (the lock order above), even with nothing to
            # journal: a new view or a lease renewal must not lock the run before the session.
            # Reserving seqs for new records locks it; a save with none locks it alone.
            new_rows = append_records(
                run_id=self.run_id,
                session_id=self.session_id,
                records=(
                    (instance, r.kind, r.entry_key, r.message, _record_time(r.at), r.seq)
                    for instance, r in checkpoint.records
                ),
                known=self.known,
                run_number=self._run.number,
                open_blocks=index_blocks,
            )
            if not new_rows:
                lock_session(self.session_id)
            if self.unlocated:
                self._locate(checkpoint)
            self._mark_consumed(checkpoint)
            fresh = []
            if frame != self.written:
                # An unchanged checkpoint (the final save repeats the engine's last) is not
                # rewritten: on PostgreSQL every rewrite leaves a dead copy until vacuum. Its
                # snapshots are stored apart, each once; the checkpoint points to them.
                stored, fresh = stored_frame(frame, self.stored_snapshots)
                snapshots_store(self.run_id, self.session_id, fresh)
                if ending.get("status") == Run.Status.SUCCEEDED:
                    # Never resumed: it keeps what its readers read (`finished_checkpoint`).
                    stored = finished_checkpoint(stored, frame)
                run_fields.update(checkpoint=stored, counters=checkpoint.counters)
            self._renew_lease(**self.carried, **run_fields)
            self.carried = {}
            late: list[SessionMessage] = []
            if ending and self.signals.supplements_added != 0:
                # The run ends: what it accepted and never showed is journaled now (the count
                # just returned, under the session's lock, says whether it accepted any).
                known = self.known | {(row.instance, row.entry_key) for row in new_rows}
                late = supplements_journal(
                    run_id=self.run_id, session_id=self.session_id, known=known
                )
            if ending:
                # The run ends: its live deltas were for its stream only; the journal has them.
                forget_run(self.run_id)
            result.inserted = len(new_rows) + len(late)
            self._record_calls(new_rows)
            self._record_usage(frame, ending)
            self._count_tools(checkpoint)
            result.view_revision, result.view_refusal = snapshot_save(
                run_id=self.run_id,
                session_id=self.session_id,
                inherited_watermark=self.inherited_watermark,
                frame=frame,
            )
        self.calls = []
        self.stored_snapshots.update(key for key, _snapshot in fresh)
        self.known.update((row.instance, row.entry_key) for row in [*new_rows, *late])
        self.index_blocks = index_blocks
        self.unlocated.update((row.instance, row.entry_key) for row in late)
        self.written = frame
        return result
