import django.db.models.deletion
from django.db import migrations, models

import agentloom.fields


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0019_run_writes"),
    ]

    operations = [
        migrations.CreateModel(
            name="ProjectionPoint",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("binding_key", models.CharField(max_length=64)),
                ("watermark", models.PositiveBigIntegerField()),
                ("state", agentloom.fields.CompressedEncryptedJSONField()),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "session",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="projection_points",
                        to="sessions_app.session",
                    ),
                ),
                (
                    "view",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="projection_points",
                        to="sessions_app.sessionview",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        fields=["session", "binding_key", "watermark"],
                        name="point_binding_watermark",
                    )
                ],
            },
        ),
    ]
