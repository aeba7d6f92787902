"""Apply the spaces' retention rules now, or show what a rule would remove."""

from django.core.management.base import BaseCommand, CommandError

from agentloom.spaces.models import Space
from sessions_app.services.retention import retention_apply, retention_due


class Command(BaseCommand):
    help = (
        "Delete (soft, audited) the sessions each space's retention rule removes, as the beat "
        "does hourly. With --dry-run, only list them; with --space and --days, list what a rule "
        "of that many days would remove before it is set."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true")
        parser.add_argument("--space", type=int)
        parser.add_argument("--days", type=int)

    def handle(self, *args, **options):
        if options["days"] is not None:
            space = Space.objects.filter(pk=options["space"]).first()
            if space is None or options["days"] < 0:
                raise CommandError("--days needs --space naming a space, and 0 or more days.")
            ids = list(retention_due(space, days=options["days"]).values_list("pk", flat=True))
            self.stdout.write(f"space {space.pk}: would delete {len(ids)} session(s): {ids}")
            return
        done = retention_apply(dry_run=options["dry_run"])
        verb = "would delete" if options["dry_run"] else "deleted"
        for space_id, ids in done.items():
            self.stdout.write(f"space {space_id}: {verb} {len(ids)} session(s): {ids}")
