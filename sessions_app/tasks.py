"""Celery tasks: thin wrappers that take ids and call the run services."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_ready

log = logging.getLogger(__name__)


@shared_task(name="sessions_app.tasks.execute_run", acks_late=True, ignore_result=True)
def execute_run(run_id: int) -> str:
    """Execute (or continue) run `run_id` if this worker can claim its lease."""
    from sessions_app.services.execution import run_execute

    return run_execute(run_id=run_id)


@shared_task(name="sessions_app.tasks.sweep_expired_leases", ignore_result=True)
def sweep_expired_leases() -> list[int]:
    """Mark runs whose worker died `failed` (worker_lost) so they can be resumed."""
    from sessions_app.services.approvals import sweep_expired_approvals
    from sessions_app.services.runs import sweep_expired_leases as sweep

    swept = sweep()
    if swept:
        log.warning("marked %d run(s) failed after their lease expired: %s", len(swept), swept)
    expired = sweep_expired_approvals()
    if expired:
        log.warning("cancelled %d run(s) whose approval wait expired: %s", len(expired), expired)
    return swept + expired


@worker_ready.connect
def _sweep_on_worker_start(**_kwargs) -> None:
    sweep_expired_leases.delay()
