"""Reads of sessions, runs, the journal, views, model calls and a run's context.

A session and everything under it is readable only by its creator, and only while they are a
member of the session's space; to anyone else it does not exist (NotFound). A deleted session
(`deleted_at` set) does not exist for anyone.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from django.db.models import Count, Min, OuterRef, Q, QuerySet, Subquery

from agentloom.engine import (
    HANDOFF_MARK,
    as_ranges,
    measure_context,
    resumed_estimator,
)
from agentloom.errors import NotFound
from context_app.engine_adapter import estimator_name, offered_tools, run_measures, sent_messages
from sessions_app.models import (
    MAIN_INSTANCE,
    ModelCall,
    Run,
    Session,
    SessionMessage,
    SessionView,
)
from sessions_app.services.checkpoints import frame_of

JOURNAL_LIMIT_DEFAULT = 100
JOURNAL_LIMIT_MAX = 200
COUNTER_NAMES = ("user_turns", "model_steps", "baseline_user_turns", "baseline_model_steps")
COMPACTION_FIELDS = (
    "revision",
    "covered_seq",
    "before",
    "after",
    "target_reached",
    "calls",
    "outcome",
    "reason",
)


def live_sessions() -> QuerySet[Session]:
    """Return the sessions nobody has deleted."""
    return Session.objects.filter(deleted_at__isnull=True)


def sessions_for_user(user) -> QuerySet[Session]:
    """Return the sessions `user` created in spaces they are still a member of, newest first."""
    return live_sessions().filter(created_by=user, space__memberships__user=user).order_by("-id")


def session_list(user) -> QuerySet[Session]:
    """Return `sessions_for_user` with agents, run counts and the latest run's number and status."""
    latest_run = Run.objects.filter(session=OuterRef("pk")).order_by("-number")
    return (
        sessions_for_user(user)
        .select_related("agent", "agent_version")
        .annotate(
            latest_status=Subquery(latest_run.values("status")[:1]),
            latest_number=Subquery(latest_run.values("number")[:1]),
            run_count=Count("runs", distinct=True),
        )
    )


def sessions_in_reach(user) -> QuerySet[Session]:
    """Return the live sessions `user` may manage: their own and those of spaces they admin."""
    if not user.is_authenticated:
        return Session.objects.none()
    return (
        live_sessions()
        .filter(
            Q(created_by=user, space__memberships__user=user)
            | Q(space__memberships__user=user, space__memberships__role="admin")
        )
        .distinct()
    )


def session_get(*, user, session_id: int) -> Session:
    """Return the session if `user` may read it, else raise NotFound."""
    session = sessions_for_user(user).filter(pk=session_id).first()
    if session is None:
        raise NotFound("Not found.")
    return session


def session_for_revocation(*, user, session_id: int) -> Session:
    """Return a session whose views `user` may revoke: their own, or one in a space they admin."""
    session = sessions_in_reach(user).filter(pk=session_id).first()
    if session is None:
        raise NotFound("Not found.")
    return session


def session_for_deletion(*, user, session_id: int) -> Session:
    """Return a live session in one of `user`'s spaces; the deletion service checks the role."""
    session = live_sessions().filter(pk=session_id, space__memberships__user=user).first()
    if session is None:
        raise NotFound("Not found.")
    return session


def runs_of(session: Session) -> QuerySet[Run]:
    """Return the session's runs, newest first (checkpoints are not loaded or decrypted)."""
    return Run.objects.filter(session=session).defer("checkpoint").order_by("-number")


def active_run(session: Session) -> Run | None:
    """Return the session's queued or running run, if any (at most one exists)."""
    return runs_of(session).filter(status__in=Run.ACTIVE_STATUSES).first()


def first_seq_of(runs: Iterable[Run]) -> int | None:
    """Return the lowest journal seq recorded by any of `runs` (None: they have no records)."""
    return SessionMessage.objects.filter(run__in=list(runs)).aggregate(first=Min("seq"))["first"]


def instances_of(session: Session) -> list[str]:
    """Return the instances that have records in the session: main, then children in order."""
    found = set(
        SessionMessage.objects.filter(session=session).values_list("instance", flat=True).distinct()
    )
    children = sorted(
        (name for name in found if name != MAIN_INSTANCE),
        key=lambda name: tuple(int(part) for part in name.split(".") if part.isdigit()),
    )
    return [MAIN_INSTANCE, *children] if MAIN_INSTANCE in found else children


def run_get(*, user, run_id: int) -> Run:
    """Return the run if `user` may read its session, else raise NotFound."""
    run = (
        Run.objects.filter(
            pk=run_id,
            session__created_by=user,
            session__space__memberships__user=user,
            session__deleted_at__isnull=True,
        )
        .select_related("session__agent_version")
        .first()
    )
    if run is None:
        raise NotFound("Not found.")
    return run


def run_counters(run: Run) -> dict[str, int]:
    """Return the run's turn and step counters as of its last save (zeros before the first)."""
    counters = run.counters or {}
    return {name: int(counters.get(name) or 0) for name in COUNTER_NAMES}


def journal_page(
    *, session: Session, after: int = 0, limit: int = JOURNAL_LIMIT_DEFAULT, instance=None
) -> dict[str, Any]:
    """Return `{items, next_after}`: up to `limit` journal records with seq > `after`.

    One query on the (session, seq) or (session, instance, seq) index. An empty page keeps the
    cursor where it was, so a poller can simply call again with `next_after`.
    """
    rows = SessionMessage.objects.filter(session=session, seq__gt=after)
    if instance is not None:
        rows = rows.filter(instance=instance)
    items = [
        {
            "seq": row.seq,
            "run_id": row.run_id,
            "instance": row.instance,
            "kind": row.kind,
            "message": row.message,
            "created_at": row.created_at,
        }
        for row in rows.order_by("seq")[:limit]
    ]
    return {"items": items, "next_after": items[-1]["seq"] if items else after}


def views_of(session: Session) -> QuerySet[SessionView]:
    """Return the session's reusable views without their (encrypted) messages."""
    return (
        SessionView.objects.filter(session=session)
        .defer("messages", "entries")
        .order_by("revision")
    )


def model_calls_of(run: Run) -> QuerySet[ModelCall]:
    """Return the run's model calls in order, without their (encrypted) responses."""
    return ModelCall.objects.filter(run=run).defer("response").order_by("id")


def _compactions(frame: dict[str, Any], run: Run) -> list[dict[str, Any]]:
    """Return every compaction attempt of the frame: successes, skips and failures.

    A success lists the journal seq ranges its summary replaced (`summarised_ranges`) and the
    tool results it masked to one-line references (`masked_ranges`); the run's own records are
    named in the frame by local seq and looked up here in one query.
    """
    log = (frame.get("state") or {}).get("compaction_log")
    if not log:
        # Frames written before the attempt log existed only kept their successes.
        log = [
            {**(snapshot.get("metrics") or {}), **snapshot}
            for snapshot in (frame.get("context") or {}).get("compactions") or []
        ]
    local = {
        seq
        for entry in log
        for sources in _own_and_masked(entry)
        for first, last in (sources.get("own") or [])
        for seq in range(first, last + 1)
    } | {entry["covered_seq"] for entry in log if isinstance(entry.get("covered_seq"), int)}
    by_local = dict(
        SessionMessage.objects.filter(
            run=run, instance=frame.get("instance") or "main", local_seq__in=local
        ).values_list("local_seq", "seq")
    )
    summaries = {
        snapshot["revision"]: _summary_text(snapshot.get("messages") or [])
        for snapshot in (frame.get("context") or {}).get("compactions") or []
    }
    items = []
    for entry in log:
        item = {name: entry.get(name) for name in COMPACTION_FIELDS}
        item["summary"] = summaries.get(entry.get("revision"))
        item["repeats"] = entry.get("repeats")
        # The journal record the attempt came after: where the chat marks it.
        item["journal_seq"] = by_local.get(entry.get("covered_seq"))
        sources = entry.get("sources")
        item["stage"] = entry.get("stage") or ("summary" if entry.get("revision") else None)
        item["summarised_ranges"] = _session_ranges(sources, by_local) if sources else []
        masked = (sources or {}).get("masked")
        item["masked_ranges"] = _session_ranges(masked, by_local) if masked else []
        items.append(item)
    return items


MARK_FIELDS = ("stage", "journal_seq", "before", "after")


def compaction_marks(run: Run) -> list[dict[str, Any]]:
    """Return the run's successful compactions as the chat marks them, numbered as on the
    Context page: `{number, stage, journal_seq, before, after}` (journal_seq None: at the start).
    """
    loaded = frame_of(run)
    if loaded is None:
        return []
    return [
        {"number": number, **{key: item[key] for key in MARK_FIELDS}}
        for number, item in enumerate(_compactions(loaded.to_dict(), run), start=1)
        if item["outcome"] == "succeeded"
    ]


def model_call_in_flight(run: Run) -> bool:
    """True while the run is running and waits on a model: its latest main-instance record is
    not an answer of the model (a question, tool result, supplement, feedback or a resumed run's
    status), so the model is being asked for the next one. After an answer with tool calls the
    run is running tools, not waiting on the model.
    """
    if run.status != Run.Status.RUNNING:
        return False
    last = (
        SessionMessage.objects.filter(run=run, instance=MAIN_INSTANCE)
        .order_by("-seq")
        .values_list("kind", flat=True)
        .first()
    )
    return last != SessionMessage.Kind.ASSISTANT


def _own_and_masked(entry: dict[str, Any]) -> list[dict[str, Any]]:
    sources = entry.get("sources") or {}
    return [sources, sources.get("masked") or {}]


def _summary_text(messages: list[dict[str, Any]]) -> str | None:
    for message in messages:
        text = message.get("content")
        if isinstance(text, str) and text.startswith(HANDOFF_MARK):
            return text
    return None


def _session_ranges(sources: dict[str, Any], by_local: dict[int, int]) -> list[list[int]]:
    seqs = {
        by_local[seq]
        for first, last in sources.get("own") or []
        for seq in range(first, last + 1)
        if seq in by_local
    }
    seqs.update(
        seq for first, last in sources.get("session") or [] for seq in range(first, last + 1)
    )
    return as_ranges(seqs)


def run_context(run: Run) -> dict[str, Any]:
    """Return the run's current view and how it measures against its budget and policy.

    The policy, budget and estimator are the ones bound into the checkpoint (what the run really
    uses); before the first checkpoint they come from the frozen version snapshot. The measure is
    the engine's own (`measure_context`): the next action request — the view plus the tool
    schemas it is offered — in the policy's unit, in provider tokens for a calibrated run.
    """
    loaded = frame_of(run)
    frame = loaded.to_dict() if loaded is not None else {}
    snapshot = run.session.agent_version.snapshot
    policy, budget, estimator = run_measures(snapshot, frame.get("binding"))
    # A calibrated run measures in the provider's tokens: the ratio it last learned.
    estimator = resumed_estimator(
        estimator, frame.get("binding") or {}, (frame.get("state") or {}).get("calibration")
    )
    messages = list(frame.get("messages") or [])
    reading = loaded is not None and loaded.holds_references()
    # Measured as it would be sent: what the provider's payload carries, not the stored view.
    sent, tools = sent_messages(
        run.session.agent_version, messages, offered_tools(snapshot, reading=reading)
    )
    measure = measure_context(
        policy=policy,
        budget=budget,
        estimator=estimator,
        messages=sent,
        tools=tools,
    )
    return {
        "messages": messages,
        "estimate": measure.size,
        "unit": measure.unit,
        "ceiling": measure.ceiling,
        "estimator": estimator_name(estimator.module_id),
        "effective_budget": budget.effective_input_budget,
        "trigger_at": measure.trigger_at,
        "target_at": measure.target_at,
        "compactions": _compactions(frame, run),
        "last_reported": last_reported(run),
        "cost": run_cost(run),
        "plan": (frame.get("state") or {}).get("plan"),
        "tools": tools_part(estimator, sent, tools),
    }


def tools_part(estimator: Any, messages: list[Any], tools: list[Any]) -> dict[str, Any] | None:
    """Return how much of the request's hard-check bound the tool schemas take, or None.

    `size` is the tool part's bound in the raw estimator's unit (tokens, or bytes for `bytes`),
    `share` its whole-percent share of the request's bound.
    """
    if not tools:
        return None
    raw = getattr(estimator, "inner", estimator)
    whole = raw.upper_bound(messages, tools)
    size = whole - raw.upper_bound(messages, [])
    return {
        "size": size,
        "unit": "bytes" if estimator_name(raw.module_id) == "bytes" else "tokens",
        "share": round(100 * size / max(whole, 1)),
    }


def last_reported(run: Run) -> dict[str, Any] | None:
    """Return the input size the provider last reported for the run, with the estimate's error."""
    call = (
        ModelCall.objects.filter(run=run, reported_prompt_tokens__isnull=False)
        .only("reported_prompt_tokens", "request_estimate", "estimate_error", "estimator")
        .order_by("-id")
        .first()
    )
    if call is None:
        return None
    return {
        "tokens": call.reported_prompt_tokens,
        "estimate": call.request_estimate,
        "estimate_error": call.estimate_error,
        "estimator": call.estimator,
    }


# What a cost is computed from: the prices copied at call time and the reported usage.
COST_FIELDS = (
    "price_currency",
    "price_input",
    "price_cached_input",
    "price_output",
    "price_max_prompt_tokens",
    "price_source_url",
    "price_verified_on",
    "price_source",
    "price_band",
    "reported_prompt_tokens",
    "cached_tokens",
    "reported_completion_tokens",
)


def call_cost_of(call: ModelCall) -> dict[str, Any] | None:
    """Return the call's cost with its currency and price source, or None when unknown."""
    amount = call.cost
    if amount is None:
        return None
    return {
        "amount": amount,
        "currency": call.price_currency,
        "price_date": call.price_verified_on,
        # Entered by an operator (`manual`), else the page the manifest read them from.
        "price_source": "manual"
        if call.price_source == "manual"
        else call.price_source_url or None,
        "price_band": call.price_band or None,
    }


def cost_summary(calls: Iterable[ModelCall]) -> dict[str, Any] | None:
    """Return the summed cost of `calls`, or None when none of them has a known cost.

    Every call counts, whatever became of its answer (the provider billed it). Calls whose cost
    is unknown are counted in `unpriced_calls` and left out of `amount`, which is then a lower
    bound (`complete` is false). Costs in more than one currency are not added up: None.
    """
    total = Decimal(0)
    currencies: set[str] = set()
    dates: set[Any] = set()
    count = unpriced = 0
    for call in calls:
        count += 1
        amount = call.cost
        if amount is None:
            unpriced += 1
            continue
        total += amount
        currencies.add(call.price_currency)
        dates.add(call.price_verified_on)
    if len(currencies) != 1:
        return None
    return {
        "amount": total,
        "currency": currencies.pop(),
        "price_date": sorted(date for date in dates if date is not None),
        "calls": count,
        "unpriced_calls": unpriced,
        "complete": unpriced == 0,
    }


def run_cost(run: Run) -> dict[str, Any] | None:
    """Return the cost of every model call of `run` (see `cost_summary`)."""
    return cost_summary(ModelCall.objects.filter(run=run).only(*COST_FIELDS).iterator())


def session_cost(session: Session) -> dict[str, Any] | None:
    """Return the cost of every model call of every run of `session` (see `cost_summary`)."""
    calls = ModelCall.objects.filter(run__session=session).only(*COST_FIELDS)
    return cost_summary(calls.iterator())
