"""The journal's keyed search index (`JournalTerms`), with a GIN index on PostgreSQL.

A new table, so nothing is locked for long; existing records are indexed afterwards by
`manage.py index_journal` (batched, resumable), not by this migration.
"""

import django.db.models.deletion
from django.db import migrations, models

import sessions_app.models


def _gin(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "CREATE INDEX journal_terms_gin ON sessions_app_journalterms USING gin (digests)"
        )


def _drop_gin(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS journal_terms_gin")


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0025_pinned_instructions"),
    ]

    operations = [
        migrations.CreateModel(
            name="JournalTerms",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "session",
                        "seq",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("seq", models.PositiveBigIntegerField()),
                ("run_number", models.PositiveIntegerField()),
                ("main", models.BooleanField()),
                ("kind", models.CharField(max_length=16)),
                ("key_id", models.IntegerField()),
                ("digests", sessions_app.models.TermDigestsField()),
                (
                    "session",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="sessions_app.session",
                    ),
                ),
            ],
        ),
        migrations.RunPython(_gin, _drop_gin),
    ]
