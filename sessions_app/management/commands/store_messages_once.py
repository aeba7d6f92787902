"""Store once the large inline messages of snapshots and views saved before (`StoredMessage`)."""

import time

from django.core.management.base import BaseCommand

from sessions_app.models import CompactionSnapshot, SessionView
from sessions_app.services.stored_messages import stored_messages_batch


class Command(BaseCommand):
    help = (
        "Store the large inline messages (handoff summaries) of compaction snapshots and "
        "reusable views saved before messages were stored once, each row then naming them by a "
        "marker. Batched (one short transaction per batch, locking only the rows it rewrites), "
        "idempotent and resumable: snapshots first, then views; --after-snapshot and "
        "--after-view start past the last ids a stopped run printed."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=200)
        parser.add_argument("--after-snapshot", type=int, default=0)
        parser.add_argument("--after-view", type=int, default=0)
        parser.add_argument("--max-batches", type=int, default=None)

    def handle(self, *args, **options):
        batch = max(1, options["batch_size"])
        started, batches, rewritten = time.perf_counter(), 0, 0
        for model, name in ((CompactionSnapshot, "snapshot"), (SessionView, "view")):
            after = options[f"after_{name}"]
            while options["max_batches"] is None or batches < options["max_batches"]:
                last, done = stored_messages_batch(model, after=after, limit=batch)
                if not last:
                    break
                batches, rewritten, after = batches + 1, rewritten + done, last
                self.stdout.write(f"up to {name} {after}: {rewritten} row(s) rewritten")
        elapsed = time.perf_counter() - started
        self.stdout.write(f"stored the messages of {rewritten} row(s) once in {elapsed:.1f} s")
