"""Benchmark the context engine's hot paths and print a table.

    python bench/engine.py

- estimator throughput on a 1 MB history, cold (nothing cached) and warm;
- `prepare("action")` on views of 10 / 100 / 1,000 tool groups, below the trigger and when it
  compacts (with an instant summariser, so the time is the engine's own);
- projection of 1k / 10k / 100k journal records;
- compaction economy over 10,000 generated histories (budgets 2K to 200K, records up to 50x the
  budget, questions checked at the door): summary calls per successful compaction, and wasted
  calls (calls of compactions that failed), with the door closed and open.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentloom.engine import (
    ContextBinding,
    ContextPolicy,
    InstanceFrame,
    JournalContextManager,
    JournalRecord,
    JsonBytesEstimator,
    ModelBudget,
    project_history,
)
from agentloom.engine.testing import history_trial, text_response

ROWS: list[tuple[str, str, str]] = []


def timed(action: Callable[[], object], *, repeat: int) -> float:
    """Return the median seconds of `repeat` runs of `action`."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def bench_estimator() -> None:
    messages = []
    while sum(len(m["content"]) for m in messages) < 1_000_000:
        number = len(messages)
        messages.append({"role": "user", "content": f"question {number} " + "word " * 200})
        messages.append({"role": "assistant", "content": f"answer {number} " + "déjà vu " * 120})
    estimator = JsonBytesEstimator()
    size_mb = estimator.estimate(messages, []) / 1_000_000
    # Cold: a new estimator serialises every message; warm: every message's size is cached.
    for label, make in (("cold", JsonBytesEstimator), ("warm", lambda: estimator)):
        seconds = timed(lambda make=make: make().estimate(messages, []), repeat=20)
        ROWS.append(
            (
                f"estimator, {label}",
                f"{len(messages)} messages, {size_mb:.2f} MB",
                f"{seconds * 1000:.1f} ms/estimate, {size_mb / seconds:.0f} MB/s",
            )
        )


def grown_frame(groups: int, budget: ModelBudget, policy: ContextPolicy) -> dict:
    context = JournalContextManager(ContextBinding(policy, budget))
    context.create(instance="main", system_prompt="sys", task="the task", run_number=1, attempt=1)
    for number in range(groups):
        call = {
            "id": "x",
            "type": "function",
            "function": {"name": "echo", "arguments": f'{{"text": "step {number}"}}'},
        }
        record = context.add_assistant({"role": "assistant", "content": None, "tool_calls": [call]})
        context.add_tool_result(
            record.message["tool_calls"][0]["id"], f"result {number} " + "lorem ipsum " * 40
        )
    return context.frame.to_dict()


def prepare_seconds(frame: dict, budget: ModelBudget, policy: ContextPolicy, repeat: int):
    """Return (median seconds of prepare, the last outcome) on fresh copies of `frame`."""
    outcomes = []
    samples = []
    for _ in range(repeat):
        context = JournalContextManager(ContextBinding(policy, budget))
        context.restore(InstanceFrame.from_dict(frame))
        started = time.perf_counter()
        prepared = context.prepare(
            "action", tools=[], call_model=lambda request: text_response("summary of facts")
        )
        samples.append(time.perf_counter() - started)
        outcomes.append(prepared)
    return statistics.median(samples), outcomes[-1]


def bench_prepare() -> None:
    policy = ContextPolicy(max_compaction_calls=16)
    roomy = ModelBudget(10_000_000, 4_096, 1_024)
    for groups in (10, 100, 1_000):
        frame = grown_frame(groups, roomy, policy)
        estimate = JsonBytesEstimator().estimate(frame["messages"], [])
        seconds, _ = prepare_seconds(frame, roomy, policy, repeat=5)
        ROWS.append(
            (
                "prepare, no trigger",
                f"{groups} groups ({estimate:,} units)",
                f"{seconds * 1000:.2f} ms",
            )
        )
        # A window that the view overflows, so every prepare compacts.
        tight = ModelBudget(max(estimate // 2, 6_000), 1_024, 256)
        seconds, prepared = prepare_seconds(frame, tight, policy, repeat=5)
        outcome = prepared.compaction
        ROWS.append(
            (
                "prepare, compacting",
                f"{groups} groups, window {tight.context_window:,}",
                f"{seconds * 1000:.2f} ms ({outcome.outcome}, {outcome.calls} calls, "
                f"{outcome.before:,} -> {outcome.after:,})",
            )
        )


def journal(records: int) -> list[JournalRecord]:
    rows: list[JournalRecord] = []
    run = 0
    while len(rows) < records:
        run += 1
        seq = len(rows) + 1
        call = {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
        rows.extend(
            [
                JournalRecord(
                    seq, run, "main", "user_input", {"role": "user", "content": f"q {run}"}
                ),
                JournalRecord(
                    seq + 1,
                    run,
                    "main",
                    "assistant",
                    {"role": "assistant", "content": None, "tool_calls": [call]},
                ),
                JournalRecord(
                    seq + 2,
                    run,
                    "main",
                    "tool_result",
                    {"role": "tool", "tool_call_id": "c1", "content": "result " * 30},
                ),
                JournalRecord(
                    seq + 3, run, "main", "assistant", {"role": "assistant", "content": "done"}
                ),
            ]
        )
    return rows[:records]


def bench_projection() -> None:
    for records in (1_000, 10_000, 100_000):
        rows = journal(records)
        seconds = timed(lambda rows=rows: project_history(rows), repeat=3)
        ROWS.append(
            (
                "project_history",
                f"{records:,} records",
                f"{seconds * 1000:.1f} ms ({records / seconds / 1000:.0f}k records/s)",
            )
        )


def bench_compaction_economy(trials: int = 10_000) -> None:
    for door, large in ((True, True), (False, True), (True, False)):
        rng = random.Random(20261130)
        runs = succeeded = compactions = masked = summaries = summary_calls = wasted = 0
        for _ in range(trials):
            trial = history_trial(rng, door=door, large=large)
            if trial.refused and door:
                continue
            runs += 1
            succeeded += trial.status == "succeeded"
            for row in trial.compactions:
                if row["outcome"] == "succeeded":
                    compactions += 1
                    masked += row.get("stage") == "masking"
                    if row.get("stage") == "summary":
                        summaries += 1
                        summary_calls += row["calls"]
                elif row["outcome"] == "failed":
                    wasted += row["calls"]
        label = ("door closed" if door else "door open") + ("" if large else ", no large records")
        ROWS.append(
            (
                f"compaction economy ({label})",
                f"{trials:,} histories, {runs:,} runs",
                f"{succeeded:,} runs succeeded; {compactions:,} compactions "
                f"({masked:,} by masking, 0 calls); "
                f"{summary_calls / max(summaries, 1):.2f} calls per summary; "
                f"{wasted} wasted calls",
            )
        )


def main() -> None:
    started = time.perf_counter()
    bench_estimator()
    bench_prepare()
    bench_projection()
    bench_compaction_economy()
    widths = [max(len(row[i]) for row in [("what", "input", "result"), *ROWS]) for i in range(3)]
    line = "  ".join("-" * width for width in widths)
    print("  ".join(h.ljust(w) for h, w in zip(("what", "input", "result"), widths, strict=True)))
    print(line)
    for row in ROWS:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    print(f"\ntotal {time.perf_counter() - started:.1f} s, Python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
