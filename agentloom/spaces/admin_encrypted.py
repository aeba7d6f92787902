"""Admin support for models with encrypted payloads.

Encrypted fields are shown decrypted to superusers only; other staff see that a value exists
without seeing it. JSON payloads (`json_fields`) are shown as a foldable, read-only tree, and
`link_fields` (methods of the admin) come first: links to the object's console pages. These rows
are the session journal and what hangs on it: nobody adds, edits or deletes them here (deleting
a session is a soft delete; purging is an operator's command).
"""

from agentloom.spaces.admin_json import json_tree
from agentloom.spaces.admin_scoping import ReadOnlyAdmin

HIDDEN = "[encrypted — visible to superusers only]"


class EncryptedPayloadAdmin(ReadOnlyAdmin):
    """A read-only admin whose `encrypted_fields` are hidden from staff who are not superusers."""

    encrypted_fields: tuple[str, ...] = ()
    json_fields: tuple[str, ...] = ()
    link_fields: tuple[str, ...] = ()

    class Media:
        css = {"all": ["admin_records/json_tree.css"]}

    def get_fields(self, request, obj=None):
        shown = list(self.link_fields)
        for name in (f.name for f in self.model._meta.fields if f.name != "id"):
            if name in self.encrypted_fields and not request.user.is_superuser:
                shown.append(f"{name}_hidden")
            elif name in self.json_fields:
                shown.append(f"{name}_tree")
            else:
                shown.append(name)
        return shown

    def get_readonly_fields(self, request, obj=None):
        return self.get_fields(request, obj)

    def __getattr__(self, name):
        # `<field>_hidden` renders the placeholder in place of an encrypted field.
        if name.endswith("_hidden") and name[: -len("_hidden")] in type(self).encrypted_fields:

            def placeholder(obj):
                return HIDDEN

            placeholder.short_description = name[: -len("_hidden")].replace("_", " ")
            return placeholder
        # `<field>_tree` renders a JSON field as a foldable tree.
        if name.endswith("_tree") and name[: -len("_tree")] in type(self).json_fields:
            field = name[: -len("_tree")]

            def tree(obj):
                value = getattr(obj, field)
                return "–" if value is None else json_tree(value)

            tree.short_description = field.replace("_", " ")
            return tree
        raise AttributeError(name)
