"""What each compaction of a run spent and saved, in money where its calls' prices are known.

Computed when read, never stored: nothing here writes, and the checkpoint, its compaction log and
its snapshots are read as they are. The rules:

- **Spent**: the attempt's own calls, at the prices each call copied. They are the run's
  `compaction` calls of the instance that were not discarded, in order, as many to each logged
  attempt as it says it made (`calls`). Without a price, the attempt's reported tokens stand
  (`spent`); a call without usage has no cost, never zero.
- **Saved**: an applied stage removed `before − after` units from the view, so every action
  request sent while it was in force would have carried them. A stage is in force from the model
  step it came at until the next applied stage of the run; the run's last stage is also in force
  in the session's following runs that started from its view and did not compact again (their
  counters keep its step as their baseline, `baseline_model_steps`), and stops at the first that
  does not (the runs counted are named). That run counts up to its own first compaction when the
  view that compaction saved derives from this stage's view (`SessionView.derived_from`); when no
  such view was saved it is not counted at all: a lower bound.
- **Valued at each request's own prices**: a removed unit is worth what that request paid per
  unit of its own measured size (its prompt cost at the prices it copied, cached tokens at the
  cached price, over its `request_estimate`): the removed material would have been sent in that
  request, measured in the same unit, and served from the cache in the same share as the rest of
  it. A request without usage or prices leaves the sum a lower bound (`complete` false).
- **Net** = saved − spent, only when both are known whole and in one currency.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from agentloom.providers import call_cost
from sessions_app.models import MAIN_INSTANCE, ModelCall, Run, SessionView
from sessions_app.selectors.costs import COST_FIELDS, cost_summary

APPLIED = ("succeeded", "applied")
# What a request's row is read with to value the units a compaction removed from it.
REQUEST_FIELDS = (
    "run_id",
    "request_estimate",
    "price_currency",
    "price_input",
    "price_cached_input",
    "price_output",
    "price_max_prompt_tokens",
    "reported_prompt_tokens",
    "cached_tokens",
)
# Following runs are read in chunks, and no further than the first that no longer counts.
RUN_CHUNK = 100


def add_compaction_costs(
    items: list[dict[str, Any]],
    log: list[dict[str, Any]],
    run: Run,
    frame: dict[str, Any],
    *,
    whole_log: bool = True,
    value_saved: bool = True,
) -> None:
    """Set `spent_cost`, `saved_cost`, `saved_requests`, `saved_runs` and `net` on each item of
    the frame's compaction log (`items[n]` is `log[n]`), and extend the run's last stage's
    `saved` over the following runs that kept its view.

    `whole_log` false: the log holds only the successes (a frame older than the attempt log),
    so the calls cannot be told apart by attempt and nothing is spent in money. `value_saved`
    false: the log's sizes are in a unit no request was measured in (a legacy policy's
    characters), so what was saved stays in that unit.
    """
    instance = frame.get("instance") or MAIN_INSTANCE
    for item in items:
        item.update(
            spent_cost=None, saved_cost=None, saved_requests=None, saved_runs=None, net=None
        )
    if whole_log:
        _add_spent(items, log, run, instance)
    applied = [
        n
        for n, entry in enumerate(log)
        if entry.get("outcome") in APPLIED and isinstance(entry.get("steps"), int)
    ]
    if applied:
        _add_saved(items, log, applied, run, frame, instance)
    if not value_saved:
        for item in items:
            item["saved_cost"] = None
    for item, entry in zip(items, log, strict=True):
        item["net"] = _net(item["saved_cost"], item["spent_cost"], bool(entry.get("calls")))


def _add_spent(
    items: list[dict[str, Any]], log: list[dict[str, Any]], run: Run, instance: str
) -> None:
    wanted = sum(entry.get("calls") or 0 for entry in log)
    if not wanted:
        return
    calls = list(
        ModelCall.objects.filter(
            run=run, instance=instance, purpose=ModelCall.Purpose.COMPACTION, discarded=False
        )
        .only(*COST_FIELDS)
        .order_by("id")[:wanted]
    )
    start = 0
    for item, entry in zip(items, log, strict=True):
        count = entry.get("calls") or 0
        own = calls[start : start + count]
        start += count
        if count and len(own) == count:
            item["spent_cost"] = cost_summary(own)


def _add_saved(
    items: list[dict[str, Any]],
    log: list[dict[str, Any]],
    applied: list[int],
    run: Run,
    frame: dict[str, Any],
    instance: str,
) -> None:
    context = frame.get("context") or {}
    now = (context.get("counters") or {}).get("model_steps")
    if not isinstance(now, int):
        return
    # The run's own steps are its assistant records: the steps before them are earlier runs'.
    records = context.get("records") or []
    start = now - sum(1 for record in records if record.get("kind") == "assistant")
    following = _following_runs(run, log[applied[-1]]["steps"]) if instance == MAIN_INSTANCE else []
    requests = _requests(run, instance, following)
    own = requests.get(run.pk, [])[: max(now - start, 0)]
    for position, n in enumerate(applied):
        entry = log[n]
        until = log[applied[position + 1]]["steps"] if position + 1 < len(applied) else now
        removed = (entry.get("before") or 0) - (entry.get("after") or 0)
        if removed <= 0:
            continue
        sent = own[max(entry["steps"] - start, 0) : max(until - start, 0)]
        runs = [run.number] if sent else []
        if position + 1 == len(applied) and following:
            for pk, number, upto in following:
                # Each following run's requests from its start (the step the one before ended
                # at) up to the step it ended at, or replaced the view at.
                theirs = requests.get(pk, [])[: max(upto - until, 0)]
                if theirs:
                    sent = [*sent, *theirs]
                    runs.append(number)
                until = upto
            items[n]["saved"] = removed * max(until - entry["steps"], 0)
        items[n]["saved_requests"] = len(sent)
        items[n]["saved_runs"] = [runs[0], runs[-1]] if runs else None
        items[n]["saved_cost"] = saved_value(removed, sent)


def _following_runs(run: Run, steps: int) -> list[tuple[int, int, int]]:
    """Return `(pk, number, upto)` of the session's runs after `run` that had its last stage (at
    `steps`) in force, in order, with the step each had it in force up to.

    They are the runs whose counters still hold the stage's step as their baseline (they started
    from its view and did not compact: up to their last step), then the first that does not,
    up to the step of its first compaction, when that compaction's view derives from the stage's.
    """
    rows = (
        Run.objects.filter(session_id=run.session_id, number__gt=run.number)
        .order_by("number")
        .values_list("pk", "number", "counters")
    )
    kept, stop = [], None
    for pk, number, counters in rows.iterator(chunk_size=RUN_CHUNK):
        counters = counters or {}
        if counters.get("baseline_model_steps") != steps or not isinstance(
            counters.get("model_steps"), int
        ):
            stop = (pk, number)
            break
        kept.append((pk, number, counters["model_steps"]))
    replaced_at = _replaced_at(stop[0], run, steps) if stop else None
    if replaced_at is not None:
        kept.append((*stop, replaced_at))
    return kept


def _replaced_at(run_id: int, run: Run, steps: int) -> int | None:
    """Return the step at which run `run_id` replaced the view of `run`'s stage at `steps`: where
    its first compaction came, if the view that compaction saved derives from that stage's view;
    else None (not known: no view was saved, or it derives from another)."""
    first = (
        SessionView.objects.filter(run_id=run_id, snapshot_revision=1)
        .values_list(
            "derived_from__run_id", "derived_from__baseline_model_steps", "baseline_model_steps"
        )
        .first()
    )
    if first is None or first[:2] != (run.pk, steps):
        return None
    return first[2]


def _requests(
    run: Run, instance: str, following: list[tuple[int, int, int]]
) -> dict[int, list[ModelCall]]:
    """Return the answered action requests of `run`'s instance and of the `following` runs' main
    instance, by run, in the order they were sent."""
    rows = (
        ModelCall.objects.filter(
            run_id__in=[run.pk, *(pk for pk, _, _ in following)],
            instance=instance,
            purpose=ModelCall.Purpose.ACTION,
            discarded=False,
            error="",
        )
        .only(*REQUEST_FIELDS)
        .order_by("id")
    )
    by_run: dict[int, list[ModelCall]] = {}
    for row in rows.iterator(chunk_size=2_000):
        by_run.setdefault(row.run_id, []).append(row)
    return by_run


def saved_value(removed: int, requests: Iterable[ModelCall]) -> dict[str, Any] | None:
    """Return what `removed` units were worth in `requests`, each at its own prices per unit of
    its measured size, or None when no request of them has a known value.

    `{amount, currency, requests, unpriced, complete}`; values in more than one currency are not
    added up (None).
    """
    total = Decimal(0)
    currencies: set[str] = set()
    count = unpriced = 0
    for request in requests:
        count += 1
        paid = call_cost(
            request.prices,
            prompt_tokens=request.reported_prompt_tokens,
            cached_tokens=request.cached_tokens,
            completion_tokens=0,
        )
        if paid is None or not request.request_estimate:
            unpriced += 1
            continue
        total += removed * paid / request.request_estimate
        currencies.add(request.price_currency)
    if len(currencies) != 1:
        return None
    return {
        "amount": total,
        "currency": currencies.pop(),
        "requests": count,
        "unpriced": unpriced,
        "complete": unpriced == 0,
    }


def _net(
    saved: dict[str, Any] | None, spent: dict[str, Any] | None, made_calls: bool
) -> dict[str, Any] | None:
    """Return saved − spent when both are known whole in one currency (a stage that made no
    call spent nothing), else None."""
    if saved is None or not saved["complete"]:
        return None
    if not made_calls:
        return {"amount": saved["amount"], "currency": saved["currency"]}
    if spent is None or not spent["complete"] or spent["currency"] != saved["currency"]:
        return None
    return {"amount": saved["amount"] - spent["amount"], "currency": saved["currency"]}
