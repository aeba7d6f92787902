"""The admin keeps to the API's access rules: staff see and change only their own spaces.

`SpaceScopedAdmin` is the one place the rule lives; every admin of a space-owned model derives
from it. Each names the path from its model to the Space (`space_path`); lists, change pages,
autocomplete answers and every foreign-key choice are then filtered through the API's selectors
(`spaces_for_user`), and changing, adding or deleting needs the admin role in the object's space,
as the services require. Superusers, the platform's operators, see everything.

`ServiceWritesAdmin` is a scoped admin whose form (a `ServiceForm`) checks and saves through a
service, as the API does. Django runs a change or delete page's POST in one transaction, so such a
page calls the `<action>_nested` form of a durable action (the same write as part of the caller's
transaction); an admin action runs outside any transaction and calls the durable action itself.
A service's refusal (`ApplicationError`) is shown on the form, on the field it names, whether the
form's check or the write itself raised it: never an error page.
`ReadOnlyAdmin` shows records that nobody adds, changes or deletes here.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db.models import Model, QuerySet

from agentloom.errors import ApplicationError
from agentloom.spaces.models import Membership, Space
from agentloom.spaces.selectors import administered_spaces, space_role, spaces_for_user


def colleagues(user):
    """Return the users who share a space with `user` (`user` included)."""
    return (
        get_user_model()
        .objects.filter(space_memberships__space__in=spaces_for_user(user))
        .distinct()
        .order_by("username")
    )


class ReadOnlyAdmin(admin.ModelAdmin):
    """An admin of records that nobody adds, changes or deletes here, superusers included."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class SpaceScopedAdmin(admin.ModelAdmin):
    """An admin whose rows, choices and writes stay inside the staff user's spaces."""

    # The lookup path from the model to its Space ("" for Space itself).
    space_path = "space"

    # --- what a staff user sees ----------------------------------------------------------------

    def scope(self, request, queryset: QuerySet) -> QuerySet:
        """Return the rows of `queryset` that the caller may see."""
        if request.user.is_superuser:
            return queryset
        lookup = f"{self.space_path}__in" if self.space_path else "pk__in"
        return queryset.filter(**{lookup: spaces_for_user(request.user)})

    def get_queryset(self, request):
        return self.scope(request, super().get_queryset(request))

    def get_list_filter(self, request):
        # A plain foreign-key filter lists every row of the other table (every space's name);
        # staff get one that lists only the rows their own list refers to.
        filters = super().get_list_filter(request)
        if request.user.is_superuser:
            return filters
        return [
            (name, admin.RelatedOnlyFieldListFilter)
            if isinstance(name, str) and "__" not in name and self._is_relation(name)
            else name
            for name in filters
        ]

    def _is_relation(self, name: str) -> bool:
        return self.model._meta.get_field(name).is_relation

    def space_of(self, obj: Model) -> int:
        """Return the id of the space `obj` belongs to."""
        if not self.space_path:
            return obj.pk
        *path, last = self.space_path.split("__")
        for name in path:
            obj = getattr(obj, name)
        return getattr(obj, f"{last}_id")

    def get_form(self, request, obj=None, change=False, **kwargs):
        # The form gets the caller as `user`, for the checks and choices that depend on her.
        form = super().get_form(request, obj, change=change, **kwargs)
        return type(form.__name__, (form,), {"user": request.user})

    # --- what a staff user may change ----------------------------------------------------------

    def may_edit(self, request, obj=None) -> bool:
        """True when the caller administers `obj`'s space (any space, for a new object)."""
        if request.user.is_superuser:
            return True
        if obj is None:
            return administered_spaces(request.user).exists()
        return space_role(request.user, self.space_of(obj)) == Membership.Role.ADMIN

    def has_add_permission(self, request, *args) -> bool:
        return super().has_add_permission(request, *args) and self.may_edit(request)

    def has_change_permission(self, request, obj=None) -> bool:
        return super().has_change_permission(request, obj) and self.may_edit(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return super().has_delete_permission(request, obj) and self.may_edit(request, obj)

    # --- what a staff user may choose ----------------------------------------------------------

    def choices_for(self, db_field, request) -> QuerySet | None:
        """Return the rows a foreign key of this admin may point to, or None for no limit.

        A space must be one the caller administers; a space-owned row, one the caller sees in its
        own admin; a user, someone who shares a space with the caller.
        """
        model = db_field.related_model
        if model is Space:
            return administered_spaces(request.user)
        if model is get_user_model():
            return colleagues(request.user)
        related = self.admin_site._registry.get(model)
        if isinstance(related, SpaceScopedAdmin):
            return related.get_queryset(request)
        return None

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if not request.user.is_superuser and "queryset" not in kwargs:
            choices = self.choices_for(db_field, request)
            if choices is not None:
                kwargs["queryset"] = choices
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class ServiceForm(forms.ModelForm):
    """A form whose input a service checks: `check` raises what the service's write would.

    Each `ApplicationError` is shown on the field it names (through `form_fields` where the form
    calls it otherwise), else above the form.
    """

    # The caller, and what the service refused when this page was last saved (ServiceWritesAdmin).
    user = None
    refusal: ApplicationError | None = None
    # The form's name of a service field it shows under another name.
    form_fields: dict[str, str] = {}

    def check(self, cleaned: dict[str, Any]) -> None:
        """Raise what the service's write of `cleaned` would raise; write nothing."""
        raise NotImplementedError

    def show_refusal(self, error: ApplicationError) -> None:
        field = self.form_fields.get(error.field or "", error.field)
        self.add_error(field if field in self.fields else None, error.detail)

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        try:
            self.check(cleaned)
        except ApplicationError as error:
            self.show_refusal(error)
            return cleaned
        if self.refusal is not None:
            self.show_refusal(self.refusal)
        return cleaned

    def _post_clean(self):
        # The service's rules are the only ones (a model's own validators may differ from them).
        pass


class _RefusedWrite(Exception):
    """A service refused the page's write; the page's transaction rolls back on the way out."""

    def __init__(self, error: ApplicationError):
        super().__init__(error.detail)
        self.error = error


class ServiceWritesAdmin(SpaceScopedAdmin):
    """A scoped admin whose form checks and saves through a service, so the page refuses what
    the API refuses, with the same messages.

    The form (a `ServiceForm`) gets the caller as `user` (SpaceScopedAdmin), for the service's
    checks. `service_save` is the service's write (the admin then logs and redirects to what it
    returned), so `save_model` and `save_related` have nothing left to do. A write refused after
    the form's check passed (a row added meanwhile) rolls the page back and shows the form again
    with the refusal on it. The services check the caller's role: a superuser, who sees every
    row, adds and changes only in the spaces she administers.
    """

    def service_save(self, request, form, change) -> Model:
        """Write the form's input through the service; return what it saved."""
        raise NotImplementedError

    def _is_space_admin(self, request, obj) -> bool:
        return obj is None or space_role(request.user, self.space_of(obj)) == Membership.Role.ADMIN

    def has_add_permission(self, request) -> bool:
        return super().has_add_permission(request) and administered_spaces(request.user).exists()

    def has_change_permission(self, request, obj=None) -> bool:
        return super().has_change_permission(request, obj) and self._is_space_admin(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return super().has_delete_permission(request, obj) and self._is_space_admin(request, obj)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        refusal = getattr(request, "service_refusal", None)
        return type(form.__name__, (form,), {"refusal": refusal})

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except _RefusedWrite as refused:
            # Nothing of the refused POST was kept; the same POST again shows the refusal.
            request.service_refusal = refused.error
            return super().changeform_view(request, object_id, form_url, extra_context)

    def save_form(self, request, form, change):
        try:
            return self.service_save(request, form, change)
        except ApplicationError as error:
            raise _RefusedWrite(error) from None

    def save_model(self, request, obj, form, change):
        # Already saved by the service in save_form.
        pass

    def save_related(self, request, form, formsets, change):
        # No many-to-many fields or inlines; the form was never saved by ModelForm.save.
        pass
