"""Spaces, memberships and API tokens in the admin, scoped like the API (admin_scoping.py).

Memberships are changed only by an admin of their space, so nobody can make herself a member, let
alone an admin, of a space she does not administer.
"""

from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse

from agentloom.errors import ApplicationError
from agentloom.spaces.admin_scoping import SpaceScopedAdmin
from agentloom.spaces.models import ApiToken, Membership, Space
from agentloom.spaces.selectors import require_space_admin, space_role
from agentloom.spaces.tokens import MAX_EXPIRY_DAYS, token_create, token_revoke


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


class ApiTokenAddForm(forms.ModelForm):
    """A new token: for whom (superusers choose; staff get their own), a label, an expiry."""

    expires_days = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_EXPIRY_DAYS,
        help_text="Days until the token stops working. Blank: until revoked.",
    )

    class Meta:
        model = ApiToken
        fields = ["user", "name"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are created, listed and revoked here (or by `manage.py create_api_token`).

    Only the digest is stored: the key is shown once, on the page that answers the creation,
    and never again. Staff see and create their own tokens; superusers anyone's.
    """

    list_display = ["prefix", "user", "name", "created_at", "expires_at", "revoked_at"]
    list_filter = ["revoked_at"]
    actions = ["revoke"]

    def get_queryset(self, request):
        tokens = super().get_queryset(request)
        return tokens if request.user.is_superuser else tokens.filter(user=request.user)

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ApiTokenAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request, obj=None):
        if obj is not None:
            return ["user", "name", "prefix", "created_at", "expires_at", "revoked_at"]
        return (
            ["user", "name", "expires_days"]
            if request.user.is_superuser
            else ["name", "expires_days"]
        )

    def get_readonly_fields(self, request, obj=None):
        return self.get_fields(request, obj) if obj is not None else []

    def has_delete_permission(self, request, obj=None) -> bool:
        # A revoked token stays on record; revoke it instead.
        return False

    def save_form(self, request, form, change):
        data = form.cleaned_data
        owner = data.get("user") if request.user.is_superuser else request.user
        token, key = token_create(
            user=owner, name=data.get("name", ""), expires_days=data.get("expires_days")
        )
        # Kept on this request only, for the one page that shows it.
        request.new_token_key = key
        return token

    def save_model(self, request, obj, form, change):
        # Already saved by token_create in save_form.
        pass

    def save_related(self, request, form, formsets, change):
        pass

    def response_add(self, request, obj, post_url_continue=None):
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "API token created",
            "token": obj,
            "key": request.new_token_key,
        }
        return TemplateResponse(request, "admin/spaces/apitoken/created.html", context)

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request, queryset):
        for token in queryset:
            try:
                token_revoke(user=request.user, token=token)
            except ApplicationError as error:
                self.message_user(request, f"{token}: {error.detail}", messages.ERROR)
        self.message_user(request, "Revoked; the tokens no longer authenticate.")
