"""The runs' (status, session) index: a new question's checks and the lease sweep find their
runs by status instead of reading every run row of the session.

On PostgreSQL it is built concurrently, so a large run table takes no lock that blocks writes
while it builds; elsewhere it is an ordinary index.
"""

from django.db import migrations, models

INDEX = models.Index(fields=["status", "session"], name="run_status_session")


class AddIndexWithoutLongLocks(migrations.AddIndex):
    """`AddIndex`, on PostgreSQL built with CREATE INDEX CONCURRENTLY."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = to_state.apps.get_model(app_label, self.model_name)
        schema_editor.add_index(model, self.index, concurrently=True)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        model = from_state.apps.get_model(app_label, self.model_name)
        schema_editor.remove_index(model, self.index, concurrently=True)


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ("sessions_app", "0032_view_revoked_index"),
    ]

    operations = [AddIndexWithoutLongLocks(model_name="run", index=INDEX)]
