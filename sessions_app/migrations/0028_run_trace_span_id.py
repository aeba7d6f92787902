from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0027_run_questions"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="trace_span_id",
            field=models.CharField(blank=True, default="", max_length=16),
        ),
    ]
