"""Celery tasks: thin wrappers that take ids and call the run services."""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings

log = logging.getLogger(__name__)

# How long a worker waits before it hands another deployment's task back (no busy loop when
# only the wrong deployment's workers are listening).
HAND_BACK_SECONDS = 1.0


@shared_task(bind=True, name="sessions_app.tasks.execute_run", acks_late=True, ignore_result=True)
def execute_run(task, run_id: int, deployment: str | None = None) -> str:
    """Execute (or continue) run `run_id` if this worker can claim its lease.

    `deployment` names the database the run was queued in (`settings.DEPLOYMENT_ID`). A task
    of another deployment is not this worker's, even when its database holds a run of that id:
    nothing is touched, and the task goes back to the queue it came from for its own workers.
    """
    if deployment is not None and deployment != settings.DEPLOYMENT_ID:
        return _hand_back(task, run_id, deployment)
    from sessions_app.services.execution import run_execute

    return run_execute(run_id=run_id)


def _hand_back(task, run_id: int, deployment: str) -> str:
    delivery = task.request.delivery_info or {}
    queue = delivery.get("routing_key") or settings.CELERY_TASK_DEFAULT_QUEUE
    log.warning(
        "run %s belongs to deployment %s, not this one (%s): handed back to queue %s",
        run_id,
        deployment,
        settings.DEPLOYMENT_ID,
        queue,
    )
    time.sleep(HAND_BACK_SECONDS)
    task.apply_async(args=[run_id], kwargs={"deployment": deployment}, queue=queue)
    return "handed back"


@shared_task(name="sessions_app.tasks.sweep_expired_leases", ignore_result=True)
def sweep_expired_leases() -> list[int]:
    """Mark runs whose worker died `failed` (worker_lost) so they can be resumed."""
    from agentloom import metrics
    from sessions_app.services.approvals import sweep_expired_approvals
    from sessions_app.services.runs import sweep_expired_leases as sweep

    swept = sweep()
    metrics.lease_sweeps.labels("lease").inc(len(swept))
    if swept:
        log.warning("marked %d run(s) failed after their lease expired: %s", len(swept), swept)
    expired = sweep_expired_approvals()
    metrics.lease_sweeps.labels("approval").inc(len(expired))
    if expired:
        log.warning("cancelled %d run(s) whose approval wait expired: %s", len(expired), expired)
    return swept + expired


@worker_ready.connect
def _sweep_on_worker_start(**_kwargs) -> None:
    sweep_expired_leases.delay()


@shared_task(name="sessions_app.tasks.apply_retention", ignore_result=True)
def apply_retention() -> dict[str, Any]:
    """Delete the sessions each space's retention rule removes (soft delete, audited), and purge
    those it hid `RETENTION_PURGE_DAYS` ago."""
    from sessions_app.services.retention import retention_apply, retention_purge

    return {"deleted": retention_apply(), "purged": retention_purge()}


@shared_task(name="sessions_app.tasks.discard_stale_imports", ignore_result=True)
def discard_stale_imports() -> list[int]:
    """Remove the hidden sessions of imports that stopped half-way."""
    from sessions_app.services.imports import staged_discard

    discarded = staged_discard()
    if discarded:
        log.warning("discarded %d stopped import(s): %s", len(discarded), discarded)
    return discarded
