"""The application error root of the Django side.

Services raise these; one DRF exception handler (`agentloom.api.exception_handler`) turns them into
clean JSON with the right status, and console views turn them into messages. Messages are fixed
text written by us, never a provider's body or a credential.
"""

from __future__ import annotations


class ApplicationError(Exception):
    """A refusal the caller can act on. `status` is the HTTP status it maps to."""

    status = 400

    def __init__(self, detail: str, *, field: str | None = None):
        super().__init__(detail)
        self.detail = detail
        self.field = field

    def as_json(self) -> dict:
        if self.field:
            return {self.field: [self.detail]}
        return {"detail": self.detail}


class InvalidInput(ApplicationError):
    status = 400


class PermissionDenied(ApplicationError):
    """The caller may see the object but not do this (a member doing an admin's action)."""

    status = 403


class NotFound(ApplicationError):
    """Missing, or outside the caller's reach: the two are never told apart."""

    status = 404


class Conflict(ApplicationError):
    """The object's state forbids the action (an active run, a finished run, a used connection)."""

    status = 409


class SpendLimitReached(ApplicationError):
    """A spend limit of the space, the agent or the member is reached: no new run this month."""

    status = 403


class UpstreamError(ApplicationError):
    """A model provider failed; the detail is our own text."""

    status = 502


class RateLimited(ApplicationError):
    """Too many of one action in a window; `retry_after` is how many seconds until it may."""

    status = 429

    def __init__(self, detail: str, *, retry_after: int):
        super().__init__(detail)
        self.retry_after = retry_after
