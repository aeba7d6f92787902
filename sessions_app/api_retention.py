"""REST endpoints of a space's retention rule and of a session's legal hold.

Unlike the rest of a session's endpoints these are a space admin's: the rule is the space's, and
a hold is placed on any session of the space. A member reads the rule (not what it would remove);
a session's creator reads its hold; neither changes them (403). Anything outside the caller's
reach is 404. Both writes are the services the admin uses, and the preview is what `manage.py
apply_retention --dry-run` computes (`retention_due`).
"""

from __future__ import annotations

from rest_framework.response import Response

from agentloom.api import ApiView, api_schema, object_id
from agentloom.spaces.models import Membership, Space
from agentloom.spaces.selectors import require_space_admin, space_role
from agentloom.spaces.services.retention import retention_set
from context_app.selectors import space_get
from sessions_app.selectors.sessions import session_in_reach
from sessions_app.serializers import (
    LegalHoldSerializer,
    LegalHoldSetSerializer,
    RetentionSerializer,
    RetentionSetSerializer,
)
from sessions_app.services.retention import retention_due, session_legal_hold

SPACE_ID = "Space id (one of the caller's)."
HELD_SESSION_ID = "Session id (the caller's own, or one in a space the caller administers)."


def _rule(user, space: Space, *, days: int | None = None) -> dict:
    """Return the rule in force (or, with `days`, the proposed one) with what it removes now."""
    admin = space_role(user, space) == Membership.Role.ADMIN
    would_remove = retention_due(space, days=days).count() if admin else None
    if days is not None:
        return {
            "space": space.pk,
            "retention_days": days,
            "set_by": None,
            "set_at": None,
            "would_remove": would_remove,
            "dry_run": True,
        }
    setter = space.retention_set_by
    return {
        "space": space.pk,
        "retention_days": space.retention_days,
        "set_by": setter.get_username() if setter is not None else None,
        "set_at": space.retention_set_at,
        "would_remove": would_remove,
        "dry_run": False,
    }


class SpaceRetentionApi(ApiView):
    @api_schema(
        ok=200,
        response=RetentionSerializer,
        errors=(404,),
        path_id=SPACE_ID,
        operation_id="spaces_retention_retrieve",
        description="The space's retention rule in force: sessions are deleted `retention_days` "
        "after their last run (0: kept), with who set it and when. For a space admin, "
        "`would_remove` counts the sessions the rule removes now.",
    )
    def get(self, request, id):
        """Return the space's retention rule."""
        space = space_get(user=request.user, space_id=object_id(id))
        return Response(RetentionSerializer(_rule(request.user, space)).data)

    @api_schema(
        ok=200,
        response=RetentionSerializer,
        request=RetentionSetSerializer,
        errors=(403, 404),
        path_id=SPACE_ID,
        operation_id="spaces_retention_set",
        description="Set the space's retention rule (space admins only; 403 for a member): who "
        "set it and when are recorded. The hourly pass then deletes (soft, audited) the "
        "sessions whose last run ended more than `retention_days` ago, except those with an "
        "active or waiting run and those on legal hold. With `dry_run`, nothing is saved and "
        "`would_remove` counts what the proposed rule would delete now. 400 naming "
        "`retention_days` for anything but a whole number of days in range.",
    )
    def post(self, request, id):
        """Set the space's retention rule, or preview it."""
        space_id = object_id(id)
        # 404 outside the space; a member is refused (403) before their body is even read.
        require_space_admin(request.user, space_id)
        space = space_get(user=request.user, space_id=space_id)
        data = RetentionSetSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        days = data.validated_data["retention_days"]
        if data.validated_data["dry_run"]:
            return Response(RetentionSerializer(_rule(request.user, space, days=days)).data)
        space = retention_set(user=request.user, space=space, days=days)
        return Response(RetentionSerializer(_rule(request.user, space)).data)


class SessionHoldApi(ApiView):
    @api_schema(
        ok=200,
        response=LegalHoldSerializer,
        errors=(404,),
        path_id=HELD_SESSION_ID,
        operation_id="sessions_hold_retrieve",
        description="Whether the session is on legal hold, and who last placed or released it.",
    )
    def get(self, request, id):
        """Return the session's legal hold."""
        session = session_in_reach(user=request.user, session_id=object_id(id))
        return Response(LegalHoldSerializer(session).data)

    @api_schema(
        ok=200,
        response=LegalHoldSerializer,
        request=LegalHoldSetSerializer,
        errors=(403, 404),
        path_id=HELD_SESSION_ID,
        operation_id="sessions_hold_set",
        description="Place the session on legal hold (`hold: true`: the space's retention rule "
        "does not delete it) or release it (`false`). Space admins only (403 for the session's "
        "creator who is a member); who did it and when are kept, and each change is written "
        "into the session's history.",
    )
    def post(self, request, id):
        """Place or release the session's legal hold."""
        session = session_in_reach(user=request.user, session_id=object_id(id))
        data = LegalHoldSetSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        session = session_legal_hold(
            user=request.user, session=session, hold=data.validated_data["hold"]
        )
        return Response(LegalHoldSerializer(session).data)
