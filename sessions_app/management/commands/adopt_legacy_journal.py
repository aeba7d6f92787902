"""Journal what survives of runs recorded before the session journal existed."""

from django.core.management.base import BaseCommand

from sessions_app.services.legacy import adopt_legacy_runs


class Command(BaseCommand):
    help = "Adopt legacy checkpoints and journal-less runs into the session journal (idempotent)."

    def handle(self, *args, **options):
        added = adopt_legacy_runs()
        self.stdout.write(f"adopted {added} record(s)")
