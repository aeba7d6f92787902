"""Model-connection API routes (mounted under /api/), each with or without its final slash."""

from agentloom.api import endpoint
from models_app.api import (
    ModelConnectionDetailApi,
    ModelConnectionListCreateApi,
    ModelConnectionTestApi,
    ModelDiscoverApi,
)
from models_app.tool_servers_api import (
    ToolServerDetailApi,
    ToolServerListCreateApi,
    ToolServerRefreshApi,
)

urlpatterns = [
    endpoint("models/discover", ModelDiscoverApi, "api-models-discover"),
    endpoint("v1/model-connections/", ModelConnectionListCreateApi, "api-model-connections"),
    endpoint("v1/model-connections/test", ModelConnectionTestApi, "api-model-connections-test"),
    endpoint("v1/model-connections/{id}/", ModelConnectionDetailApi, "api-model-connection"),
    endpoint("v1/tool-servers/", ToolServerListCreateApi, "api-tool-servers"),
    endpoint("v1/tool-servers/{id}/", ToolServerDetailApi, "api-tool-server"),
    endpoint("v1/tool-servers/{id}/refresh", ToolServerRefreshApi, "api-tool-server-refresh"),
]
