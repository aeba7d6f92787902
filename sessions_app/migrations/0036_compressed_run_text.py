"""Runs' questions, answers and pinned instructions, supplements and sessions' pinned text are
stored compressed from now on (`CompressedEncryptedTextField`).

The columns keep their type: only what new writes store changes, and every value written before
still reads (`encryption.decrypt` reads compressed and uncompressed tokens alike), so nothing is
rewritten and no table is rebuilt (SQLite would copy each table to alter a field's class).
"""

from django.db import migrations

import agentloom.fields


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0035_journal_terms_blocks"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="run",
                    name="answer",
                    field=agentloom.fields.CompressedEncryptedTextField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="run",
                    name="pinned",
                    field=agentloom.fields.CompressedEncryptedTextField(blank=True, default=""),
                ),
                migrations.AlterField(
                    model_name="run",
                    name="question",
                    field=agentloom.fields.CompressedEncryptedTextField(),
                ),
                migrations.AlterField(
                    model_name="runsupplement",
                    name="text",
                    field=agentloom.fields.CompressedEncryptedTextField(),
                ),
                migrations.AlterField(
                    model_name="session",
                    name="pinned",
                    field=agentloom.fields.CompressedEncryptedTextField(blank=True, default=""),
                ),
            ],
            database_operations=[],
        ),
    ]
