"""`/metrics`: the deployment's Prometheus metrics (`agentloom.metrics`), for a scraper holding
`METRICS_TOKEN`; not found while no token is set.

Beside the counts every process writes, the scrape reads from the database what it holds for
all processes at once: runs queued and runs waiting for a person's approval.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.db.models import Count
from django.http import Http404, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client.core import GaugeMetricFamily

from agentloom import metrics
from sessions_app.models import Run


def _database_gauges() -> list[GaugeMetricFamily]:
    counts = dict(
        Run.objects.filter(status__in=[Run.Status.QUEUED, *Run.WAITING_STATUSES])
        .values_list("status")
        .annotate(count=Count("id"))
        .values_list("status", "count")
    )
    queued = GaugeMetricFamily("agentloom_runs_queued", "Runs queued for a worker now.")
    queued.add_metric([], counts.get(Run.Status.QUEUED, 0))
    waiting = GaugeMetricFamily(
        "agentloom_approvals_waiting", "Runs waiting for a person's approval now."
    )
    waiting.add_metric([], counts.get(Run.Status.WAITING_APPROVAL, 0))
    answers = GaugeMetricFamily(
        "agentloom_answers_waiting", "Runs waiting for a person's answers to a tool server now."
    )
    answers.add_metric([], counts.get(Run.Status.WAITING_INPUT, 0))
    return [queued, waiting, answers]


@require_GET
def metrics_view(request):
    """Return the metrics text to a bearer of `METRICS_TOKEN` (401 to anyone else)."""
    token = settings.METRICS_TOKEN
    if not token:
        raise Http404("Not found.")
    sent = request.headers.get("Authorization", "")
    scheme, _, value = sent.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.encode(), token.encode()):
        answer = HttpResponse("A bearer token is required.", status=401, content_type="text/plain")
        answer["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return answer
    return HttpResponse(metrics.exposition(_database_gauges()), content_type=metrics.CONTENT_TYPE)
