from django.db import migrations, models

# Room left free in each page of the run table (PostgreSQL), so that the new row version a save,
# the claim or a lease renewal writes fits beside the old one: a heap-only (HOT) update, pruned
# within the page without vacuum. It applies to pages as they are next filled; nothing is
# rewritten now. (Storing the checkpoint out of line instead, with `toast_tuple_target`, was
# measured worse: every checkpoint change then leaves a dead TOAST chunk as well.)
RUN_STORAGE = "fillfactor = 70"


def _run_storage(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE sessions_app_run SET ({RUN_STORAGE})")


def _default_storage(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE sessions_app_run RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0018_reference_ranges"),
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
        migrations.RunPython(_run_storage, _default_storage, elidable=True),
    ]
