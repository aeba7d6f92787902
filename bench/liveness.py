"""Liveness of random sessions through the real services (issue: sessions that never die).

    .venv/bin/python bench/liveness.py                 # 5,000 seeded sequences on SQLite
    .venv/bin/python bench/liveness.py --sequences 200 # a quicker run

Each sequence is `tests.support.liveness.run_sequence(seed)`: one session of an agent with every
built-in tool on a window from the Demo agent's up to 128K, a summariser that is the demo
model's, verbose, an echo of its input or failing with 503 for a while, and a random mix of tool
lines, cancels, supplements, resumes after `worker_lost` and after a failed compaction,
delegations, plan updates, questions near the door limit, view revocations and plain questions.
It prints the sequences run, the sessions alive at every probe (the target is all), failed runs
by reason, compactions by stage and outcome, summary calls per summary, wasted calls (calls whose
result was thrown away: a failed compaction's calls and calls discarded after a lost lease), the
median and worst view size after each run as a share of the effective budget, and the largest
request the provider saw against its budget, counted by the double's own tokenizer.

It works in a scratch SQLite database that it creates and removes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _scratch import scratch_environment

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _setup(path: str) -> None:
    scratch_environment(f"sqlite:///{path}")
    import django

    django.setup()
    from django.conf import settings

    settings.DEBUG = False
    settings.CELERY_TASK_ALWAYS_EAGER = False
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=5_000)
    parser.add_argument("--first-seed", type=int, default=0)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        _setup(os.path.join(scratch, "liveness.sqlite3"))
        from tests.factories import make_user
        from tests.support.liveness import run_sequence, summarise

        user = make_user("liveness")
        reports = []
        started = time.perf_counter()
        for seed in range(arguments.first_seed, arguments.first_seed + arguments.sequences):
            reports.append(run_sequence(seed, user))
            if len(reports) % 250 == 0:
                alive = sum(r.alive for r in reports)
                print(f"... {len(reports)} sequences, {alive} alive", flush=True)
        elapsed = time.perf_counter() - started
        figures = summarise(reports)
        _print(figures, reports, elapsed)


def _print(figures, reports, elapsed: float) -> None:
    print(f"sequences run                 {figures['sequences']:>8}   ({elapsed:.0f} s)")
    print(f"alive at every probe          {figures['alive']:>8}   of {figures['sequences']}")
    print(f"probes (plain questions)      {figures['probes']:>8}")
    print(f"requests over the budget      {figures['over_budget']:>8}")
    largest = max(reports, key=lambda r: r.largest_request / r.window)
    print(
        f"largest request / window      {largest.largest_request / largest.window:>8.2f}"
        f"   ({largest.largest_request} of {largest.window}, own tokenizer)"
    )
    print("failed runs by reason")
    for reason, count in sorted(figures["failed_runs"].items()) or [("(none)", 0)]:
        print(f"  {reason:<28}{count:>8}")
    print("compactions by stage and outcome")
    for stage, count in sorted(figures["stages"].items()):
        print(f"  {stage:<28}{count:>8}")
    print(
        f"calls per summary             {figures['calls_per_summary']:>8.2f}"
        f"   (worst {figures['max_calls_per_summary']})"
    )
    print(f"wasted calls                  {figures['wasted_calls']:>8}")
    print(f"median view / budget          {figures['median_view_share']:>8.2f}")
    print(f"worst view / budget           {figures['worst_view_share']:>8.2f}")
    for seed, problem in figures["problems"][:20]:
        print(f"  seed {seed}: {problem}")


if __name__ == "__main__":
    main()
