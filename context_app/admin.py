from django.contrib import admin, messages
from django.db import models
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html

from agentloom.errors import ApplicationError
from agentloom.forms import JSONFormField
from agentloom.spaces.admin_scoping import SpaceScopedAdmin
from context_app.models import Agent, AgentVersion
from context_app.selectors import draft_changes, latest_versions
from context_app.services import agent_publish

PUBLISH_BUTTON = "_publish"


def publication_text(agent: Agent) -> str:
    """Say whether the draft is published, and where it differs from its latest version."""
    version = latest_versions([agent]).get(agent.pk)
    if version is None:
        return "Not published yet: sessions cannot use this agent until it is published."
    changed = draft_changes(agent, version)
    if not changed:
        return f"Published as v{version.number}; the draft is the same."
    fields = ", ".join(name.replace("_", " ") for name in changed)
    return f"The draft differs from the latest version v{version.number} in: {fields}."


@admin.register(Agent)
class AgentAdmin(SpaceScopedAdmin):
    """Drafts of the staff user's spaces; changed and published by its admins, as in the API.

    The change page has a "Save and publish" button and the list a publish action: both go
    through `agent_publish`, so the same checks (space admin, usable connection) apply.
    """

    change_form_template = "admin/context_app/agent/change_form.html"
    list_display = ["name", "space", "model_connection", "publication", "updated_at"]
    list_filter = ["space"]
    search_fields = ["name"]
    readonly_fields = ["publication"]
    actions = ["publish_selected"]
    formfield_overrides = {models.JSONField: {"form_class": JSONFormField}}

    @admin.display(description="Publication")
    def publication(self, agent: Agent) -> str:
        if agent.pk is None:
            return "A new draft: save it, then publish it."
        return publication_text(agent)

    def _publish(self, request, agent: Agent) -> bool:
        try:
            version = agent_publish(user=request.user, agent=agent)
        except ApplicationError as error:
            field = f" ({error.field.replace('_', ' ')})" if error.field else ""
            self.message_user(
                request, f"{agent.name} not published{field}: {error.detail}", messages.ERROR
            )
            return False
        chat = reverse("home")
        self.message_user(
            request,
            format_html(
                'Published {} as v{}. Start a session with it on the <a href="{}">console</a>.',
                agent.name,
                version.number,
                chat,
            ),
            messages.SUCCESS,
        )
        return True

    @admin.action(description="Publish the selected agents' drafts")
    def publish_selected(self, request, queryset) -> None:
        for agent in queryset:
            if self.may_edit(request, agent):
                self._publish(request, agent)
            else:
                self.message_user(
                    request,
                    f"{agent.name} not published: only the space's admins may publish.",
                    messages.ERROR,
                )

    def _after_save(self, request, obj, response):
        if PUBLISH_BUTTON not in request.POST:
            return response
        self._publish(request, obj)
        return HttpResponseRedirect(reverse("admin:context_app_agent_change", args=[obj.pk]))

    def response_change(self, request, obj):
        return self._after_save(request, obj, super().response_change(request, obj))

    def response_add(self, request, obj, post_url_continue=None):
        return self._after_save(request, obj, super().response_add(request, obj, post_url_continue))


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
