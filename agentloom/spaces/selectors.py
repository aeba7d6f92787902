"""Reads that decide who may see and do what inside a space."""

from __future__ import annotations

from django.db.models import Q, QuerySet
from django.utils import timezone

from agentloom.errors import NotFound, PermissionDenied
from agentloom.spaces.models import ApiToken, Membership, Space


def spaces_for_user(user) -> QuerySet[Space]:
    """Return the spaces `user` is a member of."""
    if not user.is_authenticated:
        return Space.objects.none()
    return Space.objects.filter(memberships__user=user).distinct()


def administered_spaces(user) -> QuerySet[Space]:
    """Return the spaces where `user` is an admin."""
    if not user.is_authenticated:
        return Space.objects.none()
    return Space.objects.filter(
        memberships__user=user, memberships__role=Membership.Role.ADMIN
    ).order_by("id")


def space_role(user, space: Space | int) -> str | None:
    """Return `admin`, `member`, or None when `user` is not in the space."""
    if not user.is_authenticated:
        return None
    space_id = space.pk if isinstance(space, Space) else space
    return (
        Membership.objects.filter(space_id=space_id, user=user)
        .values_list("role", flat=True)
        .first()
    )


def require_member(user, space: Space | int) -> str:
    """Return the caller's role, or raise NotFound when the space is outside their reach."""
    role = space_role(user, space)
    if role is None:
        raise NotFound("Not found.")
    return role


def require_space_admin(user, space: Space | int) -> None:
    """Raise NotFound outside the space, PermissionDenied for a member who is not an admin."""
    if require_member(user, space) != Membership.Role.ADMIN:
        raise PermissionDenied("Only an admin of this space may do this.")


def usable_tokens() -> QuerySet[ApiToken]:
    """Return the API tokens that authenticate now: neither revoked nor expired."""
    return ApiToken.objects.filter(revoked_at__isnull=True).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
    )
