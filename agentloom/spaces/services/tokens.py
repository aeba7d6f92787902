"""API tokens: created with a key shown once, stored as a digest, expired or revoked.

Clients send `Authorization: Token <key>` as before; `agentloom.spaces.authentication` looks the
key's digest up, so the database never holds a key that would let a reader of a dump call the API.

Creating and revoking are durable actions, one outermost transaction each; `token_create_nested`
is the same write as part of the caller's transaction (the admin's add page).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from agentloom.errors import InvalidInput, NotFound
from agentloom.spaces.models import ApiToken

MAX_EXPIRY_DAYS = 3650


def key_digest(key: str) -> str:
    """Return the stored form of `key`: the hex SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(key.encode()).hexdigest()


@transaction.atomic(durable=True)
def token_create(*, user, name: str = "", expires_days: int | None = None) -> tuple[ApiToken, str]:
    """Create a token for `user`; return it with its key, which is never available again."""
    return token_create_nested(user=user, name=name, expires_days=expires_days)


@transaction.atomic
def token_create_nested(
    *, user, name: str = "", expires_days: int | None = None
) -> tuple[ApiToken, str]:
    """`token_create` as part of the caller's transaction."""
    if expires_days is not None and not 1 <= expires_days <= MAX_EXPIRY_DAYS:
        raise InvalidInput(f"Must be between 1 and {MAX_EXPIRY_DAYS}.", field="expires_days")
    key = secrets.token_urlsafe(32)
    expires_at = timezone.now() + timedelta(days=expires_days) if expires_days else None
    token = ApiToken.objects.create(
        user=user,
        name=(name or "").strip()[:100],
        digest=key_digest(key),
        prefix=key[:8],
        expires_at=expires_at,
    )
    return token, key


@transaction.atomic(durable=True)
def token_revoke(*, user, token: ApiToken) -> ApiToken:
    """Revoke `token` at once; its owner or a superuser may. Revoking twice changes nothing."""
    if token.user_id != user.pk and not user.is_superuser:
        raise NotFound("Not found.")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token
