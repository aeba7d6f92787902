from django.db import migrations

import agentloom.fields


class Migration(migrations.Migration):
    dependencies = [
        ("models_app", "0007_local_servers"),
    ]

    operations = [
        migrations.AddField(
            model_name="modelconnection",
            name="previous_api_keys",
            field=agentloom.fields.EncryptedJSONField(blank=True, default=list),
        ),
    ]
