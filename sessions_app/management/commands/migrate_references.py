"""Turn per-record journal references into ranges, written once (batched, resumable)."""

import time

from django.core.management.base import BaseCommand, CommandError

from sessions_app.services.reusable_views import references_migrate_batch


class Command(BaseCommand):
    help = (
        "Rewrite journal references written one per record as ranges of consecutive records, "
        "and drop a view's references that its run's snapshot keeps already. One short "
        "transaction per batch; idempotent, and resumes where an interrupted run stopped."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=5_000)
        parser.add_argument(
            "--max-batches", type=int, default=None, help="stop after this many batches"
        )

    def handle(self, *args, batch_size, max_batches, **options):
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        started = time.perf_counter()
        batches = converted = 0
        while max_batches is None or batches < max_batches:
            done = references_migrate_batch(batch_size)
            if not done:
                break
            batches += 1
            converted += done
        self.stdout.write(
            f"converted {converted} per-record reference(s) in {batches} batch(es), "
            f"{time.perf_counter() - started:.1f} s"
        )
