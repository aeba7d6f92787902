"""The demo space every local installation starts with."""

from django.db import transaction

from agentloom.spaces.models import Membership, Space

DEMO_SPACE_NAME = "Demo space"


@transaction.atomic
def ensure_demo(*, owner) -> Space:
    """Return the demo space, creating it (with `owner` as its admin) on first call."""
    space = Space.objects.filter(name=DEMO_SPACE_NAME).order_by("id").first()
    if space is None:
        space = Space.objects.create(name=DEMO_SPACE_NAME)
    Membership.objects.get_or_create(
        space=space, user=owner, defaults={"role": Membership.Role.ADMIN}
    )
    return space
