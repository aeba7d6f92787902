"""Let model calls recorded with a copy of their journaled answer refer to the record instead."""

import time

from django.core.management.base import BaseCommand
from django.db import transaction

from sessions_app.models import ModelCall, SessionMessage
from sessions_app.selectors.runs import answer_reference


class Command(BaseCommand):
    help = (
        "Store each answered model call whose message the journal holds as a reference to that "
        "record (ModelCall.response_seq) instead of a copy. Batched (one short transaction per "
        "batch), idempotent and resumable: a converted row is never read again, and --after "
        "starts past the last id a stopped run printed. Calls whose answer was never journaled "
        "(failed, discarded, compaction) keep their response."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=500)
        parser.add_argument("--after", type=int, default=0, help="start after this call id")

    def handle(self, *args, **options):
        batch, after = max(1, options["batch"]), options["after"]
        started, seen, converted = time.perf_counter(), 0, 0
        while True:
            calls = list(
                ModelCall.objects.filter(
                    pk__gt=after,
                    response_seq__isnull=True,
                    response__isnull=False,
                    discarded=False,
                    error="",
                ).order_by("pk")[:batch]
            )
            if not calls:
                break
            converted += _convert(calls)
            seen += len(calls)
            after = calls[-1].pk
            self.stdout.write(f"up to call {after}: {converted} of {seen} referred to")
        elapsed = time.perf_counter() - started
        self.stdout.write(f"referred {converted} model call(s) of {seen} in {elapsed:.1f} s")


def _convert(calls: list[ModelCall]) -> int:
    """Refer each call to its run's next unreferenced assistant record that holds its answer."""
    runs = {call.run_id for call in calls}
    taken = set(
        ModelCall.objects.filter(run_id__in=runs, response_seq__isnull=False).values_list(
            "run_id", "response_seq"
        )
    )
    records: dict[tuple[int, str], list[SessionMessage]] = {}
    for row in (
        SessionMessage.objects.filter(run_id__in=runs, kind=SessionMessage.Kind.ASSISTANT)
        .only("run_id", "instance", "seq", "message")
        .order_by("seq")
    ):
        if (row.run_id, row.seq) not in taken:
            records.setdefault((row.run_id, row.instance), []).append(row)
    changed = []
    for call in calls:
        candidates = records.get((call.run_id, call.instance)) or []
        for index, row in enumerate(candidates):
            rest = answer_reference(call.response, row.message)
            if rest is not None:
                call.response_seq, call.response = row.seq, rest
                changed.append(call)
                del candidates[: index + 1]
                break
    with transaction.atomic():
        ModelCall.objects.bulk_update(changed, ["response_seq", "response"])
    return len(changed)
