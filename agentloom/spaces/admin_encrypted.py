"""Admin support for models with encrypted payloads.

Encrypted fields are shown decrypted to superusers only; other staff see that a value exists
without seeing it. These rows are the session journal and what hangs on it: nobody adds, edits
or deletes them here (deleting a session is a soft delete; purging is an operator's command).
"""

from django.contrib import admin

HIDDEN = "[encrypted — visible to superusers only]"


class EncryptedPayloadAdmin(admin.ModelAdmin):
    """A read-only admin whose `encrypted_fields` are hidden from staff who are not superusers."""

    encrypted_fields: tuple[str, ...] = ()

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_fields(self, request, obj=None):
        fields = [f.name for f in self.model._meta.fields if f.name != "id"]
        if request.user.is_superuser:
            return fields
        return [f"{name}_hidden" if name in self.encrypted_fields else name for name in fields]

    def get_readonly_fields(self, request, obj=None):
        return self.get_fields(request, obj)

    def __getattr__(self, name):
        # `<field>_hidden` renders the placeholder in place of an encrypted field.
        if name.endswith("_hidden") and name[: -len("_hidden")] in type(self).encrypted_fields:

            def placeholder(obj):
                return HIDDEN

            placeholder.short_description = name[: -len("_hidden")].replace("_", " ")
            return placeholder
        raise AttributeError(name)
