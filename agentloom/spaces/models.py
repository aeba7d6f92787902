"""Spaces are the tenants: every agent, connection and session belongs to one."""

import zoneinfo

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models


def validate_time_zone(value: str) -> None:
    """Raise ValidationError unless `value` names an IANA time zone (`Europe/Berlin`, `UTC`)."""
    try:
        zoneinfo.ZoneInfo(value)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        raise ValidationError(
            f"{value!r} is not a known time zone (an IANA name such as UTC)."
        ) from None


class Space(models.Model):
    name = models.CharField(max_length=120)
    # The zone a space's days are counted in (empty: UTC): its usage is summed by the day it had
    # here.
    time_zone = models.CharField(
        max_length=64, blank=True, default="UTC", validators=[validate_time_zone]
    )
    # The retention rule: sessions are deleted this many days after their last run (0: kept).
    # Who set it and when is kept beside it.
    retention_days = models.PositiveIntegerField(default=0)
    retention_set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="retention_rules",
    )
    retention_set_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        ADMIN = "admin", "Admin"
        MEMBER = "member", "Member"

    space = models.ForeignKey(Space, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="space_memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["space", "user"], name="unique_space_member"),
            models.CheckConstraint(
                condition=models.Q(role__in=["admin", "member"]), name="membership_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.space} ({self.role})"


class ApiToken(models.Model):
    """An API key, kept only as the SHA-256 digest of the key; the key is shown once, at creation.

    Keys are 256-bit random strings (older ones 160-bit), so one unsalted digest is enough: there
    is nothing to guess from it. A token stops working when it expires or is revoked; the row stays
    as a record of who had access until when.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True, default="")
    digest = models.CharField(max_length=64, unique=True)
    # The key's first characters, so its holder can tell tokens apart in a list.
    prefix = models.CharField(max_length=8)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.prefix}… of {self.user} ({self.name or 'unnamed'})"
