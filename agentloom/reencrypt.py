"""Rewrite encrypted columns under the current key: key rotation and the legacy conversion.

Rules:

- Every encrypted column of every model is visited (`agentloom.fields.encrypted_fields`), row by
  row in primary-key order, in batches that each commit on their own, so an interrupted run
  keeps what it did.
- A value already under the primary key is skipped after checking its MAC (no decryption), so
  running again after an interruption only rewrites what is left: the work is idempotent.
- A rewrite is a compare-and-set on the stored bytes: a row that a worker saved meanwhile (under
  the primary key, since writes always use it) is left as the worker wrote it.
- With `legacy_only`, only django-cryptography values are rewritten (the one-time conversion);
  otherwise every value not under the primary key is (rotation; it converts legacy ones too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection, transaction
from django.dispatch import Signal

from agentloom import encryption
from agentloom.fields import EncryptedField, encrypted_fields

DEFAULT_BATCH_SIZE = 200

# Sent by `rotate_encryption_key` once every column is under the current key, with `batch_size`:
# what is derived from the field keys elsewhere (the journal's search index) is rebuilt by its
# receivers, each returning a line for the command's report.
keys_rotated = Signal()


@dataclass
class ColumnReport:
    """What one pass did to one column."""

    label: str
    scanned: int = 0
    rewritten: int = 0
    changed_meanwhile: int = 0


def reencrypt_all(
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    legacy_only: bool = False,
    on_batch: Callable[[ColumnReport], None] | None = None,
) -> list[ColumnReport]:
    """Rewrite every encrypted value that needs it; return one report per column."""
    return [
        reencrypt_column(
            model, field, batch_size=batch_size, legacy_only=legacy_only, on_batch=on_batch
        )
        for model, field in encrypted_fields()
    ]


def reencrypt_column(
    model,
    field: EncryptedField,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    legacy_only: bool = False,
    on_batch: Callable[[ColumnReport], None] | None = None,
) -> ColumnReport:
    """Rewrite one column's values that are legacy (or, unless `legacy_only`, not current)."""
    quote = connection.ops.quote_name
    table, column = quote(model._meta.db_table), quote(field.column)
    pk = quote(model._meta.pk.column)
    select = (
        f"SELECT {pk}, {column} FROM {table} "  # noqa: S608 - names come from model metadata
        f"WHERE {pk} > %s AND {column} IS NOT NULL ORDER BY {pk} LIMIT %s"
    )
    update = f"UPDATE {table} SET {column} = %s WHERE {pk} = %s AND {column} = %s"  # noqa: S608
    report = ColumnReport(f"{model._meta.label}.{field.name}")
    after = 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(select, [after, batch_size])
            rows = cursor.fetchall()
            for row_pk, stored in rows:
                stored = bytes(stored)
                report.scanned += 1
                if not _needs_rewrite(stored, legacy_only=legacy_only):
                    continue
                fresh = encryption.reencrypt(stored, compress=field.compress)
                binary = connection.Database.Binary
                cursor.execute(update, [binary(fresh), row_pk, binary(stored)])
                if cursor.rowcount == 1:
                    report.rewritten += 1
                else:
                    report.changed_meanwhile += 1
        if not rows:
            return report
        after = rows[-1][0]
        if on_batch is not None:
            on_batch(report)


def _needs_rewrite(stored: bytes, *, legacy_only: bool) -> bool:
    if encryption.is_legacy(stored):
        return True
    return not legacy_only and not encryption.is_current(stored)
