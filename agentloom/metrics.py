"""Prometheus metrics: what operators watch, counted in every process of the deployment.

Rule: no label carries content or an unbounded value. Labels are our own enums (a run's status,
a call's purpose and outcome, a compaction's stage, a provider kind, a rate limit's scope), the
model ids of the connections an admin configured, and a tool's name only when it is one the
agent version lists (anything else is `other`). A question, an answer, a user, a session or a
run never becomes a label.

Every web and worker process writes its own files under `METRICS_DIR` (prometheus_client's
multiprocess mode, switched on by `PROMETHEUS_MULTIPROC_DIR`, which the settings set when
`METRICS_TOKEN` is), and `/metrics` adds them up. Counts that the database holds (runs queued,
runs waiting for approval) are read from it at scrape time, so every process agrees on them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

__all__ = [
    "CONTENT_TYPE",
    "compactions",
    "database_slots_in_use",
    "event_streams_open",
    "exposition",
    "lease_sweeps",
    "model_call_seconds",
    "model_calls",
    "model_tokens",
    "rate_limit_refusals",
    "run_seconds",
    "runs_finished",
    "tool_calls",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OTHER = "other"
SECONDS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600)

runs_finished = Counter(
    "agentloom_runs_finished", "Runs ended, by their terminal status.", ["status"]
)
run_seconds = Histogram(
    "agentloom_run_seconds", "Time from a run's start to its end.", ["status"], buckets=SECONDS
)
model_calls = Counter(
    "agentloom_model_calls",
    "Model calls, by provider kind, model, purpose and outcome (ok, error).",
    ["provider", "model", "purpose", "outcome"],
)
model_call_seconds = Histogram(
    "agentloom_model_call_seconds",
    "Latency of model calls.",
    ["provider", "model", "purpose"],
    buckets=SECONDS,
)
model_tokens = Counter(
    "agentloom_model_tokens",
    "Tokens providers reported: input, cached (part of input), output, reasoning (part of output).",
    ["provider", "model", "kind"],
)
compactions = Counter(
    "agentloom_compactions",
    "Compaction stages, by stage (summary, masking) and outcome.",
    ["stage", "outcome"],
)
tool_calls = Counter(
    "agentloom_tool_calls", "Tool calls, by tool and outcome (ok, error).", ["tool", "outcome"]
)
lease_sweeps = Counter(
    "agentloom_lease_sweeps", "Runs the sweep ended, by why (lease, approval).", ["reason"]
)
rate_limit_refusals = Counter(
    "agentloom_rate_limit_refusals", "Requests refused by a rate limit, by its scope.", ["scope"]
)
event_streams_open = Gauge(
    "agentloom_event_streams_open",
    "Run events streams open now.",
    multiprocess_mode="livesum",
)
database_slots_in_use = Gauge(
    "agentloom_database_slots_in_use",
    "Database slots held by worker runs now.",
    multiprocess_mode="livesum",
)


def label(value: Any, allowed: Iterable[str] | None = None) -> str:
    """Return `value` as a label: itself when it is among `allowed` (if given), else `other`."""
    text = str(value or "")
    if allowed is not None and text not in allowed:
        return OTHER
    return text[:100] or OTHER


def exposition(extra: Iterable[GaugeMetricFamily] = ()) -> bytes:
    """Return the metrics of every process in the text format, with `extra` gauges added."""
    registry = CollectorRegistry()
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if path:
        MultiProcessCollector(registry, path=path)
    else:
        from prometheus_client import REGISTRY

        registry = REGISTRY
    text = generate_latest(registry)
    extras = CollectorRegistry()
    families = list(extra)
    if families:
        extras.register(_Fixed(families))
        text += generate_latest(extras)
    return text


class _Fixed:
    def __init__(self, families: list[GaugeMetricFamily]):
        self.families = families

    def collect(self):
        return iter(self.families)
