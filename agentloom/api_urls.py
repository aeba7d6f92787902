"""REST API routes under /api/ (the contract is listed in README.md).

Every path matches with or without its trailing slash; the schema shows the contract's spelling.
"""

from django.http import JsonResponse
from django.urls import include, path, re_path

from agentloom.api import endpoint
from agentloom.spaces.api import SpaceListCreateApi, SpaceMemberCreateApi
from context_app.api import AgentDetailApi, AgentListCreateApi, AgentPublishApi, AgentVersionListApi
from sessions_app.api import (
    RunAnswersApi,
    RunApprovalsApi,
    RunCancelApi,
    RunContextApi,
    RunDetailApi,
    RunModelCallsApi,
    RunResumeApi,
    RunSupplementsApi,
    SessionDetailApi,
    SessionExportApi,
    SessionForkApi,
    SessionImportApi,
    SessionListCreateApi,
    SessionMessagesApi,
    SessionPinApi,
    SessionRunsApi,
    SessionViewRevokeApi,
    SessionViewsApi,
)
from sessions_app.api_retention import SessionHoldApi, SpaceRetentionApi
from sessions_app.events import run_events


def unknown_path(request, *args, **kwargs):
    """Answer any other /api/v1/ path with a JSON 404 rather than an HTML page."""
    return JsonResponse({"detail": "Not found."}, status=404)


urlpatterns = [
    path("", include("models_app.urls")),
    endpoint("v1/spaces/", SpaceListCreateApi, "api-spaces"),
    endpoint("v1/spaces/{id}/members", SpaceMemberCreateApi, "api-space-members"),
    endpoint("v1/spaces/{id}/retention", SpaceRetentionApi, "api-space-retention"),
    endpoint("v1/agents/", AgentListCreateApi, "api-agents"),
    endpoint("v1/agents/{id}/", AgentDetailApi, "api-agent"),
    endpoint("v1/agents/{id}/publish", AgentPublishApi, "api-agent-publish"),
    endpoint("v1/agents/{id}/versions/", AgentVersionListApi, "api-agent-versions"),
    endpoint("v1/sessions/", SessionListCreateApi, "api-sessions"),
    endpoint("v1/sessions/import", SessionImportApi, "api-sessions-import"),
    endpoint("v1/sessions/{id}/", SessionDetailApi, "api-session"),
    endpoint("v1/sessions/{id}/runs", SessionRunsApi, "api-session-runs"),
    endpoint("v1/sessions/{id}/messages", SessionMessagesApi, "api-session-messages"),
    endpoint("v1/sessions/{id}/views/", SessionViewsApi, "api-session-views"),
    endpoint("v1/sessions/{id}/export", SessionExportApi, "api-session-export"),
    endpoint("v1/sessions/{id}/fork", SessionForkApi, "api-session-fork"),
    endpoint("v1/sessions/{id}/pin", SessionPinApi, "api-session-pin"),
    endpoint("v1/sessions/{id}/hold", SessionHoldApi, "api-session-hold"),
    endpoint(
        "v1/sessions/{id}/views/{revision}/revoke", SessionViewRevokeApi, "api-session-view-revoke"
    ),
    endpoint("v1/runs/{id}/", RunDetailApi, "api-run"),
    endpoint("v1/runs/{id}/supplements", RunSupplementsApi, "api-run-supplements"),
    endpoint("v1/runs/{id}/resume", RunResumeApi, "api-run-resume"),
    endpoint("v1/runs/{id}/cancel", RunCancelApi, "api-run-cancel"),
    endpoint("v1/runs/{id}/approvals", RunApprovalsApi, "api-run-approvals"),
    endpoint("v1/runs/{id}/answers", RunAnswersApi, "api-run-answers"),
    endpoint("v1/runs/{id}/context", RunContextApi, "api-run-context"),
    endpoint("v1/runs/{id}/model-calls", RunModelCallsApi, "api-run-model-calls"),
    re_path(r"^v1/runs/(?P<id>[^/]+)/events/?$", run_events, name="api-run-events"),
    re_path(r"^v1/", unknown_path, name="api-unknown"),
]
