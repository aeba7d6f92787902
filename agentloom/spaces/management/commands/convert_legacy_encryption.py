"""Rewrite values stored by django-cryptography (pickled, signed with SECRET_KEY) as JSON."""

from agentloom.spaces.management.commands.rotate_encryption_key import Command as RotateCommand


class Command(RotateCommand):
    help = (
        "One-time conversion: rewrite every value written by django-cryptography (pickled and "
        "signed with SECRET_KEY) as a Fernet token of its JSON under FIELD_ENCRYPTION_KEY. "
        "Reads the old values with SECRET_KEY or SECRET_KEY_FALLBACKS through an unpickler that "
        "admits only JSON-like types. Resumable: converted rows are skipped."
    )
    legacy_only = True
