"""Encrypted model fields: text and JSON stored as Fernet tokens of their JSON form, in binary.

The stored forms (a binary token after its mark, an empty value's mark, and the base64 tokens
and legacy values written before), the keys and how legacy values are read are in
`agentloom.encryption`. A column holds bytes (BinaryField storage), can only be tested with
`isnull`, and decrypts on every read, so selectors defer these columns when listing.

Ciphertext does not compress, so a database cannot shrink an encrypted value the way PostgreSQL
compresses large plain values on its own. Journal messages, checkpoints and model responses are
JSON text that compresses two to four times; `CompressedEncryptedJSONField` compresses it before
encrypting, which keeps most rows small enough to stay in their table page and halves what the
journal costs on disk. A run's question and answer and the pinned instructions are prose that the
journal already holds compressed; `CompressedEncryptedTextField` stores them the same way, which
keeps the run row (rewritten at every step, on pages kept partly free for that) small. Secrets
(API keys, tokens) are short and never compressed. Compression adds no key and no new way in: a
value's stored length tells no more than its journal record's already does.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from agentloom import encryption
from agentloom.encryption import COMPRESSED_MARK

__all__ = [
    "COMPRESSED_MARK",
    "CompressedEncryptedJSONField",
    "CompressedEncryptedTextField",
    "EncryptedField",
    "EncryptedJSONField",
    "EncryptedTextField",
    "encrypted_fields",
]


class EncryptedField(models.Field):
    """Mixin: the base field's value, encrypted by `agentloom.encryption` into a binary column."""

    compress = False
    supported_lookups = ("isnull",)

    def get_internal_type(self) -> str:
        return "BinaryField"

    def get_db_prep_value(self, value: Any, connection, prepared: bool = False) -> Any:
        value = models.Field.get_db_prep_value(self, value, connection, prepared)
        if value is None:
            return None
        return connection.Database.Binary(encryption.encrypt(value, compress=self.compress))

    get_db_prep_save = models.Field.get_db_prep_save

    def from_db_value(self, value: Any, expression, connection) -> Any:
        if value is None:
            return None
        return encryption.decrypt(bytes(value))

    def get_lookup(self, lookup_name: str):
        if lookup_name not in self.supported_lookups:
            return None
        return super().get_lookup(lookup_name)

    def get_transform(self, lookup_name: str):
        if lookup_name not in self.supported_lookups:
            return None
        return super().get_transform(lookup_name)


class EncryptedTextField(EncryptedField, models.TextField):
    """Encrypted text (titles, provider API keys, tokens)."""


class CompressedEncryptedTextField(EncryptedField, models.TextField):
    """Encrypted text whose JSON is zlib-compressed first when long enough to gain from it
    (questions, answers, supplements, pinned instructions)."""

    compress = True


class EncryptedJSONField(EncryptedField, models.JSONField):
    """Encrypted JSON, not compressed."""


class CompressedEncryptedJSONField(EncryptedField, models.JSONField):
    """Encrypted JSON whose text is zlib-compressed first when that makes it smaller."""

    compress = True


def encrypted_fields() -> list[tuple[type[models.Model], EncryptedField]]:
    """Return every (model, field) whose column is encrypted, in a stable order."""
    from django.apps import apps

    found = []
    for model in apps.get_models():
        for field in model._meta.concrete_fields:
            if isinstance(field, EncryptedField):
                found.append((model, field))
    return sorted(found, key=lambda pair: (pair[0]._meta.label, pair[1].name))
