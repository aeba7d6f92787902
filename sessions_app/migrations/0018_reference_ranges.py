"""Journal references as ranges: `JournalReference.last`, the last record of a row's range.

A nullable column on a table that may be large: on PostgreSQL its foreign key is added NOT VALID
and validated afterwards (validation locks out no reader or writer) and its index is built
concurrently, so no statement holds a lock that blocks writes for longer than a catalog update.
Existing rows keep `last` null (one record each) until `manage.py migrate_references`.
"""

import django.db.models.deletion
from django.db import migrations, models

TABLE = "sessions_app_journalreference"
POSTGRES = (
    f"ALTER TABLE {TABLE} ADD COLUMN last_id bigint NULL",
    f"ALTER TABLE {TABLE} ADD CONSTRAINT {TABLE}_last_id_fk FOREIGN KEY (last_id) "
    "REFERENCES sessions_app_sessionmessage (id) DEFERRABLE INITIALLY DEFERRED NOT VALID",
    f"ALTER TABLE {TABLE} VALIDATE CONSTRAINT {TABLE}_last_id_fk",
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {TABLE}_last_id ON {TABLE} (last_id)",
)
POSTGRES_BACK = (f"ALTER TABLE {TABLE} DROP COLUMN IF EXISTS last_id",)


class AddFieldWithoutLongLocks(migrations.AddField):
    """`AddField`, on PostgreSQL as the statements above instead of one locking ALTER TABLE."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        for statement in POSTGRES:
            schema_editor.execute(statement)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        for statement in POSTGRES_BACK:
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ("sessions_app", "0017_model_call_counts"),
    ]

    operations = [
        AddFieldWithoutLongLocks(
            model_name="journalreference",
            name="last",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.RESTRICT,
                related_name="range_ends",
                to="sessions_app.sessionmessage",
            ),
        ),
    ]
