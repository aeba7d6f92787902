"""The admin keeps to the API's access rules: staff see and change only their own spaces.

`SpaceScopedAdmin` is the one place the rule lives; every admin of a space-owned model derives
from it. Each names the path from its model to the Space (`space_path`); lists, change pages,
autocomplete answers and every foreign-key choice are then filtered through the API's selectors
(`spaces_for_user`), and changing, adding or deleting needs the admin role in the object's space,
as the services require. Superusers, the platform's operators, see everything.

`ServiceWritesAdmin` is a scoped admin whose form checks and saves through a service, as the API
does. Django runs a change or delete page's POST in one transaction, so such a page calls the
`<action>_nested` form of a durable action (the same write as part of the caller's transaction);
an admin action runs outside any transaction and calls the durable action itself.
`ReadOnlyAdmin` shows records that nobody adds, changes or deletes here.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db.models import Model, QuerySet

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


class ServiceWritesAdmin(SpaceScopedAdmin):
    """A scoped admin whose form checks and saves through a service, so the page refuses what
    the API refuses, with the same messages.

    The form class gets the caller as `user`, for the service's checks. `save_form` is the
    service's write (the admin then logs and redirects to what it returned), so `save_model` and
    `save_related` have nothing left to do. The services check the caller's role: a superuser,
    who sees every row, adds and changes only in the spaces she administers.
    """

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
        return type(form.__name__, (form,), {"user": request.user})

    def save_model(self, request, obj, form, change):
        # Already saved by the service in save_form.
        pass

    def save_related(self, request, form, formsets, change):
        # No many-to-many fields or inlines; the form was never saved by ModelForm.save.
        pass
