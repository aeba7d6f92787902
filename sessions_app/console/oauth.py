"""The console's side of OAuth tool servers: connect an account, come back, disconnect.

The space's page lists its OAuth tool servers and, for each, whose account its tools act as:
each member's own (a member connects or disconnects theirs), or the space's shared one (an admin
connects or disconnects it; every run says it used it). "Connect" sends the person to the
authorization server (`oauth_connect_start`); the server sends them back to `oauth/callback/`,
which only the same user in the same browser session ends (`oauth_connect_finish`). The Client
ID Metadata Document is served at `oauth/client-metadata.json` when the deployment has an https
`CONSOLE_ORIGIN`, and is 404 otherwise.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponseRedirect, JsonResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from agentloom.errors import ApplicationError, NotFound
from models_app.selectors import tool_server_get
from models_app.services.tool_server_oauth import (
    client_metadata_document,
    oauth_connect_finish,
    oauth_connect_start,
    oauth_disconnect,
)
from sessions_app.console.errors import console_errors


def _space_page(request, *, space_id: int, **url_kwargs) -> str:
    return reverse("console-space", args=[space_id]) + "#tool-servers"


def _server_of(request, space_id: int, server_id: int):
    server = tool_server_get(user=request.user, server_id=server_id)
    if server.space_id != space_id:
        raise NotFound("Not found.")
    return server


@require_POST
@login_required
@console_errors(back=_space_page, prefix="Not connected: ")
def connect(request, space_id: int, server_id: int):
    """Send the person to the authorization server to connect their account (or the space's)."""
    server = _server_of(request, space_id, server_id)
    if request.session.session_key is None:
        request.session.save()
    url = oauth_connect_start(
        user=request.user,
        server=server,
        session_key=request.session.session_key,
        origin=f"{request.scheme}://{request.get_host()}",
        shared=request.POST.get("shared") == "1",
    )
    return HttpResponseRedirect(url)


@require_GET
@login_required
def callback(request):
    """Finish a connection with what the authorization server sent back, then show the space."""
    try:
        connected = oauth_connect_finish(
            user=request.user,
            session_key=request.session.session_key or "",
            state=request.GET.get("state", ""),
            code=request.GET.get("code", ""),
            error=request.GET.get("error", ""),
            iss=request.GET.get("iss"),
        )
    except ApplicationError as error:
        messages.error(request, f"Not connected: {error.detail}")
        return redirect("home")
    whose = "the space's shared account" if connected.shared else "your account"
    messages.success(request, f"{connected.server}: {whose} is connected.")
    return HttpResponseRedirect(_space_page(request, space_id=connected.server.space_id))


@require_POST
@login_required
@console_errors(back=_space_page, prefix="Not disconnected: ")
def disconnect(request, space_id: int, server_id: int):
    """Disconnect the person's account (or the space's) and revoke its tokens."""
    server = _server_of(request, space_id, server_id)
    shared = request.POST.get("shared") == "1"
    if oauth_disconnect(user=request.user, server=server, shared=shared):
        whose = "the space's shared account" if shared else "your account"
        messages.success(request, f"{server}: {whose} is disconnected; its tokens are revoked.")
    return HttpResponseRedirect(_space_page(request, space_id=space_id))


@require_GET
def metadata_document(request):
    """Serve this deployment's Client ID Metadata Document (404 without an https origin)."""
    document = client_metadata_document()
    if document is None:
        raise Http404("No client metadata document.")
    return JsonResponse(document)
