from django.contrib import admin
from django.db import models

from agentloom.forms import JSONFormField
from agentloom.spaces.admin_scoping import SpaceScopedAdmin
from context_app.models import Agent, AgentVersion


@admin.register(Agent)
class AgentAdmin(SpaceScopedAdmin):
    """Drafts of the staff user's spaces; changed by the space's admins, as in the API."""

    list_display = ["name", "space", "owner", "model_connection", "verify_completion", "updated_at"]
    list_filter = ["space"]
    search_fields = ["name"]
    formfield_overrides = {models.JSONField: {"form_class": JSONFormField}}


@admin.register(AgentVersion)
class AgentVersionAdmin(SpaceScopedAdmin):
    """Published versions are frozen: the admin shows them and never edits them."""

    space_path = "agent__space"
    list_display = ["agent", "number", "model_connection", "published_by", "created_at"]
    readonly_fields = ["agent", "number", "snapshot", "model_connection", "published_by"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
