"""`/metrics`: off without a token, refused without it, the same sums across processes, and no
label that carries content."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from agentloom import metrics
from sessions_app.models import Run
from tests.factories import ask

pytestmark = pytest.mark.django_db

TOKEN = "metrics-token-0123456789"
# One process of a deployment counting: what a worker does with its runs.
CHILD = """
import sys
from agentloom import metrics
for _ in range(int(sys.argv[1])):
    metrics.runs_finished.labels("succeeded").inc()
    metrics.model_tokens.labels("openai", "gpt-5.4", "input").inc(100)
metrics.database_slots_in_use.inc()
"""


def _count_in(path: Path, processes: list[int]) -> dict[str, float]:
    for count in processes:
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(path)}
        subprocess.run([sys.executable, "-c", CHILD, str(count)], check=True, env=env)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(path))
    found = {}
    for family in registry.collect():
        for sample in family.samples:
            found[f"{sample.name}{sorted(sample.labels.items())}"] = sample.value
    return found


def test_counters_add_up_across_two_processes(tmp_path):
    found = _count_in(tmp_path, [3, 4])
    assert found["agentloom_runs_finished_total[('status', 'succeeded')]"] == 7
    tokens = (
        "agentloom_model_tokens_total"
        "[('kind', 'input'), ('model', 'gpt-5.4'), ('provider', 'openai')]"
    )
    assert found[tokens] == 700


def test_metrics_are_not_found_without_a_token(client, settings):
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404


def test_metrics_refuse_a_scrape_without_the_token(client, settings):
    settings.METRICS_TOKEN = TOKEN
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer not-the-token-at-all")
    assert wrong.status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 401


def test_a_run_is_counted_and_its_question_is_no_label(
    client, settings, alice, gateway, make_demo_session, django_capture_on_commit_callbacks
):
    settings.METRICS_TOKEN = TOKEN
    nonce = "NONCE-metrics-4f1c"
    session = make_demo_session()
    before = metrics.runs_finished.labels("succeeded")._value.get()
    with django_capture_on_commit_callbacks(execute=True):
        run = ask(session, alice, f'/tool echo {{"text": "{nonce}"}} {nonce}')
    assert run.status == Run.Status.SUCCEEDED
    assert metrics.runs_finished.labels("succeeded")._value.get() == before + 1
    Run.objects.create(session=session, number=99, status=Run.Status.QUEUED, question="q")
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    text = response.content.decode()
    assert "agentloom_runs_queued 1.0" in text
    assert 'agentloom_tool_calls_total{outcome="ok",tool="echo"}' in text
    assert (
        'agentloom_model_calls_total{model="local-demo",outcome="ok",provider="local",purpose="action"}'
        in text
    )
    assert nonce not in text
    # No label names a session (bounded values such as a limit's scope may mention sessions).
    labels = re.findall(r'(\w+)="([^"]*)"', text)
    assert labels and not [name for name, _ in labels if "session" in name]


def test_a_tool_outside_the_version_is_other():
    assert metrics.label("rm -rf /", {"echo"}) == "other"
    assert metrics.label("echo", {"echo"}) == "echo"


def _observed(status: str) -> tuple[float, float]:
    """Return how many durations `run_seconds` observed for `status`, and their sum."""
    child = metrics.run_seconds.labels(status)
    return sum(bucket.get() for bucket in child._buckets), child._sum.get()


def test_runs_ended_outside_their_engine_are_counted(
    alice, make_demo_session, django_capture_on_commit_callbacks
):
    """Cancelled while queued (no duration: it never started) and swept after its worker was
    lost (its duration): in the metrics and among the spend record's outcomes."""
    from datetime import timedelta

    from django.db.models import Sum
    from django.utils import timezone

    from sessions_app.models import UsageDay
    from sessions_app.services.runs import run_ask, run_cancel, run_claim, sweep_expired_leases

    session = make_demo_session()
    cancelled, failed = (
        metrics.runs_finished.labels(s)._value.get() for s in ("cancelled", "failed")
    )
    timed_cancelled, (timed_failed, seconds_failed) = _observed("cancelled"), _observed("failed")
    queued = run_ask(user=alice, session=session, question="NONCE-queued")
    with django_capture_on_commit_callbacks(execute=True):
        assert run_cancel(user=alice, run=queued).status == Run.Status.CANCELLED
    assert metrics.runs_finished.labels("cancelled")._value.get() == cancelled + 1
    assert _observed("cancelled") == timed_cancelled
    lost = run_ask(user=alice, session=session, question="NONCE-lost")
    assert run_claim(run_id=lost.pk, owner="a-worker-that-dies")
    now = timezone.now()
    Run.objects.filter(pk=lost.pk).update(
        started_at=now - timedelta(seconds=40), lease_expires_at=now - timedelta(seconds=1)
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert sweep_expired_leases() == [lost.pk]
    assert metrics.runs_finished.labels("failed")._value.get() == failed + 1
    count, total = _observed("failed")
    assert count == timed_failed + 1 and total - seconds_failed >= 40
    outcomes = UsageDay.objects.filter(space=session.space).aggregate(
        cancelled=Sum("runs_cancelled"), failed=Sum("runs_failed")
    )
    assert outcomes == {"cancelled": 1, "failed": 1}
