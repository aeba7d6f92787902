from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0016_live_deltas"),
    ]

    operations = [
        migrations.AddField(
            model_name="modelcall",
            name="refusal",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="modelcall",
            name="counts",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
