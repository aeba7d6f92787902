"""Reads of a run's context: its view measured against its budget, its compactions, calibration.

The measure is the engine's own (`measure_context`), with the policy, budget and estimator the
run's checkpoint binds; the calibration reads give a calibrated run where to start from.
"""

from __future__ import annotations

import statistics
from typing import Any

from agentloom.engine import (
    DEFAULT_SAMPLES,
    HANDOFF_MARK,
    measure_context,
    rendering_named,
    rendering_of,
    resumed_estimator,
    union_ranges,
)
from context_app.engine_adapter import estimator_name, offered_tools, run_measures, sent_messages
from sessions_app.models import ModelCall, Run, SessionMessage
from sessions_app.selectors.checkpoints import frame_of
from sessions_app.selectors.compaction_costs import add_compaction_costs
from sessions_app.selectors.costs import run_cost

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


def _compactions(
    frame: dict[str, Any], run: Run, *, costs: bool = False, unit: str = "estimate"
) -> list[dict[str, Any]]:
    """Return every compaction attempt of the frame: successes, skips and failures.

    A success lists the journal seq ranges its summary replaced (`summarised_ranges`) and the
    tool results it masked to one-line references (`masked_ranges`); the run's own records are
    named in the frame by local seq and looked up here in one query. With `costs`, each also
    says what it spent and saved in money, over the following runs that kept its view too
    (`compaction_costs`); `unit` is the policy's (`measure_context`).
    """
    log = (frame.get("state") or {}).get("compaction_log")
    attempts = bool(log)
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
        item["identifiers"] = entry.get("identifiers")
        item["form"] = entry.get("form")
        item["spent"] = entry.get("spent")
        # The journal record the attempt came after: where the chat marks it.
        item["journal_seq"] = by_local.get(entry.get("covered_seq"))
        sources = entry.get("sources")
        item["stage"] = entry.get("stage") or ("summary" if entry.get("revision") else None)
        item["summarised_ranges"] = _session_ranges(sources, by_local) if sources else []
        masked = (sources or {}).get("masked")
        item["masked_ranges"] = _session_ranges(masked, by_local) if masked else []
        items.append(item)
    _add_savings(items, log, (frame.get("context") or {}).get("counters") or {})
    if costs:
        # Without the attempt log (successes only) calls cannot be told apart by attempt.
        add_compaction_costs(
            items,
            log,
            run,
            frame,
            whole_log=attempts,
            # A legacy policy measures characters, which no request's estimate is in.
            value_saved=unit != "characters",
        )
    return items


def _add_savings(items: list[dict[str, Any]], log: list[dict[str, Any]], counters) -> None:
    """Set `saved` on each applied stage: the units it removed from the view times the action
    requests sent with it in force (until the next applied stage, or now), computed on read and
    never stored. Rows logged before steps were recorded get None."""
    applied = [
        n
        for n, entry in enumerate(log)
        if entry.get("outcome") in ("succeeded", "applied") and isinstance(entry.get("steps"), int)
    ]
    now = counters.get("model_steps")
    for item in items:
        item["saved"] = None
    for position, n in enumerate(applied):
        entry = log[n]
        until = log[applied[position + 1]]["steps"] if position + 1 < len(applied) else now
        removed = (entry.get("before") or 0) - (entry.get("after") or 0)
        if isinstance(until, int) and removed > 0:
            items[n]["saved"] = removed * max(until - entry["steps"], 0)


MARK_FIELDS = ("stage", "journal_seq", "before", "after")


def run_compactions(run: Run) -> list[dict[str, Any]]:
    """Return every compaction attempt of the run with its source ranges (none without a
    checkpoint)."""
    loaded = frame_of(run)
    return _compactions(loaded.to_dict(), run) if loaded is not None else []


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
    own = [
        [by_local[seq], by_local[seq]]
        for first, last in sources.get("own") or []
        for seq in range(first, last + 1)
        if seq in by_local
    ]
    return union_ranges([*own, *(sources.get("session") or [])])


def run_context(run: Run, *, costs: bool = False) -> dict[str, Any]:
    """Return the run's current view and how it measures against its budget and policy.

    With `costs` (the Context page and its API), each compaction says what it spent and saved
    in money too; the meter and the chat read it without.

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
    reading = _offers_reader(loaded, frame.get("binding"))
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
        # Calibrated: the estimate is in the provider's tokens, by the ratio last learned.
        "calibrated": getattr(estimator, "calibration", None) is not None,
        "effective_budget": budget.effective_input_budget,
        "trigger_at": measure.trigger_at,
        "target_at": measure.target_at,
        "compactions": _compactions(frame, run, costs=costs, unit=measure.unit),
        "last_reported": last_reported(run),
        "last_call_unreported": last_call_unreported(run),
        "cost": run_cost(run),
        "plan": (frame.get("state") or {}).get("plan"),
        "tools": tools_part(estimator, sent, tools),
    }


def _offers_reader(loaded: Any, binding: dict[str, Any] | None) -> bool:
    """Return whether the run's next request offers `read_record`, as the engine decides it
    (`_InstanceLoop.offered`): a run not saved yet renders with the current version; a saved
    one as its binding says, with its large-record policy."""
    if loaded is None:
        return rendering_named(None).offers_reader_first
    if loaded.holds_references():
        return True
    binding = binding or {}
    return rendering_of(binding).offers_reader_first and "large_records" in binding


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
        .only(
            "reported_prompt_tokens",
            "request_estimate",
            "estimate_error",
            "estimator",
            "calibration",
        )
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
        "calibrated": call.calibration is not None,
    }


def last_call_unreported(run: Run) -> bool:
    """Return whether the run's last answered call came without usage (a stream that carried
    none): its size and cost are not known, which is not zero."""
    call = (
        ModelCall.objects.filter(run=run, discarded=False, error="")
        .only("usage")
        .order_by("-id")
        .first()
    )
    return call is not None and call.usage is None


def recent_ratio(connection_id: int | None, *, calls: int = DEFAULT_SAMPLES) -> float | None:
    """Return the median reported/raw-bytes ratio of the connection's recent byte-measured calls.

    A calibrated run starts from it; the run then learns from its own calls.
    """
    rows = (
        ModelCall.objects.filter(
            run__session__agent_version__model_connection_id=connection_id,
            purpose=ModelCall.Purpose.ACTION,
            estimator="bytes",
            reported_prompt_tokens__gt=0,
        )
        .order_by("-id")
        .values_list("reported_prompt_tokens", "request_estimate", "calibration")[:calls]
    )
    ratios = []
    for reported, estimate, calibration in rows:
        raw = (calibration or {}).get("raw") or estimate
        if raw:
            ratios.append(reported / raw)
    return statistics.median(ratios) if ratios else None


def last_reported_call(run: Run) -> dict[str, Any] | None:
    """Return the session's last reported action request before `run` (its digest and size).

    A session keeps one agent version, so the previous run measured with the same model,
    estimator and budget; calibration uses the base only for a request that extends it exactly.
    """
    previous = (
        Run.objects.filter(session_id=run.session_id, number__lt=run.number)
        .order_by("-number")
        .first()
    )
    if previous is None or not previous.checkpoint:
        return None
    state = (previous.checkpoint or {}).get("state") or {}
    return (state.get("calibration") or {}).get("base")
