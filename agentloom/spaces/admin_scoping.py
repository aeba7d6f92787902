"""The admin keeps to the API's access rules: staff see and change only their own spaces.

`SpaceScopedAdmin` is the one place the rule lives; every admin of a space-owned model derives
from it. Each names the path from its model to the Space (`space_path`); lists, change pages,
autocomplete answers and every foreign-key choice are then filtered through the API's selectors
(`spaces_for_user`), and changing, adding or deleting needs the admin role in the object's space,
as the services require. Superusers, the platform's operators, see everything.
`ReadOnlyAdmin` shows records that nobody adds, changes or deletes here.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.options import csrf_protect_m
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


class DurableWritesAdmin(admin.ModelAdmin):
    """An admin whose saves and deletes are the app's durable actions.

    Django wraps a change or delete page's POST in one transaction; a durable service (one
    outermost transaction, see `connection_create` or `session_delete`) refuses to run inside it.
    Here the service's own transaction is the write, and the admin's log entry follows it.
    """

    @csrf_protect_m
    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        return self._changeform_view(request, object_id, form_url, extra_context)

    @csrf_protect_m
    def delete_view(self, request, object_id, extra_context=None):
        return self._delete_view(request, object_id, extra_context)
