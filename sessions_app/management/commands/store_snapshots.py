"""Move the compaction snapshots old checkpoints embed into their stored rows."""

import time

from django.core.management.base import BaseCommand

from sessions_app.services.checkpoints import snapshots_store_batch


class Command(BaseCommand):
    help = (
        "Store the compaction snapshots that checkpoints saved before CompactionSnapshot embed "
        "as their own rows, each checkpoint then pointing to them. Batched (one short "
        "transaction per run), idempotent and resumable: a converted run is left as it is, and "
        "--after starts past the last run id a stopped run printed. Active runs are left to "
        "their workers, whose next save does the same."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=200)
        parser.add_argument("--after", type=int, default=0, help="start after this run id")
        parser.add_argument("--max-batches", type=int, default=None)

    def handle(self, *args, **options):
        batch, after = max(1, options["batch_size"]), options["after"]
        started, batches, converted = time.perf_counter(), 0, 0
        while options["max_batches"] is None or batches < options["max_batches"]:
            last, done = snapshots_store_batch(after=after, limit=batch)
            if not last:
                break
            batches, converted, after = batches + 1, converted + done, last
            self.stdout.write(f"up to run {after}: {converted} run(s) converted")
        elapsed = time.perf_counter() - started
        self.stdout.write(f"stored the snapshots of {converted} run(s) in {elapsed:.1f} s")
