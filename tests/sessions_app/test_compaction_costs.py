"""What a compaction saved is computed when read: the units it removed times the action requests
sent with it in force, until the next compaction, in the following runs that kept its view too;
in money at the prices each call copied, against what its own calls cost."""

from __future__ import annotations

import copy
import json
from decimal import Decimal

import pytest

from sessions_app.models import CompactionSnapshot, ModelCall, Run, SessionView
from sessions_app.selectors.context import run_context
from sessions_app.selectors.costs import cached_share_by_run
from tests.factories import ask
from tests.sessions_app.conftest import long_question

pytestmark = pytest.mark.django_db


def test_saved_is_what_each_compaction_removed_times_the_requests_that_followed(
    alice, gateway, make_demo_session
):
    session = make_demo_session(context_window=9_000)
    for n in range(4):
        run = ask(session, alice, f'/tool big_output {{"chars": 1500}} NONCE-{n}')
    run = Run.objects.get(pk=run.pk)
    items = run_context(run)["compactions"]
    log = run.checkpoint["state"]["compaction_log"]
    applied = [n for n, row in enumerate(log) if row["outcome"] in ("succeeded", "applied")]
    assert applied, "the run compacted"
    steps = run.checkpoint["context"]["counters"]["model_steps"]
    for position, n in enumerate(applied):
        until = log[applied[position + 1]]["steps"] if position + 1 < len(applied) else steps
        removed = log[n]["before"] - log[n]["after"]
        assert items[n]["saved"] == removed * (until - log[n]["steps"])
    summaries = [item for item in items if item["stage"] == "summary" and item["calls"]]
    assert all(item["spent"] is not None for item in summaries)
    # Nothing computed is written back into the checkpoint.
    assert all("saved" not in row for row in log)


def test_each_saving_ends_where_the_next_compaction_takes_over():
    from sessions_app.selectors.context import _add_savings

    log = [
        {"outcome": "applied", "before": 900, "after": 700, "steps": 2},
        {"outcome": "succeeded", "before": 700, "after": 300, "steps": 2},
        {"outcome": "failed", "before": 800, "after": 800, "steps": 5},
        {"outcome": "succeeded", "before": 850, "after": 350, "steps": 6},
        {"outcome": "succeeded", "before": 500, "after": 400},  # logged before steps were
    ]
    items = [{} for _ in log]
    _add_savings(items, log, {"model_steps": 9})
    # 200 units for no request (the summary came at the same step), 400 for 4, 500 for 3.
    assert [item["saved"] for item in items] == [0, 1_600, None, 1_500, None]


# --- money: what each compaction spent and saved at the prices its calls copied -------------

MILLION = Decimal(1_000_000)


def _compacting_session(alice, make_demo_session):
    """Return runs 1-10 of a session: 4 masks, 5-7 summarise (one call each), 8-10 start from
    run 7's view and do not compact."""
    session = make_demo_session(context_window=9_000)
    for n in range(3):
        ask(session, alice, f'/tool big_output {{"chars": 1500}} NONCE-{n}')
    for n in range(3, 7):
        ask(session, alice, long_question(n))
    for n in range(3):
        ask(session, alice, f"hello {n}")
    runs = list(Run.objects.filter(session=session).order_by("number"))
    stages = [[row["stage"] for row in run.checkpoint["state"]["compaction_log"]] for run in runs]
    assert stages == [[], [], [], ["masking"], ["summary"], ["summary"], ["summary"], [], [], []]
    assert [run.counters["baseline_model_steps"] for run in runs[6:]] == [9, 9, 9, 9]
    return runs


def _price_every_call(session, currency=lambda call: "USD"):
    """Give each call of `session` its own prices and cached tokens (as copied at call time)."""
    for call in ModelCall.objects.filter(run__session=session).order_by("id"):
        call.price_currency = currency(call)
        call.price_input = Decimal(call.pk)
        call.price_cached_input = Decimal(call.pk) / 10
        call.price_output = Decimal(20)
        call.cached_tokens = call.reported_prompt_tokens // (call.pk % 3 + 2)
        call.save()


def _requests_between(run_ids, after, upto=None):
    """Return the answered action requests whose answer the journal holds after seq `after`
    (and up to `upto`): the requests sent with a compaction at `after` in force."""
    calls = ModelCall.objects.filter(run_id__in=run_ids, purpose="action", response_seq__gt=after)
    if upto is not None:
        calls = calls.filter(response_seq__lte=upto)
    return list(calls.order_by("id"))


def _worth(removed, requests):
    """What `removed` units were worth in `requests`: each at what it paid per unit measured."""
    return sum(
        removed
        * (
            (call.reported_prompt_tokens - call.cached_tokens) * call.price_input
            + call.cached_tokens * call.price_cached_input
        )
        / MILLION
        / call.request_estimate
        for call in requests
    )


def test_spent_and_saved_are_sums_over_the_call_rows_at_their_own_prices(
    alice, gateway, make_demo_session
):
    runs = _compacting_session(alice, make_demo_session)
    _price_every_call(runs[0].session)
    masking, first, last = (run_context(runs[n], costs=True)["compactions"][0] for n in (3, 4, 6))
    # Spent: the attempt's own call, at its own prices.
    for run, item in ((runs[4], first), (runs[6], last)):
        (call,) = ModelCall.objects.filter(run=run, purpose="compaction")
        assert item["spent_cost"]["amount"] == call.cost
        assert (item["spent_cost"]["currency"], item["spent_cost"]["complete"]) == ("USD", True)
    assert masking["spent_cost"] is None  # it made no call, and spent nothing
    # Saved in its run, up to the next compaction: run 5 compacted at its start, so run 4's
    # masking was in force for one request only, though run 5 started from its view.
    removed = masking["before"] - masking["after"]
    sent = _requests_between([runs[3].pk], masking["journal_seq"])
    assert len(sent) == 1 and masking["saved"] == removed
    assert masking["saved_cost"]["amount"] == _worth(removed, sent)
    assert (masking["saved_requests"], masking["saved_runs"]) == (1, [4, 4])
    assert masking["net"]["amount"] == masking["saved_cost"]["amount"]
    # Run 7's summary goes on in runs 8-10, which started from its view.
    removed = last["before"] - last["after"]
    sent = _requests_between([run.pk for run in runs[6:]], last["journal_seq"])
    assert len(sent) == 4 and last["saved"] == removed * 4
    assert (last["saved_requests"], last["saved_runs"]) == (4, [7, 10])
    assert last["saved_cost"] == {
        "amount": _worth(removed, sent),
        "currency": "USD",
        "requests": 4,
        "unpriced": 0,
        "complete": True,
    }
    assert last["net"] == {
        "amount": last["saved_cost"]["amount"] - last["spent_cost"]["amount"],
        "currency": "USD",
    }


def test_a_following_run_that_compacts_again_counts_up_to_its_compaction(
    alice, gateway, make_demo_session
):
    runs = _compacting_session(alice, make_demo_session)
    # Run 11 starts from run 7's view; its tool's large result makes it compact after a step.
    eleventh = ask(runs[0].session, alice, '/tool big_output {"chars": 4000} NONCE-X')
    (row,) = eleventh.checkpoint["state"]["compaction_log"]
    assert row["steps"] == runs[-1].counters["model_steps"] + 1
    _price_every_call(runs[0].session)
    item = run_context(runs[6], costs=True)["compactions"][0]
    removed = item["before"] - item["after"]
    first_of_eleventh = ModelCall.objects.filter(run=eleventh, purpose="action").order_by("id")[:1]
    sent = [*_requests_between([r.pk for r in runs[6:]], item["journal_seq"]), *first_of_eleventh]
    assert (item["saved_requests"], item["saved_runs"]) == (5, [7, 11])
    assert item["saved"] == removed * 5
    assert item["saved_cost"]["amount"] == _worth(removed, sent)
    # When the view run 11's compaction saved does not derive from run 7's, run 11 had another
    # view in force: it is not counted.
    SessionView.objects.filter(run=eleventh).update(derived_from=None)
    item = run_context(runs[6], costs=True)["compactions"][0]
    assert (item["saved_requests"], item["saved_runs"]) == (4, [7, 10])
    assert item["saved"] == removed * 4


def test_each_attempt_is_spent_its_own_calls_in_order(alice, gateway, make_demo_session):
    runs = _compacting_session(alice, make_demo_session)
    run = runs[4]
    _price_every_call(run.session)
    # A later attempt of run 5 that failed after two calls; a call discarded between them (a
    # lost lease) was billed but is no call of the attempt the checkpoint logged.
    checkpoint = run.checkpoint
    log = checkpoint["state"]["compaction_log"]
    log.append({**log[0], "outcome": "failed", "revision": None, "calls": 2, "steps": 8})
    Run.objects.filter(pk=run.pk).update(checkpoint=checkpoint)
    priced = {"price_currency": "USD", "price_input": 3, "price_output": 30}
    usage = {"reported_prompt_tokens": 900, "reported_completion_tokens": 90}
    second = ModelCall.objects.create(run=run, purpose="compaction", **priced, **usage)
    ModelCall.objects.create(run=run, purpose="compaction", discarded=True, **priced, **usage)
    third = ModelCall.objects.create(
        run=run, purpose="compaction", **{**priced, "price_input": 5}, **usage
    )
    cost = {call.pk: call.cost for call in ModelCall.objects.filter(run=run, purpose="compaction")}
    first = min(cost)
    items = run_context(Run.objects.get(pk=run.pk), costs=True)["compactions"]
    assert [item["spent_cost"]["amount"] for item in items] == [
        cost[first],
        cost[second.pk] + cost[third.pk],
    ]
    assert items[1]["saved"] is None and items[1]["net"] is None


def test_unknown_prices_leave_tokens_and_missing_usage_is_never_zero(
    alice, gateway, make_demo_session, client
):
    runs = _compacting_session(alice, make_demo_session)
    session = runs[0].session
    # Prices unknown: the figures stay in tokens and units.
    item = run_context(runs[6], costs=True)["compactions"][0]
    assert (item["spent_cost"], item["saved_cost"], item["net"]) == (None, None, None)
    assert item["saved"] == (item["before"] - item["after"]) * 4
    client.force_login(alice)
    page = client.get(f"/runs/{runs[6].pk}/context/").content.decode()
    spent = item["spent"]
    assert f"{spent['prompt_tokens']:,} tokens in (0 cached)" in page
    assert f"{item['saved']:,} bytes" in page and "runs #7–#10" in page
    # Mixed currencies: run 9 was priced in EUR; saved is not added up across them.
    _price_every_call(session, lambda call: "EUR" if call.run_id == runs[8].pk else "USD")
    item = run_context(runs[6], costs=True)["compactions"][0]
    assert item["spent_cost"]["currency"] == "USD"
    assert (item["saved_cost"], item["net"]) == (None, None)
    # A request without usage: saved is a marked lower bound, and no net is given.
    _price_every_call(session)
    ModelCall.objects.filter(run=runs[9], purpose="action").update(
        reported_prompt_tokens=None, cached_tokens=None, reported_completion_tokens=None, usage=None
    )
    item = run_context(runs[6], costs=True)["compactions"][0]
    sent = _requests_between([run.pk for run in runs[6:9]], item["journal_seq"])
    assert item["saved_cost"]["amount"] == _worth(item["before"] - item["after"], sent)
    assert (item["saved_cost"]["unpriced"], item["saved_cost"]["complete"]) == (1, False)
    assert item["net"] is None
    # The compaction call without usage: no cost, said so, not zero.
    ModelCall.objects.filter(run=runs[6], purpose="compaction").update(
        reported_prompt_tokens=None, cached_tokens=None, reported_completion_tokens=None, usage=None
    )
    checkpoint = runs[6].checkpoint
    checkpoint["state"]["compaction_log"][0]["spent"] = {
        "prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0, "unreported": 1,
    }  # fmt: skip
    Run.objects.filter(pk=runs[6].pk).update(checkpoint=checkpoint)
    item = run_context(Run.objects.get(pk=runs[6].pk), costs=True)["compactions"][0]
    assert item["spent_cost"] is None
    page = client.get(f"/runs/{runs[6].pk}/context/").content.decode()
    assert "at least " in page and '/ <span class="spent">no usage reported</span>' in page


def _stored(session):
    """Return everything stored that a compaction's figures could be written into."""
    return (
        [(run.pk, run.checkpoint, run.counters) for run in Run.objects.filter(session=session)],
        list(CompactionSnapshot.objects.filter(run__session=session).values_list("snapshot")),
        list(SessionView.objects.filter(session=session).values_list("messages", "entries")),
    )


def test_reading_the_figures_writes_nothing_back(alice, gateway, make_demo_session, client):
    runs = _compacting_session(alice, make_demo_session)
    session = runs[0].session
    _price_every_call(session)
    before = _stored(session)
    client.force_login(alice)
    for run in runs[3:]:
        page = client.get(f"/runs/{run.pk}/context/")
        assert page.status_code == 200
        answer = client.get(f"/api/v1/runs/{run.pk}/context")
        assert answer.status_code == 200
    # The objects read in this process, which a later save would write, are unchanged too.
    run = runs[6]
    read = copy.deepcopy(run.checkpoint)
    item = run_context(run, costs=True)["compactions"][0]
    assert item["saved"] and item["saved_cost"]
    assert run.checkpoint == read
    after = _stored(session)
    assert after == before
    assert "saved" not in json.dumps(after[1]) and "saved" not in json.dumps(after[0][6][1])
    # The page shows them to the prices' precision, with the runs they count.
    page = client.get(f"/runs/{run.pk}/context/").content.decode()

    def money(amount):
        return f"{amount.quantize(Decimal('1e-8')).normalize():f} USD"

    saved = f"{money(item['saved_cost']['amount'])} ({item['saved']:,} bytes)"
    assert f'{saved}</span> <span class="quiet">over 4 requests, runs #7–#10</span>' in page
    assert f'<span class="spent">{money(item["spent_cost"]["amount"])}</span>' in page
    assert f'compaction-net">{money(item["net"]["amount"])}</td>' in page
    # The API gives the page's figures, from the same selector.
    answer = client.get(f"/api/v1/runs/{run.pk}/context").json()["compactions"][0]
    assert answer["saved_runs"] == [7, 10] and answer["saved"] == item["saved"]
    assert Decimal(answer["saved_cost"]["amount"]) == item["saved_cost"]["amount"].quantize(
        Decimal("1e-12")
    )
    assert Decimal(answer["net"]["amount"]) == item["net"]["amount"].quantize(Decimal("1e-12"))


def _following_runs(session, count, *, start_number, start_steps, baseline, calls=3):
    """Add `count` finished runs that started from the view at `baseline` and did not compact,
    each with `calls` priced action requests (as rows, the way a long session leaves them)."""
    runs = Run.objects.bulk_create(
        Run(
            session=session,
            number=start_number + n,
            status=Run.Status.SUCCEEDED,
            question=f"q{n}",
            counters={
                "user_turns": 0,
                "model_steps": start_steps + calls * (n + 1),
                "baseline_user_turns": 0,
                "baseline_model_steps": baseline,
            },
        )
        for n in range(count)
    )
    ModelCall.objects.bulk_create(
        ModelCall(
            run=run,
            purpose="action",
            request_estimate=4_000,
            reported_prompt_tokens=1_000,
            cached_tokens=500,
            reported_completion_tokens=10,
            price_currency="USD",
            price_input=Decimal(2),
            price_cached_input=Decimal("0.2"),
            price_output=Decimal(8),
        )
        for run in runs
        for _ in range(calls)
    )


def test_the_figures_take_the_same_queries_on_a_session_of_hundreds_of_runs(
    alice, gateway, make_demo_session, client
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    runs = _compacting_session(alice, make_demo_session)
    session, run = runs[0].session, runs[6]
    _price_every_call(session)
    run_context(run, costs=True)  # the run's session, version and connection, read once
    with CaptureQueriesContext(connection) as short:
        item = run_context(run, costs=True)["compactions"][0]
        cached_share_by_run(session)
    assert item["saved_runs"] == [7, 10]
    final = runs[-1].counters["model_steps"]
    _following_runs(session, 300, start_number=11, start_steps=final, baseline=9)
    with CaptureQueriesContext(connection) as long:
        item = run_context(run, costs=True)["compactions"][0]
        shares = cached_share_by_run(session)
    assert len(long) == len(short) and len(shares) == 310
    removed = item["before"] - item["after"]
    assert item["saved_runs"] == [7, 310]
    assert item["saved"] == removed * (final + 900 - 9)
    assert item["saved_requests"] == 4 + 900
    sent = _requests_between([r.pk for r in runs[6:]], item["journal_seq"])
    # Each added request paid (500 x 2 + 500 x 0.2) / 1e6 for 4,000 bytes measured.
    added = removed * Decimal("0.0011") / 4_000 * 900
    assert item["saved_cost"]["amount"] == _worth(removed, sent) + added
    # The chart draws every run; the table under it lists the latest hundred, and says so.
    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/context/").content.decode()
    chart = page[page.index('<svg class="chart"') : page.index("</svg>")]
    assert chart.count("<rect ") == 310
    table = page[
        page.index('id="cache-runs"') : page.index("</table>", page.index('id="cache-runs"'))
    ]
    assert (
        table.count("<tr>") == 1 + 100 and "<td>#310</td>" in table and "<td>#210</td>" not in table
    )
    assert "The table lists the latest 100 of the session's 310 runs with calls" in page
