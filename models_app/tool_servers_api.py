"""REST endpoints of tool servers (MCP servers over Streamable HTTP)."""

from __future__ import annotations

from rest_framework import serializers, status
from rest_framework.response import Response

from agentloom.api import ApiView, StrictSerializer, TextField, api_schema, id_field, object_id
from agentloom.spaces.selectors import require_space_admin
from models_app.selectors import space_get, tool_server_get, tool_servers_for_user
from models_app.services.tool_servers import (
    MAX_HEADERS,
    tool_server_create,
    tool_server_delete,
    tool_server_list_new,
    tool_server_refresh,
    tool_server_update,
)

SERVER_ID = "Tool server id."


class ListedToolSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="The tool's name on the server.")
    model_name = serializers.CharField(
        help_text="The name agents list and the model calls: `<server>__<tool>`."
    )
    description = serializers.CharField()
    input_schema = serializers.DictField()
    unavailable = serializers.CharField(
        required=False, help_text="Why this tool cannot be given to an agent, when it cannot."
    )


class ListedResourceSerializer(serializers.Serializer):
    uri = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    mime_type = serializers.CharField()


class ToolServerSerializer(serializers.Serializer):
    """A tool server; header values are never returned, only their names."""

    id = serializers.IntegerField()
    space = serializers.IntegerField(source="space_id")
    name = serializers.CharField()
    url = serializers.CharField()
    header_names = serializers.SerializerMethodField()
    approval = serializers.ChoiceField(
        choices=["never", "always"],
        help_text="The default of its tools: `always` makes a person approve each call.",
    )
    tools = ListedToolSerializer(many=True, help_text="The listing as last refreshed.")
    protocol_version = serializers.CharField(
        help_text="The MCP revision the server spoke at the last refresh (empty before)."
    )
    listed_at = serializers.DateTimeField(allow_null=True)
    listing_stale_since = serializers.DateTimeField(
        allow_null=True,
        help_text="Set when a run saw the server's tools differ from this listing (or the "
        "server said they changed); cleared by the next refresh.",
    )
    declares_resources = serializers.BooleanField(
        help_text="The server declared resources at the last refresh: agents using its tools "
        "get the built-in `read_resource`."
    )
    resources = ListedResourceSerializer(many=True, help_text="Its resources as last listed.")
    oauth = serializers.ChoiceField(
        choices=["", "member", "space"],
        help_text='Whose account its tools act as when it uses OAuth: "member" (each member '
        'connects their own in the console), "space" (one shared connection, named on every '
        'result), "" (no OAuth: headers only).',
    )
    oauth_client_id = serializers.CharField(
        help_text="The client id registered beforehand at its authorization server (empty: a "
        "Client ID Metadata Document or dynamic registration). Its secret is write-only."
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def get_header_names(self, server) -> list[str]:
        return sorted(server.headers or {})


class ToolServerCreatedSerializer(ToolServerSerializer):
    """A tool server just registered, and whether its tools could be listed at once."""

    listing_error = serializers.CharField(
        allow_null=True,
        help_text="Null when the tools were listed at registration; else why they could not be "
        "(the server is registered all the same: list them later with `POST …/{id}/refresh`).",
    )


_HEADERS_HELP = (
    f"At most {MAX_HEADERS} header names and values sent with every request (such as "
    "Authorization); write-only, encrypted, redacted from everything runs write. On PATCH "
    "they replace the stored set; a URL change without them drops the stored headers."
)


class _ToolServerInput(StrictSerializer):
    url = TextField(max_length=500, required=False)
    approval = serializers.ChoiceField(choices=["never", "always"], required=False)
    headers = serializers.DictField(
        child=TextField(allow_blank=True, trim_whitespace=False, max_length=4_096),
        required=False,
        allow_empty=True,
        write_only=True,
        help_text=_HEADERS_HELP,
    )
    oauth = serializers.ChoiceField(choices=["", "member", "space"], required=False)
    oauth_client_id = TextField(max_length=500, required=False, allow_blank=True)
    oauth_client_secret = TextField(
        max_length=4_096,
        required=False,
        allow_blank=True,
        write_only=True,
        help_text="The secret of `oauth_client_id`, if it has one; write-only, encrypted.",
    )


class ToolServerCreateSerializer(_ToolServerInput):
    space = id_field()
    name = TextField(max_length=30)
    url = TextField(max_length=500)


class ToolServerUpdateSerializer(_ToolServerInput):
    name = TextField(max_length=30, required=False)


class ToolServerListCreateApi(ApiView):
    @api_schema(ok=200, response=ToolServerSerializer(many=True), operation_id="tool_servers_list")
    def get(self, request):
        """List the tool servers of the caller's spaces."""
        return self.paginated(tool_servers_for_user(request.user), ToolServerSerializer)

    @api_schema(
        ok=201,
        response=ToolServerCreatedSerializer,
        request=ToolServerCreateSerializer,
        errors=(403, 404),
        operation_id="tool_servers_create",
        description="Register an MCP server over Streamable HTTP (space admins only) and list its "
        "tools at once. A server that does not answer is registered all the same, unlisted, "
        "with `listing_error` saying why; `POST …/{id}/refresh` lists it later.",
    )
    def post(self, request):
        """Register a tool server and list its tools."""
        data = ToolServerCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        space = space_get(user=request.user, space_id=fields.pop("space"))
        server = tool_server_create(user=request.user, space=space, **fields)
        server, unlisted = tool_server_list_new(user=request.user, server=server)
        body = ToolServerCreatedSerializer(server).data | {"listing_error": unlisted or None}
        return Response(body, status=status.HTTP_201_CREATED)


class ToolServerDetailApi(ApiView):
    @api_schema(
        ok=200,
        response=ToolServerSerializer,
        errors=(404,),
        path_id=SERVER_ID,
        operation_id="tool_servers_retrieve",
    )
    def get(self, request, id):
        """Return a tool server; any member of its space may read it."""
        server = tool_server_get(user=request.user, server_id=object_id(id))
        return Response(ToolServerSerializer(server).data)

    @api_schema(
        ok=200,
        response=ToolServerSerializer,
        request=ToolServerUpdateSerializer,
        errors=(403, 404),
        path_id=SERVER_ID,
        operation_id="tool_servers_partial_update",
    )
    def patch(self, request, id):
        """Change a tool server (space admins only)."""
        server = tool_server_get(user=request.user, server_id=object_id(id))
        require_space_admin(request.user, server.space_id)
        data = ToolServerUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        server = tool_server_update(user=request.user, server=server, **data.validated_data)
        return Response(ToolServerSerializer(server).data)

    @api_schema(
        ok=204,
        response=None,
        errors=(403, 404),
        path_id=SERVER_ID,
        operation_id="tool_servers_destroy",
        description="Delete a tool server (space admins only). Published versions keep its "
        "frozen tools; their calls then fail as tool errors.",
    )
    def delete(self, request, id):
        """Delete a tool server."""
        server = tool_server_get(user=request.user, server_id=object_id(id))
        tool_server_delete(user=request.user, server=server)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ToolServerRefreshApi(ApiView):
    @api_schema(
        ok=200,
        response=ToolServerSerializer,
        errors=(403, 404, 502),
        path_id=SERVER_ID,
        operation_id="tool_servers_refresh",
        description="List the server's tools now and store the listing (space admins only); "
        "502 with a fixed message when the server cannot be reached or is refused.",
    )
    def post(self, request, id):
        """List a tool server's tools."""
        server = tool_server_get(user=request.user, server_id=object_id(id))
        server = tool_server_refresh(user=request.user, server=server)
        return Response(ToolServerSerializer(server).data)
