"""Encrypted JSON columns that are compressed before they are encrypted.

Ciphertext does not compress, so a database cannot shrink an encrypted value the way PostgreSQL
compresses large plain values on its own. Journal messages, checkpoints and model responses are
JSON text that compresses two to four times; compressing it first keeps most rows small enough
to stay in their table page (no out-of-line storage) and halves what the journal costs on disk.

A stored value is the Fernet token of `COMPRESSED_MARK + zlib(pickle(value))`. Values written
before this field existed (a plain pickle inside the token) are still read: a pickle never starts
with the mark. Compression adds no key and no new way in: only a holder of the field key can
read or write a value.
"""

from __future__ import annotations

import pickle
import zlib
from typing import Any

from django.db import models
from django_cryptography.core.signing import SignatureExpired
from django_cryptography.fields import Expired, encrypt

__all__ = ["COMPRESSED_MARK", "CompressedEncryptedJSONField"]

# Pickles start with the PROTO opcode (0x80), so this prefix can never begin an old value.
COMPRESSED_MARK = b"z1:"
# Values smaller than this are stored without compression: zlib would add more than it saves.
MIN_COMPRESSED_BYTES = 128


class CompressedEncryptedJSONField(type(encrypt(models.JSONField()))):
    """An encrypted JSON field whose plaintext is zlib-compressed first."""

    def _dump(self, value: Any) -> bytes:
        data = pickle.dumps(value)
        if len(data) >= MIN_COMPRESSED_BYTES:
            data = COMPRESSED_MARK + zlib.compress(data, 6)
        return self._fernet.encrypt(data)

    def _load(self, value: bytes) -> Any:
        try:
            data = self._fernet.decrypt(value, self.ttl)
        except SignatureExpired:
            return Expired
        if data.startswith(COMPRESSED_MARK):
            data = zlib.decompress(data[len(COMPRESSED_MARK) :])
        return pickle.loads(data)  # noqa: S301 - written only by this field, under its key
