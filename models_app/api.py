"""REST endpoints of model connections and model discovery."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response

from agentloom.api import ApiView, DetailSerializer, api_schema, object_id
from agentloom.spaces.selectors import require_space_admin
from models_app.selectors import connection_get, connections_for_user, space_get
from models_app.serializers import (
    ConnectionTestRequestSerializer,
    ConnectionTestResultSerializer,
    DiscoverResultSerializer,
    DiscoverSerializer,
    ModelConnectionCreateSerializer,
    ModelConnectionSerializer,
    ModelConnectionUpdateSerializer,
)
from models_app.services.connections import connection_create, connection_delete, connection_update
from models_app.services.discovery import connection_test, models_discover

CONNECTION_ID = "Model connection id."


class ModelConnectionListCreateApi(ApiView):
    @api_schema(
        ok=200,
        response=ModelConnectionSerializer(many=True),
        operation_id="model_connections_list",
    )
    def get(self, request):
        """List the model connections of the caller's spaces."""
        return self.paginated(connections_for_user(request.user), ModelConnectionSerializer)

    @api_schema(
        ok=201,
        response=ModelConnectionSerializer,
        request=ModelConnectionCreateSerializer,
        errors=(403, 404),
        operation_id="model_connections_create",
        description="Create a connection (space admins only). Omitted window values come from "
        "the official manifest or the 32K fallback without calling the provider; values sent "
        "without `window_source` are `manual`.",
    )
    def post(self, request):
        """Create a model connection."""
        data = ModelConnectionCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        space = space_get(user=request.user, space_id=fields.pop("space"))
        connection = connection_create(user=request.user, space=space, **fields)
        return Response(ModelConnectionSerializer(connection).data, status=status.HTTP_201_CREATED)


class ModelConnectionDetailApi(ApiView):
    @api_schema(
        ok=200,
        response=ModelConnectionSerializer,
        errors=(404,),
        path_id=CONNECTION_ID,
        operation_id="model_connections_retrieve",
    )
    def get(self, request, id):
        """Return a connection; any member of its space may read it."""
        connection = connection_get(user=request.user, connection_id=object_id(id))
        return Response(ModelConnectionSerializer(connection).data)

    @api_schema(
        ok=200,
        response=ModelConnectionSerializer,
        request=ModelConnectionUpdateSerializer,
        errors=(403, 404),
        path_id=CONNECTION_ID,
        operation_id="model_connections_partial_update",
        description="Change a connection (space admins only). A blank or omitted `api_key` keeps "
        "the stored key only while provider and base_url stay the same.",
    )
    def patch(self, request, id):
        """Change a model connection."""
        connection = connection_get(user=request.user, connection_id=object_id(id))
        # A member is refused before their body is read: the action is not theirs at all.
        require_space_admin(request.user, connection.space_id)
        data = ModelConnectionUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        connection = connection_update(
            user=request.user, connection=connection, **data.validated_data
        )
        return Response(ModelConnectionSerializer(connection).data)

    @api_schema(
        ok=204,
        response=None,
        errors=(403, 404, 409),
        path_id=CONNECTION_ID,
        operation_id="model_connections_destroy",
        description="Delete a connection (space admins only); 409 while a published version or "
        "a draft agent uses it.",
    )
    def delete(self, request, id):
        """Delete a model connection."""
        connection = connection_get(user=request.user, connection_id=object_id(id))
        connection_delete(user=request.user, connection=connection)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ModelDiscoverApi(ApiView):
    @extend_schema(
        operation_id="models_discover",
        request=DiscoverSerializer,
        responses={
            200: DiscoverResultSerializer,
            400: OpenApiResponse(
                OpenApiTypes.OBJECT,
                description='Bad input: `{"field": ["message"]}`; a refused provider address '
                "names `base_url`.",
            ),
            401: OpenApiResponse(DetailSerializer, description="Not authenticated."),
            403: OpenApiResponse(DetailSerializer, description="Only a space admin may do this."),
            404: OpenApiResponse(
                DetailSerializer, description="`resource_id` is outside the caller's reach."
            ),
            413: OpenApiResponse(DetailSerializer, description="Request body is too large."),
            415: OpenApiResponse(
                DetailSerializer, description="The body must be application/json."
            ),
            502: OpenApiResponse(
                DetailSerializer,
                description="The provider failed; the detail is fixed text, never its body.",
            ),
        },
        description="List the provider's models with window parameters and their source. The "
        "key is used for this request only and never stored.",
    )
    def post(self, request):
        """List the models a provider offers."""
        data = DiscoverSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        models = models_discover(user=request.user, **data.validated_data)
        return Response({"models": [model.to_dict() for model in models]})


class ModelConnectionTestApi(ApiView):
    @api_schema(
        ok=200,
        response=ConnectionTestResultSerializer,
        request=ConnectionTestRequestSerializer,
        errors=(403, 404),
        operation_id="model_connections_test",
        description="Send one tiny chat request through the guarded client (no retries) and "
        "say how it went: `ok` with the latency, or the provider error's kind and its fixed "
        "text. Nothing is saved; the key is used for this request only, and with `resource_id` "
        "a blank key means that connection's stored key, for its own provider and base_url.",
    )
    def post(self, request):
        """Test a model connection with one short chat request."""
        data = ConnectionTestRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        result = connection_test(user=request.user, **data.validated_data)
        return Response(ConnectionTestResultSerializer(result.to_dict()).data)
