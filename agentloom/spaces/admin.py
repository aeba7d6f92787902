from django.contrib import admin

from agentloom.spaces.models import Membership, Space


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Space)
class SpaceAdmin(admin.ModelAdmin):
    list_display = ["name", "created_at"]
    search_fields = ["name"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["space", "user", "role", "created_at"]
    list_filter = ["role"]
    autocomplete_fields = ["user", "space"]
