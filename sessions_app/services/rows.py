"""Inserting rows without a queryset: a run's saves write a few rows several times a step.

`insert_rows` stores model instances as `QuerySet.bulk_create` does — each value through its
field's `pre_save` and `get_db_prep_save` (encrypted, compressed, JSON, dates), in the batches
the database allows, insert-or-ignore when asked — but writes the INSERT itself instead of
compiling a query at every call, which costs several times the statement. It reads no ids back
(the rows' database ids stay unset, as with `bulk_create(ignore_conflicts=True)`); its callers
do not need them.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection
from django.db.models import AutoField, BigAutoField, Model, SmallAutoField
from django.db.models.constants import OnConflict

__all__ = ["insert_rows"]

_AUTO_FIELDS = (AutoField, BigAutoField, SmallAutoField)


def insert_rows(objs: Sequence[Model], *, ignore_conflicts: bool = False) -> None:
    """Insert `objs` (instances of one model, without database ids) as `bulk_create` would."""
    if not objs:
        return
    meta = type(objs[0])._meta
    fields = [
        field
        for field in meta.concrete_fields
        if not field.generated and not isinstance(field, _AUTO_FIELDS)
    ]
    ops = connection.ops
    on_conflict = OnConflict.IGNORE if ignore_conflicts else None
    head = (
        f"{ops.insert_statement(on_conflict=on_conflict)} {ops.quote_name(meta.db_table)} "
        f"({', '.join(ops.quote_name(field.column) for field in fields)}) VALUES "
    )
    tail = ops.on_conflict_suffix_sql(fields, on_conflict, None, None)
    size = max(ops.bulk_batch_size(fields, objs), 1)
    with connection.cursor() as cursor:
        for start in range(0, len(objs), size):
            rows, params = [], []
            for obj in objs[start : start + size]:
                obj._prepare_related_fields_for_save(operation_name="insert_rows")
                placeholders = []
                for field in fields:
                    value = field.get_db_prep_save(field.pre_save(obj, True), connection)
                    placeholders.append(
                        field.get_placeholder(value, None, connection)
                        if hasattr(field, "get_placeholder")
                        else "%s"
                    )
                    params.append(value)
                rows.append(f"({', '.join(placeholders)})")
            cursor.execute(f"{head}{', '.join(rows)} {tail}", params)
    for obj in objs:
        obj._state.adding = False
        obj._state.db = connection.alias
