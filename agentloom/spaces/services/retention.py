"""Setting a space's retention rule: a space admin's only, recorded with who set it and when.

The rule is `Space.retention_days`: sessions are deleted that many days after their last run
(0, the default: kept). The API, the console and the admin set it through `retention_set`
(`retention_set_nested` on the admin's page, which Django runs in one transaction); the
sessions app applies it (`sessions_app.services.retention`).
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from agentloom.errors import InvalidInput, PermissionDenied
from agentloom.spaces.models import Membership, Space
from agentloom.spaces.selectors import require_member

MAX_RETENTION_DAYS = 36_500


def retention_days_validate(days) -> int:
    """Return `days` if it is a rule (a whole number of days, 0 to `MAX_RETENTION_DAYS`), else
    raise InvalidInput naming `retention_days`."""
    if isinstance(days, bool) or not isinstance(days, int) or not 0 <= days <= MAX_RETENTION_DAYS:
        raise InvalidInput(f"Days must be 0 to {MAX_RETENTION_DAYS}.", field="retention_days")
    return days


@transaction.atomic(durable=True)
def retention_set(*, user, space: Space, days: int) -> Space:
    """Set the space's rule (a space admin only), recording who set it and when."""
    return retention_set_nested(user=user, space=space, days=days)


@transaction.atomic
def retention_set_nested(*, user, space: Space, days: int) -> Space:
    """`retention_set` as part of the caller's transaction."""
    if require_member(user, space.pk) != Membership.Role.ADMIN:
        raise PermissionDenied("Only a space admin sets the retention rule.")
    space.retention_days = retention_days_validate(days)
    space.retention_set_by = user
    space.retention_set_at = timezone.now()
    space.save(update_fields=["retention_days", "retention_set_by", "retention_set_at"])
    return space
