"""Session titles and the deletion audit's copy of them are encrypted, like the questions."""

from django.db import migrations

import agentloom.fields

# (model, clear column, encrypted column)
TITLES = (
    ("Session", "title", "title_sealed"),
    ("SessionDeletion", "session_title", "session_title_sealed"),
)
BATCH = 500


def _copy(apps, schema_editor, *, source: int, target: int, limit: int | None = None):
    db = schema_editor.connection.alias
    for names in TITLES:
        model = apps.get_model("sessions_app", names[0])
        read, write = names[source], names[target]
        batch = []
        for row in model.objects.using(db).only("pk", read).order_by("pk").iterator(BATCH):
            setattr(row, write, (getattr(row, read) or "")[:limit])
            batch.append(row)
            if len(batch) == BATCH:
                model.objects.using(db).bulk_update(batch, [write])
                batch = []
        if batch:
            model.objects.using(db).bulk_update(batch, [write])


def encrypt_titles(apps, schema_editor):
    _copy(apps, schema_editor, source=1, target=2)


def decrypt_titles(apps, schema_editor):
    _copy(apps, schema_editor, source=2, target=1, limit=200)


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0009_session_soft_delete"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="title_sealed",
            field=agentloom.fields.EncryptedTextField(blank=True, default=""),
        ),
        migrations.AddField(
            model_name="sessiondeletion",
            name="session_title_sealed",
            field=agentloom.fields.EncryptedTextField(blank=True, default=""),
        ),
        migrations.RunPython(encrypt_titles, decrypt_titles, elidable=False),
        migrations.RemoveField(model_name="session", name="title"),
        migrations.RemoveField(model_name="sessiondeletion", name="session_title"),
        migrations.RenameField(model_name="session", old_name="title_sealed", new_name="title"),
        migrations.RenameField(
            model_name="sessiondeletion", old_name="session_title_sealed", new_name="session_title"
        ),
    ]
