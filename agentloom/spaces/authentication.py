"""API token authentication: `Authorization: Token <key>`, checked against stored digests.

Tokens are created and revoked by `agentloom.spaces.services.tokens`, which stores each key's
digest only; this looks the digest of the key a client sends up among the usable tokens.
"""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from agentloom.spaces.selectors import usable_tokens
from agentloom.spaces.services.tokens import key_digest


class ApiTokenAuthentication(TokenAuthentication):
    """`Authorization: Token <key>`, checked against the stored digests of usable tokens."""

    def authenticate_credentials(self, key):
        token = usable_tokens().select_related("user").filter(digest=key_digest(key)).first()
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid token.")
        return token.user, token
