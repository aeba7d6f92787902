"""Compaction snapshots stored once (`CompactionSnapshot`), where checkpoints point to them.

A new table, and a nullable foreign key from `SessionView` to the snapshot it was saved from. On
PostgreSQL that key is added NOT VALID and validated afterwards (validation locks out no reader
or writer) and its index is built concurrently, so no statement holds a lock that blocks writes
for longer than a catalog update. Existing checkpoints keep their embedded snapshots (they still
read) until `manage.py store_snapshots` moves them here.
"""

import django.db.models.deletion
from django.db import migrations, models

import agentloom.fields

TABLE = "sessions_app_sessionview"
POSTGRES = (
    f"ALTER TABLE {TABLE} ADD COLUMN snapshot_id bigint NULL",
    f"ALTER TABLE {TABLE} ADD CONSTRAINT {TABLE}_snapshot_id_fk FOREIGN KEY (snapshot_id) "
    "REFERENCES sessions_app_compactionsnapshot (id) DEFERRABLE INITIALLY DEFERRED NOT VALID",
    f"ALTER TABLE {TABLE} VALIDATE CONSTRAINT {TABLE}_snapshot_id_fk",
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {TABLE}_snapshot_id ON {TABLE} (snapshot_id)",
)
POSTGRES_BACK = (f"ALTER TABLE {TABLE} DROP COLUMN IF EXISTS snapshot_id",)


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
        ("sessions_app", "0020_projection_points"),
    ]

    operations = [
        migrations.CreateModel(
            name="CompactionSnapshot",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("instance", models.CharField(default="main", max_length=32)),
                ("revision", models.PositiveIntegerField()),
                ("snapshot", agentloom.fields.CompressedEncryptedJSONField()),
                (
                    "run",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="snapshots",
                        to="sessions_app.run",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("run", "instance", "revision"), name="unique_snapshot_revision"
                    )
                ],
            },
        ),
        AddFieldWithoutLongLocks(
            model_name="sessionview",
            name="snapshot",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.RESTRICT,
                related_name="views",
                to="sessions_app.compactionsnapshot",
            ),
        ),
    ]
