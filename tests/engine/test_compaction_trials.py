"""Compaction never deadlocks or thrashes: a property over 10,000 generated histories.

Each trial draws a budget from 2K to 200K, a history of earlier runs and a run whose tool results
and inherited records reach 50 times the budget (`agentloom.engine.testing.history_trial`). The
question is checked at the door as the application checks it. The counts are printed (`-s`).
"""

from __future__ import annotations

import random
from collections import Counter

from agentloom.engine.testing import history_trial

TRIALS = 10_000
OPEN_DOOR_TRIALS = 2_000


def _print(title: str, counts: Counter) -> None:
    print(f"\n{title}")
    for name, count in sorted(counts.items()):
        print(f"  {name:<48} {count:>6,}")


def test_every_admitted_run_fits_and_no_compaction_fails():
    rng = random.Random(20261130)
    counts: Counter = Counter()
    for _ in range(TRIALS):
        trial = history_trial(rng)
        counts["generated"] += 1
        assert trial.requests_over_budget == 0, "a request over the effective budget was sent"
        if trial.refused:
            counts["refused at the door (question over its limit)"] += 1
            continue
        for row in trial.compactions:
            # A compaction started at or above the trigger succeeds or skips without a call.
            assert row["outcome"] in ("succeeded", "skipped", "applied"), row
            if row["outcome"] == "skipped":
                assert row["calls"] == 0, row
            counts[f"compaction {row.get('stage') or '-'} {row['outcome']} ({row['reason']})"] += 1
        assert trial.status == "succeeded", trial.error
        counts["run succeeded"] += 1
    _print(f"{TRIALS:,} generated histories, questions checked at the door", counts)
    assert counts["generated"] == TRIALS
    assert counts["run succeeded"] > TRIALS // 3
    assert any(name.startswith("compaction masking succeeded") for name in counts)
    assert any(name.startswith("compaction summary succeeded") for name in counts)


def test_with_the_door_open_only_refused_questions_fail_for_budget():
    """Questions the door would refuse are run anyway: they are the only budget failures."""
    rng = random.Random(20261201)
    counts: Counter = Counter()
    for _ in range(OPEN_DOOR_TRIALS):
        trial = history_trial(rng, door=False)
        assert trial.requests_over_budget == 0
        for row in trial.compactions:
            if row["outcome"] == "skipped":
                assert row["calls"] == 0, row
        if trial.status == "failed":
            reason = (trial.error or "").split(":")[0]
            assert reason == "context_budget_exceeded" and trial.refused, trial.error
            pinned = "pinned over budget" if trial.pinned_over_budget else "pinned within budget"
            counts[f"failed ({reason}, refused at the door, {pinned})"] += 1
        else:
            counts[f"succeeded{' (refused at the door)' if trial.refused else ''}"] += 1
    _print(f"{OPEN_DOOR_TRIALS:,} generated histories, door open", counts)
