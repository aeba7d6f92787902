"""System checks of the run settings (run by `manage.py check`, `migrate` and the server)."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, register

from agentloom.config import lease_problem


@register()
def lease_outlives_heartbeat(app_configs=None, **kwargs) -> list[Error]:
    """Refuse a lease that cannot outlive the heartbeat interval that renews it."""
    problem = lease_problem(settings.RUN_LEASE_SECONDS, settings.RUN_HEARTBEAT_SECONDS)
    if problem is None:
        return []
    return [
        Error(
            problem,
            hint="Raise RUN_LEASE_SECONDS or lower RUN_HEARTBEAT_SECONDS.",
            id="sessions_app.E001",
        )
    ]
