"""`JournalTerms.last_seq`: an index row may stand for a block of records (NULL: one record).

Adding a nullable column rewrites no row on PostgreSQL; on SQLite it is an `ALTER TABLE … ADD
COLUMN`. Rows from before stand for one record each and are still read; `manage.py
index_journal` merges them into blocks (and rewrites SQLite's hex text as blobs), in batches.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0034_session_runs_journaled"),
    ]

    operations = [
        migrations.AddField(
            model_name="journalterms",
            name="last_seq",
            field=models.PositiveBigIntegerField(null=True),
        ),
        migrations.AlterField(
            model_name="journalterms",
            name="kind",
            field=models.CharField(blank=True, max_length=16),
        ),
    ]
