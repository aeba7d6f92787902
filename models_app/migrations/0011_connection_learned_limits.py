from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("models_app", "0010_tool_servers"),
    ]

    operations = [
        migrations.AddField(
            model_name="modelconnection",
            name="learned_reasoning",
            field=models.CharField(blank=True, default="", max_length=16),
        ),
        migrations.AddField(
            model_name="modelconnection",
            name="learned_window",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="modelconnection",
            name="learned_window_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="modelconnection",
            name="learned_window_evidence",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.AddField(
            model_name="modelconnection",
            name="reasoning_passback",
            field=models.CharField(
                blank=True,
                choices=[
                    ("", "Learned (sent back once the server asks for it)"),
                    ("never", "Never"),
                    ("tool_spans", "Tool spans (DeepSeek's rule)"),
                ],
                default="",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="modelconnection",
            name="estimator",
            field=models.CharField(
                choices=[
                    ("bytes", "UTF-8 bytes (conservative)"),
                    ("o200k", "OpenAI o200k tokenizer"),
                    ("deepseek", "DeepSeek tokenizer"),
                    ("server", "The server's own tokenizer"),
                ],
                default="bytes",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="modelconnection",
            name="window_source",
            field=models.CharField(
                choices=[
                    ("provider", "Provider response"),
                    ("provider_loaded", "Loaded context length (server report)"),
                    ("provider_maximum", "Model maximum, not loaded (server report)"),
                    ("num_ctx", "num_ctx sent with every request"),
                    ("server_props", "Server's own properties (server report)"),
                    ("learned", "Learned from the server's refusal"),
                    ("official_manifest", "Official manifest"),
                    ("platform_default", "Platform default (32K fallback)"),
                    ("manual", "Manual"),
                ],
                default="platform_default",
                max_length=32,
            ),
        ),
    ]
