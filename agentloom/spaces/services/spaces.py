"""Writes on spaces and memberships; each is durable, one outermost transaction."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction

from agentloom.errors import Conflict, InvalidInput
from agentloom.spaces.models import Membership, Space
from agentloom.spaces.selectors import require_space_admin


@transaction.atomic(durable=True)
def space_create(*, user, name: str) -> Space:
    """Create a space; its creator becomes its admin."""
    name = (name or "").strip()
    if not name:
        raise InvalidInput("This field may not be blank.", field="name")
    space = Space.objects.create(name=name[:120])
    Membership.objects.create(space=space, user=user, role=Membership.Role.ADMIN)
    return space


@transaction.atomic(durable=True)
def member_add(*, actor, space: Space, username: str, role: str) -> Membership:
    """Add `username` to `space` with `role`; only a space admin may."""
    require_space_admin(actor, space)
    if role not in Membership.Role.values:
        raise InvalidInput(f"Must be one of: {', '.join(Membership.Role.values)}.", field="role")
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise InvalidInput("No user with this username.", field="username")
    if Membership.objects.filter(space=space, user=user).exists():
        raise Conflict("This user is already a member of the space.")
    return Membership.objects.create(space=space, user=user, role=role)
