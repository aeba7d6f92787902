from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0012_view_derivation"),
    ]

    operations = [
        migrations.AddField(
            model_name="modelcall",
            name="price_source",
            field=models.CharField(blank=True, default="", max_length=16),
        ),
        migrations.AddField(
            model_name="modelcall",
            name="price_band",
            field=models.CharField(blank=True, default="", max_length=16),
        ),
    ]
