"""The spend-limit admin: what a space, one of its agents or one member may spend on models in
a calendar month of the space's time zone (checked when a question is asked)."""

from django.contrib import admin

from agentloom.spaces.admin_scoping import SpaceScopedAdmin
from models_app.models import SpendLimit


@admin.register(SpendLimit)
class SpendLimitAdmin(SpaceScopedAdmin):
    list_display = ["space", "agent_id", "member", "amount", "currency", "warn_share"]
    fields = ["space", "agent_id", "member", "amount", "currency", "warn_share"]
