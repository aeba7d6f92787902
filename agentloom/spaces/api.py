"""REST endpoints of spaces and their members."""

from __future__ import annotations

from django.db.models import OuterRef, Subquery
from rest_framework import status
from rest_framework.response import Response

from agentloom.api import ApiView, api_schema, object_id
from agentloom.spaces.models import Membership, Space
from agentloom.spaces.selectors import require_space_admin, spaces_for_user
from agentloom.spaces.serializers import (
    MembershipCreateSerializer,
    MembershipSerializer,
    SpaceCreateSerializer,
    SpaceSerializer,
)
from agentloom.spaces.services.spaces import member_add, space_create


def _spaces_with_role(user):
    role = Membership.objects.filter(space=OuterRef("pk"), user=user).values("role")[:1]
    return spaces_for_user(user).annotate(role=Subquery(role)).order_by("id")


class SpaceListCreateApi(ApiView):
    @api_schema(ok=200, response=SpaceSerializer(many=True), operation_id="spaces_list")
    def get(self, request):
        """List the spaces the caller is a member of."""
        return self.paginated(_spaces_with_role(request.user), SpaceSerializer)

    @api_schema(
        ok=201,
        response=SpaceSerializer,
        request=SpaceCreateSerializer,
        operation_id="spaces_create",
    )
    def post(self, request):
        """Create a space; the caller becomes its admin."""
        data = SpaceCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        space = space_create(user=request.user, **data.validated_data)
        space.role = Membership.Role.ADMIN
        return Response(SpaceSerializer(space).data, status=status.HTTP_201_CREATED)


class SpaceMemberCreateApi(ApiView):
    @api_schema(
        ok=201,
        response=MembershipSerializer,
        request=MembershipCreateSerializer,
        errors=(403, 404, 409),
        path_id="Space id.",
        operation_id="spaces_members_create",
    )
    def post(self, request, id):
        """Add a user to the space (space admins only)."""
        space_id = object_id(id)
        # 404 outside the space; a member is refused (403) before their body is even read.
        require_space_admin(request.user, space_id)
        space = Space.objects.get(pk=space_id)
        data = MembershipCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        membership = member_add(actor=request.user, space=space, **data.validated_data)
        return Response(MembershipSerializer(membership).data, status=status.HTTP_201_CREATED)
