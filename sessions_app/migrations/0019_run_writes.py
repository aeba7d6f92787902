from django.db import migrations, models

# The run table on PostgreSQL: its large encrypted columns (checkpoint, question, answer) are
# stored out of line as soon as a row passes 128 bytes (`toast_tuple_target`), so the row a
# save, a lease renewal or the claim rewrites stays a few hundred bytes and shares the
# unchanged values with its previous version; and each page keeps room free (`fillfactor`) for
# that new version beside the old one: a heap-only (HOT) update, pruned within the page without
# vacuum. Both apply to rows as they are next written; nothing is rewritten now.
RUN_STORAGE = "fillfactor = 70, toast_tuple_target = 128"


def _run_storage(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE sessions_app_run SET ({RUN_STORAGE})")


def _default_storage(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE sessions_app_run RESET (fillfactor, toast_tuple_target)")


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
        migrations.RunPython(_run_storage, _default_storage, elidable=True),
    ]
