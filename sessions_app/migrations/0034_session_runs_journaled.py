"""`Session.runs_journaled`: sessions from before this migration are looked at once for runs
from before the journal existed (false); sessions opened from now on start true.

Adding a boolean column with a constant default rewrites no row on PostgreSQL 11 and later.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0033_run_status_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="runs_journaled",
            field=models.BooleanField(default=False),
        ),
        migrations.AlterField(
            model_name="session",
            name="runs_journaled",
            field=models.BooleanField(default=True),
        ),
    ]
