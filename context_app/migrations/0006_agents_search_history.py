"""New agents start with `search_history`; every draft gets it too (its admin may remove it).

Published versions keep their frozen tools: only drafts change, so the next version offers it.
"""

from django.db import migrations, models

import context_app.models

SEARCH_HISTORY = "search_history"


def _add(apps, schema_editor):
    Agent = apps.get_model("context_app", "Agent")
    for agent in Agent.objects.only("pk", "tools").iterator():
        tools = list(agent.tools or [])
        if SEARCH_HISTORY not in tools:
            Agent.objects.filter(pk=agent.pk).update(tools=[*tools, SEARCH_HISTORY])


class Migration(migrations.Migration):
    dependencies = [
        ("context_app", "0005_agent_approval"),
    ]

    operations = [
        migrations.AlterField(
            model_name="agent",
            name="tools",
            field=models.JSONField(blank=True, default=context_app.models.default_agent_tools),
        ),
        migrations.RunPython(_add, migrations.RunPython.noop),
    ]
