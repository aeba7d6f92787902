"""Index journal records for search: records with no index row, and rows of a retired key."""

from django.core.management.base import BaseCommand, CommandError

from sessions_app.services.search_index import DEFAULT_BATCH_SIZE, index_journal


class Command(BaseCommand):
    help = (
        "Write the search index rows of journal records that no row covers (records journaled "
        "before the index existed), rebuild rows made under a field key that is no longer "
        "FIELD_ENCRYPTION_KEY, and merge rows of one record (written before blocks) into blocks, "
        "in batches that commit one by one: an interrupted run can simply be started again. "
        "rotate_encryption_key runs it at its end."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)

    def handle(self, *args, batch_size: int, **options):
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        report = index_journal(batch_size=batch_size)
        self.stdout.write(
            self.style.SUCCESS(
                f"search index: {report.indexed} record(s) indexed, {report.rebuilt} rebuilt, "
                f"{report.merged} merged into blocks"
            )
        )
