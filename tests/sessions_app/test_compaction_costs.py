"""What a compaction saved is computed when read: the units it removed times the action requests
sent with it in force, until the next compaction."""

from __future__ import annotations

import pytest

from sessions_app.models import Run
from sessions_app.selectors.context import run_context
from tests.factories import ask

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
