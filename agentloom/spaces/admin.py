"""Spaces, memberships and API tokens in the admin, scoped like the API (admin_scoping.py).

Memberships are changed only by an admin of their space, so nobody can make herself a member, let
alone an admin, of a space she does not administer.
"""

from django.contrib import admin, messages

from agentloom.errors import ApplicationError
from agentloom.spaces.admin_scoping import SpaceScopedAdmin
from agentloom.spaces.models import ApiToken, Membership, Space
from agentloom.spaces.selectors import require_space_admin, space_role
from agentloom.spaces.tokens import token_revoke


def _administers(request, space) -> bool:
    return request.user.is_superuser or (
        space is not None and space_role(request.user, space.pk) == Membership.Role.ADMIN
    )


class MembershipInline(admin.TabularInline):
    """The members of a space, on its page: edited by the space's admins only."""

    model = Membership
    extra = 0
    autocomplete_fields = ["user"]

    def has_add_permission(self, request, obj=None) -> bool:
        return super().has_add_permission(request, obj) and _administers(request, obj)

    def has_change_permission(self, request, obj=None) -> bool:
        return super().has_change_permission(request, obj) and _administers(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return super().has_delete_permission(request, obj) and _administers(request, obj)


@admin.register(Space)
class SpaceAdmin(SpaceScopedAdmin):
    space_path = ""
    list_display = ["name", "created_at"]
    search_fields = ["name"]
    inlines = [MembershipInline]

    def has_add_permission(self, request) -> bool:
        # Anyone allowed to add spaces may start one; its creator becomes its admin.
        return admin.ModelAdmin.has_add_permission(self, request)

    def get_inlines(self, request, obj):
        # Members are added once the space exists (its creator is its first admin).
        return self.inlines if obj is not None else []

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if not change:
            Membership.objects.get_or_create(
                space=obj, user=request.user, defaults={"role": Membership.Role.ADMIN}
            )


@admin.register(Membership)
class MembershipAdmin(SpaceScopedAdmin):
    list_display = ["space", "user", "role", "created_at"]
    list_filter = ["role"]
    # Any user may be added to a space; the space itself is chosen among those the caller admins.
    autocomplete_fields = ["user"]

    def choices_for(self, db_field, request):
        if db_field.name == "user":
            return None
        return super().choices_for(db_field, request)

    def save_model(self, request, obj, form, change):
        if not request.user.is_superuser:
            # The form only offers administered spaces; this holds even if it did not.
            require_space_admin(request.user, obj.space_id)
        super().save_model(request, obj, form, change)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are listed and revoked here; `manage.py create_api_token` makes them (key shown once).

    Only the digest is stored, so there is nothing secret to show. Staff see their own tokens.
    """

    list_display = ["prefix", "user", "name", "created_at", "expires_at", "revoked_at"]
    list_filter = ["revoked_at"]
    readonly_fields = ["user", "name", "prefix", "created_at", "expires_at", "revoked_at"]
    exclude = ["digest"]
    actions = ["revoke"]

    def get_queryset(self, request):
        tokens = super().get_queryset(request)
        return tokens if request.user.is_superuser else tokens.filter(user=request.user)

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        # A revoked token stays on record; revoke it instead.
        return False

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request, queryset):
        for token in queryset:
            try:
                token_revoke(user=request.user, token=token)
            except ApplicationError as error:
                self.message_user(request, f"{token}: {error.detail}", messages.ERROR)
        self.message_user(request, "Revoked; the tokens no longer authenticate.")
