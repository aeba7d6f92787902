"""Spaces, memberships, API tokens, users and groups in the admin.

Spaces, memberships and tokens are scoped like the API (admin_scoping.py). Memberships are
changed only by an admin of their space, so nobody can make herself a member, let alone an admin,
of a space she does not administer; a member is named by exact username, as the API's members
endpoint takes it, so adding one never lists the platform's users.

Users, groups and permissions belong to the platform, not to a space: only superusers see or
change them here, whatever permissions a staff user holds, so nobody can give himself
`is_staff`, `is_superuser` or a permission he was not granted.
"""

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.template.response import TemplateResponse

from agentloom.errors import ApplicationError
from agentloom.spaces.admin_scoping import SpaceScopedAdmin
from agentloom.spaces.models import ApiToken, Membership, Space
from agentloom.spaces.selectors import require_space_admin, space_role
from agentloom.spaces.services.retention import retention_set_nested
from agentloom.spaces.services.tokens import MAX_EXPIRY_DAYS, token_create_nested, token_revoke


def _administers(request, space) -> bool:
    return request.user.is_superuser or (
        space is not None and space_role(request.user, space.pk) == Membership.Role.ADMIN
    )


class UsernameField(forms.ModelChoiceField):
    """A user named by exact username: the form never offers a list of users to choose from."""

    widget = forms.TextInput
    default_error_messages = {"invalid_choice": "No user has this username."}

    def __init__(self, **kwargs):
        super().__init__(get_user_model().objects.all(), to_field_name="username", **kwargs)

    def prepare_value(self, value):
        # The stored value is the user's id; the page shows the username instead.
        if isinstance(value, int):
            value = self.queryset.filter(pk=value).values_list("username", flat=True).first()
        return super().prepare_value(value)


def _member_field(db_field, formfield):
    """Return the username field in place of the admin's `user` choice, else `formfield`."""
    if db_field.name == "user":
        return UsernameField(label=db_field.verbose_name.capitalize())
    return formfield


class MembershipInline(admin.TabularInline):
    """The members of a space, on its page: edited by the space's admins only."""

    model = Membership
    extra = 0

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        return _member_field(db_field, field)

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
    # The retention rule is set here; who set it and when are recorded, never typed.
    readonly_fields = ["retention_set_by", "retention_set_at"]

    def has_add_permission(self, request) -> bool:
        # Anyone allowed to add spaces may start one; its creator becomes its admin.
        return admin.ModelAdmin.has_add_permission(self, request)

    def get_inlines(self, request, obj):
        # Members are added once the space exists (its creator is its first admin).
        return self.inlines if obj is not None else []

    def get_readonly_fields(self, request, obj=None):
        # Only an admin of the space sets its rule (a superuser too must be one): the beat
        # deletes in the name of whoever set it, as a space admin.
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and space_role(request.user, obj.pk) != Membership.Role.ADMIN:
            fields.append("retention_days")
        return fields

    def save_model(self, request, obj, form, change):
        days = obj.retention_days
        if "retention_days" in form.changed_data:
            # Set below by the rule's service, once the space's creator is its admin.
            obj.retention_days = form.initial.get("retention_days", 0)
        super().save_model(request, obj, form, change)
        if not change:
            Membership.objects.get_or_create(
                space=obj, user=request.user, defaults={"role": Membership.Role.ADMIN}
            )
        if "retention_days" in form.changed_data:
            try:
                retention_set_nested(user=request.user, space=obj, days=days)
            except ApplicationError as error:
                self.message_user(request, f"Retention rule: {error.detail}", messages.ERROR)


@admin.register(Membership)
class MembershipAdmin(SpaceScopedAdmin):
    list_display = ["space", "user", "role", "created_at"]
    list_filter = ["role"]

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        # Any user may be added, by username; the space is one of those the caller admins.
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        return _member_field(db_field, field)

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
        token, key = token_create_nested(
            user=owner, name=data.get("name", ""), expires_days=data.get("expires_days")
        )
        # Kept on this request only, for the one page that shows it.
        request.new_token_key = key
        return token

    def save_model(self, request, obj, form, change):
        # Already saved by token_create_nested in save_form.
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


# --- the platform's users and groups: superusers only ------------------------------------------


class SuperusersOnlyAdmin(admin.ModelAdmin):
    """An admin that only active superusers see or use, whatever permissions staff hold."""

    def _superuser(self, request) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_module_permission(self, request) -> bool:
        return self._superuser(request)

    def has_view_permission(self, request, obj=None) -> bool:
        return self._superuser(request)

    def has_add_permission(self, request) -> bool:
        return self._superuser(request)

    def has_change_permission(self, request, obj=None) -> bool:
        return self._superuser(request)

    def has_delete_permission(self, request, obj=None) -> bool:
        return self._superuser(request)


for _model in (get_user_model(), Group):
    if admin.site.is_registered(_model):
        admin.site.unregister(_model)


@admin.register(get_user_model())
class PlatformUserAdmin(SuperusersOnlyAdmin, UserAdmin):
    pass


@admin.register(Group)
class PlatformGroupAdmin(SuperusersOnlyAdmin, GroupAdmin):
    pass
