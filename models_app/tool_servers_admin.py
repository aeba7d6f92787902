"""The tool-server admin: register an MCP server, list its tools, see what agents may choose.

Writes go through `models_app.tool_servers`, so the page and the API refuse the same input with
the same messages. Headers are write-only: the page shows their names, never their values.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.utils.html import format_html_join

from agentloom.errors import ApplicationError
from agentloom.spaces.admin_scoping import ServiceWritesAdmin
from agentloom.spaces.selectors import administered_spaces
from models_app.models import ToolServer
from models_app.tool_servers import (
    tool_server_create_nested,
    tool_server_delete,
    tool_server_delete_nested,
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


class ToolServerForm(forms.ModelForm):
    user = None

    url = forms.CharField(
        label="URL",
        max_length=500,
        help_text="The server's Streamable HTTP endpoint, such as https://tools.example.com/mcp. "
        "OAuth is not supported: give credentials as headers.",
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

    class Meta:
        model = ToolServer
        fields = ["space", "name", "url", "approval"]

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
        }
        if self.instance.pk is not None:
            fields = {name: value for name, value in fields.items() if name in self.changed_data}
        if data.get("clear_headers"):
            fields["headers"] = {}
        elif data.get("headers_text"):
            fields["headers"] = _parse_headers(data["headers_text"])
        return fields

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        if cleaned.get("headers_text") and _parse_headers(cleaned["headers_text"]) is None:
            self.add_error("headers_text", "Each line is `Name: value`.")
            return cleaned
        server = self.instance if self.instance.pk else ToolServer(name="", url="")
        try:
            tool_server_validate(server=server, changes=self.service_fields())
        except ApplicationError as error:
            field = {"headers": "headers_text"}.get(error.field, error.field)
            self.add_error(field if field in self.fields else None, error.detail)
        return cleaned

    def _post_clean(self):
        # The service's rules are the only ones (it checks the URL with the address guard).
        pass


@admin.register(ToolServer)
class ToolServerAdmin(ServiceWritesAdmin):
    form = ToolServerForm
    list_display = ["name", "space", "url", "protocol_version", "tool_count", "listed_at"]
    search_fields = ["name", "url"]
    actions = ["list_tools"]

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return [(None, {"fields": ["space", "name", "url", "headers_text", "approval"]})]
        editable = self.has_change_permission(request, obj)
        fields = ["space", "name", "url", "approval"]
        fields += ["headers_text", "clear_headers"] if editable else []
        return [
            (None, {"fields": [*fields, "header_names"]}),
            ("Tools", {"fields": ["protocol_version", "listed_at", "listed_tools"]}),
        ]

    def get_readonly_fields(self, request, obj=None):
        shown = ["header_names", "protocol_version", "listed_at", "listed_tools"]
        return ["space", *shown] if obj is not None else []

    @admin.display(description="Tools")
    def tool_count(self, obj):
        return len(obj.tools or [])

    @admin.display(description="Stored headers")
    def header_names(self, obj):
        names = sorted(obj.headers or {})
        return ", ".join(names) + " (values write-only, never shown)" if names else "none"

    @admin.display(description="Listed tools")
    def listed_tools(self, obj):
        if not obj.tools:
            return "Not listed yet: use the “List tools” action."
        return format_html_join(
            "",
            "<p><code>{}</code> — {} {}</p>",
            (
                (entry["model_name"], entry.get("description") or "", entry.get("unavailable", ""))
                for entry in obj.tools
            ),
        )

    @admin.action(description="List tools (ask the server now)")
    def list_tools(self, request, queryset):
        for server in queryset:
            try:
                listed = tool_server_refresh(user=request.user, server=server)
            except ApplicationError as error:
                self.message_user(request, f"{server}: {error.detail}", messages.ERROR)
            else:
                self.message_user(
                    request,
                    f"{server}: {len(listed.tools)} tools ({listed.protocol_version}).",
                    messages.SUCCESS,
                )

    def save_form(self, request, form, change):
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
