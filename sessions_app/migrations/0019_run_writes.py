from django.db import migrations, models

# Room left free in each page of the run table (PostgreSQL), so that a save's new row version
# fits beside the old one: a heap-only (HOT) update, pruned within the page without vacuum.
RUN_FILLFACTOR = 70


def _run_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE sessions_app_run SET (fillfactor = {RUN_FILLFACTOR})")


def _default_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE sessions_app_run RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0017_model_call_counts"),
    ]

    operations = [
        # Existing rows get null (their queue is read as before); new rows start at 0.
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.AddField(
                    model_name="run",
                    name="supplements_added",
                    field=models.PositiveIntegerField(blank=True, null=True),
                ),
            ],
            state_operations=[
                migrations.AddField(
                    model_name="run",
                    name="supplements_added",
                    field=models.PositiveIntegerField(blank=True, default=0, null=True),
                ),
            ],
        ),
        migrations.AddField(
            model_name="modelcall",
            name="response_seq",
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(_run_fillfactor, _default_fillfactor, elidable=True),
    ]
