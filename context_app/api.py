"""REST endpoints of agents (drafts) and their published versions."""

from __future__ import annotations

from rest_framework import status
from rest_framework.response import Response

from agentloom.api import ApiView, api_schema, object_id
from agentloom.spaces.selectors import require_space_admin
from context_app.selectors import agent_get, agents_for_user, space_get, versions_of
from context_app.serializers import (
    AgentCreateSerializer,
    AgentSerializer,
    AgentUpdateSerializer,
    AgentVersionSerializer,
)
from context_app.services.agents import agent_create, agent_publish, agent_update

AGENT_ID = "Agent id."


class AgentListCreateApi(ApiView):
    @api_schema(ok=200, response=AgentSerializer(many=True), operation_id="agents_list")
    def get(self, request):
        """List the agents of the caller's spaces."""
        return self.paginated(agents_for_user(request.user), AgentSerializer)

    @api_schema(
        ok=201,
        response=AgentSerializer,
        request=AgentCreateSerializer,
        errors=(403, 404),
        operation_id="agents_create",
        description="Create a draft (space admins only). A missing or partial `context_policy` "
        "is merged over the defaults.",
    )
    def post(self, request):
        """Create a draft agent."""
        data = AgentCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        space = space_get(user=request.user, space_id=fields.pop("space"))
        agent = agent_create(user=request.user, space=space, **fields)
        return Response(AgentSerializer(agent).data, status=status.HTTP_201_CREATED)


class AgentDetailApi(ApiView):
    @api_schema(
        ok=200,
        response=AgentSerializer,
        errors=(404,),
        path_id=AGENT_ID,
        operation_id="agents_retrieve",
    )
    def get(self, request, id):
        """Return a draft agent; any member of its space may read it."""
        agent = agent_get(user=request.user, agent_id=object_id(id))
        return Response(AgentSerializer(agent).data)

    @api_schema(
        ok=200,
        response=AgentSerializer,
        request=AgentUpdateSerializer,
        errors=(403, 404),
        path_id=AGENT_ID,
        operation_id="agents_partial_update",
        description="Change the draft (space admins only); published versions do not change.",
    )
    def patch(self, request, id):
        """Change a draft agent."""
        agent = agent_get(user=request.user, agent_id=object_id(id))
        require_space_admin(request.user, agent.space_id)
        data = AgentUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        agent = agent_update(user=request.user, agent=agent, **data.validated_data)
        return Response(AgentSerializer(agent).data)


class AgentPublishApi(ApiView):
    @api_schema(
        ok=201,
        response=AgentVersionSerializer,
        errors=(400, 403, 404),
        path_id=AGENT_ID,
        operation_id="agents_publish",
        description="Freeze the draft into the next immutable version (space admins only).",
    )
    def post(self, request, id):
        """Publish the draft."""
        agent = agent_get(user=request.user, agent_id=object_id(id))
        version = agent_publish(user=request.user, agent=agent)
        return Response(AgentVersionSerializer(version).data, status=status.HTTP_201_CREATED)


class AgentVersionListApi(ApiView):
    @api_schema(
        ok=200,
        response=AgentVersionSerializer(many=True),
        errors=(404,),
        path_id=AGENT_ID,
        operation_id="agents_versions_list",
    )
    def get(self, request, id):
        """List the agent's published versions, newest first."""
        agent = agent_get(user=request.user, agent_id=object_id(id))
        return self.paginated(versions_of(agent), AgentVersionSerializer)
