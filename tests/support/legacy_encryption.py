"""Write values the way django-cryptography did, to test that they are still read and converted.

The format: 0x80, a 64-bit timestamp, a 16-byte IV and the AES-256-CBC ciphertext (PKCS7) of
`pickle.dumps(value)` — preceded by `z1:` and zlib-compressed for the compressed JSON column —
then an HMAC-SHA256 of all that keyed with SECRET_KEY. The AES key is PBKDF2-SHA256 of the field
key (salt `django-cryptography`, 30,000 iterations).
"""

from __future__ import annotations

import hmac
import os
import pickle
import struct
import time
import zlib
from functools import lru_cache

from cryptography.hazmat.primitives import hashes, padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC
from django.conf import settings


def legacy_token(
    value,
    *,
    secret_key: str | None = None,
    field_key: str | None = None,
    compress: bool = False,
    payload: bytes | None = None,
) -> bytes:
    """Return `value` (or the raw `payload`) in django-cryptography's stored format."""
    data = payload if payload is not None else pickle.dumps(value)
    if compress:
        data = b"z1:" + zlib.compress(data)
    key = _aes_key(field_key or settings.FIELD_ENCRYPTION_KEY)
    padder = padding.PKCS7(128).padder()
    padded = padder.update(data) + padder.finalize()
    iv = os.urandom(16)
    encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    body = struct.pack(">cQ", b"\x80", int(time.time())) + iv
    body += encryptor.update(padded) + encryptor.finalize()
    mac = hmac.new((secret_key or settings.SECRET_KEY).encode(), body, "sha256").digest()
    return body + mac


@lru_cache(maxsize=8)
def _aes_key(field_key: str) -> bytes:
    return PBKDF2HMAC(
        algorithm=hashes.SHA256(), length=32, salt=b"django-cryptography", iterations=30_000
    ).derive(field_key.encode())


def store_raw(model, pk: int, column: str, raw: bytes) -> None:
    """Overwrite one encrypted column of one row with `raw` bytes, below the ORM."""
    from django.db import connection

    table = connection.ops.quote_name(model._meta.db_table)
    name = connection.ops.quote_name(column)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {name} = %s WHERE id = %s", [raw, pk])


def read_raw(model, pk: int, column: str) -> bytes:
    """Return the stored bytes of one encrypted column of one row."""
    from django.db import connection

    table = connection.ops.quote_name(model._meta.db_table)
    name = connection.ops.quote_name(column)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {name} FROM {table} WHERE id = %s", [pk])
        return bytes(cursor.fetchone()[0])


def store_everything_as_legacy(*, secret_key: str | None = None) -> int:
    """Rewrite every encrypted value in the database in django-cryptography's format.

    Returns how many values were rewritten. Values are read through the current fields first,
    so what is stored afterwards is what the application held before the Fernet format.
    """
    from agentloom.fields import encrypted_fields

    count = 0
    for model, field in encrypted_fields():
        rows = model.objects.exclude(**{f"{field.name}__isnull": True}).values_list(
            "pk", field.name
        )
        for pk, value in list(rows):
            raw = legacy_token(value, secret_key=secret_key, compress=field.compress)
            store_raw(model, pk, field.column, raw)
            count += 1
    return count
