"""Agents (editable drafts) and their published versions (frozen snapshots)."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from agentloom.spaces.models import Space
from models_app.models import ModelConnection


def default_agent_tools() -> list[str]:
    """The tools a new agent starts with: `search_history`, which its admin may remove."""
    return ["search_history"]


class Agent(models.Model):
    space = models.ForeignKey(Space, on_delete=models.CASCADE, related_name="agents")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="owned_agents"
    )
    name = models.CharField(max_length=120)
    system_prompt = models.TextField(blank=True, default="")
    model_connection = models.ForeignKey(
        ModelConnection, on_delete=models.PROTECT, null=True, blank=True, related_name="agents"
    )
    # Built-in tool names and `<server>__<tool>` names; new agents search their history.
    tools = models.JSONField(default=default_agent_tools, blank=True)
    # Per tool-server tool: `always` or `never` needs a person's approval, overriding the
    # server's default (`{"<server>__<tool>": "always"}`).
    approval = models.JSONField(default=dict, blank=True)
    sub_agents = models.JSONField(default=list, blank=True)
    verify_completion = models.BooleanField(default=False)
    context_policy = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.name


class PublishedVersionImmutable(ValidationError):
    """A published AgentVersion was about to be changed."""


class AgentVersion(models.Model):
    """A published, frozen agent. Rows never change once written (a database trigger agrees)."""

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField()
    snapshot = models.JSONField()
    # Kept as a real foreign key so deleting a connection that a version uses is refused.
    model_connection = models.ForeignKey(
        ModelConnection, on_delete=models.PROTECT, null=True, related_name="agent_versions"
    )
    published_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "number"], name="unique_agent_version"),
        ]

    def __str__(self) -> str:
        return f"{self.agent} v{self.number}"

    def save(self, *args, **kwargs):
        if self.pk is not None and not self._state.adding:
            raise PublishedVersionImmutable("Published agent versions are immutable.")
        super().save(*args, **kwargs)
