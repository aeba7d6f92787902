"""The tool-server admin: register an MCP server, list its tools, see what agents may choose.

Writes go through `models_app.services.tool_servers`, so the page and the API refuse the same
input with the same messages. Headers are write-only: the page shows their names, never their
values.
Registering lists the server's tools at once, after the page's transaction committed; the change
page's "List tools now" button and the list's "List tools" action ask the server again.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from agentloom.errors import ApplicationError
from agentloom.spaces.admin_scoping import ServiceForm, ServiceWritesAdmin
from agentloom.spaces.selectors import administered_spaces
from models_app.models import ToolServer
from models_app.services.tool_servers import (
    tool_server_create_nested,
    tool_server_delete,
    tool_server_delete_nested,
    tool_server_list_new,
    tool_server_refresh,
    tool_server_update_nested,
    tool_server_validate,
)


def _parse_headers(text: str) -> dict[str, str] | None:
    """Return the `Name: value` lines of `text` as headers; None for a malformed line."""
    headers: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, separator, value = line.partition(":")
        if not separator:
            return None
        headers[name.strip()] = value.strip()
    return headers


class ToolServerForm(ServiceForm):
    form_fields = {"headers": "headers_text"}

    url = forms.CharField(
        label="URL",
        max_length=500,
        help_text="The server's Streamable HTTP endpoint, such as https://tools.example.com/mcp.",
    )
    headers_text = forms.CharField(
        required=False,
        label="Headers",
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off"}),
        help_text="One `Name: value` per line, sent with every request. Write-only, stored "
        "encrypted, redacted from everything runs write. On edit, leave blank to keep the stored "
        "headers (a new URL drops them).",
    )
    clear_headers = forms.BooleanField(required=False, label="Remove the stored headers")
    oauth_client_secret = forms.CharField(
        required=False,
        label="OAuth client secret",
        widget=forms.PasswordInput(attrs={"autocomplete": "off"}),
        help_text="Of the client id registered beforehand, if it has one. Write-only, stored "
        "encrypted; on edit, leave blank to keep the stored one.",
    )

    class Meta:
        model = ToolServer
        fields = ["space", "name", "url", "approval", "oauth", "oauth_client_id"]

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if "space" in self.fields and self.user is not None:
            self.fields["space"].queryset = administered_spaces(self.user)
        if "approval" in self.fields:
            self.fields["approval"].required = False
            self.fields[
                "approval"
            ].help_text = "The default of this server's tools; an agent may set a mode per tool."

    def service_fields(self) -> dict[str, Any]:
        data = self.cleaned_data
        fields: dict[str, Any] = {
            "name": data.get("name"),
            "url": data.get("url"),
            "approval": data.get("approval") or "never",
            "oauth": data.get("oauth") or "",
            "oauth_client_id": data.get("oauth_client_id") or "",
        }
        if self.instance.pk is not None:
            fields = {name: value for name, value in fields.items() if name in self.changed_data}
        if data.get("oauth_client_secret"):
            fields["oauth_client_secret"] = data["oauth_client_secret"]
        if data.get("clear_headers"):
            fields["headers"] = {}
        elif data.get("headers_text"):
            fields["headers"] = _parse_headers(data["headers_text"])
        return fields

    def clean_headers_text(self):
        text = self.cleaned_data.get("headers_text") or ""
        if _parse_headers(text) is None:
            raise forms.ValidationError("Each line is `Name: value`.")
        return text

    def check(self, cleaned: dict[str, Any]) -> None:
        # The service checks the URL with the address guard; the model's validators are not run.
        if self.instance.pk is not None:
            tool_server_validate(
                user=self.user, server=self.instance, changes=self.service_fields()
            )
        elif cleaned.get("space") is not None:
            tool_server_validate(
                user=self.user, space=cleaned["space"], changes=self.service_fields()
            )


@admin.register(ToolServer)
class ToolServerAdmin(ServiceWritesAdmin):
    form = ToolServerForm
    change_form_template = "admin/models_app/toolserver/change_form.html"
    list_display = [
        "name",
        "space",
        "url",
        "protocol_version",
        "tool_count",
        "listed_at",
        "listing_state",
    ]
    search_fields = ["name", "url"]
    actions = ["list_tools"]

    def get_fieldsets(self, request, obj=None):
        oauth = ("OAuth", {"fields": ["oauth", "oauth_client_id", "oauth_client_secret"]})
        if obj is None:
            return [
                (None, {"fields": ["space", "name", "url", "headers_text", "approval"]}),
                oauth,
            ]
        editable = self.has_change_permission(request, obj)
        fields = ["space", "name", "url", "approval"]
        fields += ["headers_text", "clear_headers"] if editable else []
        oauth_fields = ["oauth", "oauth_client_id"]
        oauth_fields += ["oauth_client_secret"] if editable else []
        return [
            (None, {"fields": [*fields, "header_names"]}),
            ("OAuth", {"fields": [*oauth_fields, "oauth_state"]}),
            (
                "Tools",
                {
                    "fields": [
                        "protocol_version",
                        "listed_at",
                        "listing_state",
                        "listed_tools",
                        "listed_resources",
                    ]
                },
            ),
        ]

    def get_readonly_fields(self, request, obj=None):
        shown = [
            "oauth_state",
            "header_names",
            "protocol_version",
            "listed_at",
            "listing_state",
            "listed_tools",
            "listed_resources",
        ]
        return ["space", *shown] if obj is not None else []

    @admin.display(description="Tools")
    def tool_count(self, obj):
        return len(obj.tools or [])

    @admin.display(description="OAuth connections")
    def oauth_state(self, obj):
        if not obj.oauth:
            return "No OAuth: the server takes headers only."
        count = obj.oauth_connections.count()
        whose = "the space's shared account" if obj.oauth == "space" else "each member's account"
        return (
            f"Its tools act as {whose}; {count} connection{'s' if count != 1 else ''}. Members "
            "connect on the console's page of the space (a client registered beforehand must "
            "allow the console's /oauth/callback/ as its redirect URI)."
        )

    @admin.display(description="Stored headers")
    def header_names(self, obj):
        names = sorted(obj.headers or {})
        return ", ".join(names) + " (values write-only, never shown)" if names else "none"

    @admin.display(description="Listed tools")
    def listed_tools(self, obj):
        if not obj.tools:
            return "Not listed yet: a space admin lists them with “List tools now”, below Save."
        return format_html_join(
            "",
            "<p><code>{}</code> — {} {}</p>",
            (
                (entry["model_name"], entry.get("description") or "", entry.get("unavailable", ""))
                for entry in obj.tools
            ),
        )

    @admin.display(description="Listing")
    def listing_state(self, obj):
        if obj.listing_stale_since is None:
            return "current" if obj.listed_at else "not listed"
        return format_html(
            "<strong>stale since {}</strong>: the server's tools changed since they were "
            "listed; list them again to choose new ones (published versions keep the tools "
            "they froze)",
            obj.listing_stale_since.strftime("%Y-%m-%d %H:%M UTC"),
        )

    @admin.display(description="Resources")
    def listed_resources(self, obj):
        if not obj.declares_resources:
            return "The server declares no resources."
        if not obj.resources:
            return (
                "The server declares resources and lists none; agents read those its tool "
                "results name (read_resource)."
            )
        return format_html_join(
            "",
            "<p><code>{}</code> {} — {} {}</p>",
            (
                (
                    entry.get("uri", ""),
                    entry.get("name", ""),
                    entry.get("description") or "",
                    f"({entry['mime_type']})" if entry.get("mime_type") else "",
                )
                for entry in obj.resources
            ),
        )

    # --- listing a server's tools: outside the page's transaction -----------------------------

    def _list(self, request, server: ToolServer) -> None:
        """Ask `server` for its tools now and say what came of it."""
        try:
            listed = tool_server_refresh(user=request.user, server=server)
        except ApplicationError as error:
            self.message_user(request, f"{server}: {error.detail}", messages.ERROR)
        else:
            self._say_listed(request, listed)

    def _say_listed(self, request, server: ToolServer) -> None:
        count = len(server.tools)
        self.message_user(
            request,
            f"{server}: {count} tools listed ({server.protocol_version}).",
            messages.SUCCESS,
        )

    @admin.action(description="List tools (ask the server now)")
    def list_tools(self, request, queryset):
        for server in queryset:
            self._list(request, server)

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}_list_tools"
        view = self.admin_site.admin_view(self.list_tools_view)
        return [path("<path:object_id>/list-tools/", view, name=name), *super().get_urls()]

    def list_tools_view(self, request, object_id):
        """The change page's "List tools now": list the server's tools, then show its page."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        server = self.get_object(request, unquote(object_id))
        if server is None:
            raise Http404
        if not self.has_change_permission(request, server):
            raise PermissionDenied
        self._list(request, server)
        change = f"admin:{self.opts.app_label}_{self.opts.model_name}_change"
        return HttpResponseRedirect(reverse(change, args=[server.pk]))

    def response_add(self, request, obj, post_url_continue=None):
        request.registered_server = obj
        return super().response_add(request, obj, post_url_continue)

    def add_view(self, request, form_url="", extra_context=None):
        response = super().add_view(request, form_url, extra_context)
        server = getattr(request, "registered_server", None)
        if server is not None:
            # The registration has committed; the server is asked outside any transaction.
            server, unlisted = tool_server_list_new(user=request.user, server=server)
            if unlisted:
                message = f"{server}: its tools could not be listed: {unlisted}"
                self.message_user(request, message, messages.WARNING)
            else:
                self._say_listed(request, server)
        return response

    # --- writes go through the services ----------------------------------------------------------

    def service_save(self, request, form, change):
        fields = form.service_fields()
        if change:
            return tool_server_update_nested(user=request.user, server=form.instance, **fields)
        return tool_server_create_nested(
            user=request.user, space=form.cleaned_data["space"], **fields
        )

    def delete_model(self, request, obj):
        tool_server_delete_nested(user=request.user, server=obj)

    def delete_queryset(self, request, queryset):
        # The "delete selected" action runs outside any transaction: each deletion is its own.
        for server in queryset:
            tool_server_delete(user=request.user, server=server)
