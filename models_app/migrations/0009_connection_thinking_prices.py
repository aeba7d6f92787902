from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("models_app", "0008_connection_previous_keys"),
    ]

    operations = [
        migrations.AddField(
            model_name="modelconnection",
            name="thinking",
            field=models.CharField(
                blank=True,
                choices=[
                    ("", "Provider default"),
                    ("enabled", "Enabled"),
                    ("disabled", "Disabled"),
                ],
                default="",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="modelconnection",
            name="reasoning_effort",
            field=models.CharField(
                blank=True,
                choices=[
                    ("", "Provider default"),
                    ("low", "Low"),
                    ("high", "High"),
                    ("max", "Max"),
                ],
                default="",
                max_length=8,
            ),
        ),
        migrations.AddField(
            model_name="modelconnection",
            name="prices",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
