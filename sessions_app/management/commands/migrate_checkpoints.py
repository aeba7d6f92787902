"""Rewrite self-contained (format 1) checkpoints by reference (format 2)."""

from django.core.management.base import BaseCommand

from sessions_app.models import Run
from sessions_app.services.checkpoints import migrate_checkpoint


class Command(BaseCommand):
    help = (
        "Rewrite format-1 checkpoints of finished runs by reference to the journal (idempotent; "
        "a resumed run is rewritten at its first save anyway)."
    )

    def handle(self, *args, **options):
        runs = Run.objects.exclude(status__in=Run.ACTIVE_STATUSES).only("pk").order_by("pk")
        migrated = sum(migrate_checkpoint(run) for run in runs.iterator())
        self.stdout.write(f"migrated {migrated} checkpoint(s)")
