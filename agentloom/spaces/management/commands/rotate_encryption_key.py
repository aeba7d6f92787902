"""Re-encrypt every encrypted column under FIELD_ENCRYPTION_KEY (after a key rotation)."""

from django.core.management.base import BaseCommand, CommandError

from agentloom.encryption import UnreadableValue
from agentloom.reencrypt import DEFAULT_BATCH_SIZE, keys_rotated, reencrypt_all


class Command(BaseCommand):
    help = (
        "Re-encrypt every value of every encrypted column that is not under FIELD_ENCRYPTION_KEY "
        "(values under a fallback key, and legacy values), in batches that commit one by one. "
        "Values already under the current key are skipped, so an interrupted run can simply be "
        "started again. Then what derives from the keys is rebuilt (the journal's search index)."
    )
    legacy_only = False

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)

    def handle(self, *args, batch_size: int, **options):
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        try:
            reports = reencrypt_all(batch_size=batch_size, legacy_only=self.legacy_only)
        except UnreadableValue as error:
            raise CommandError(
                f"a stored value cannot be read ({error}); add the key that wrote it to "
                "FIELD_ENCRYPTION_KEY_FALLBACKS (or SECRET_KEY_FALLBACKS for legacy values) "
                "and run again: the rows done so far are kept"
            ) from None
        for report in reports:
            line = f"{report.label}: {report.scanned} scanned, {report.rewritten} rewritten"
            if report.changed_meanwhile:
                line += f", {report.changed_meanwhile} saved meanwhile by the application"
            self.stdout.write(line)
        total = sum(report.rewritten for report in reports)
        self.stdout.write(self.style.SUCCESS(f"rewrote {total} value(s)"))
        if not self.legacy_only:
            for _receiver, line in keys_rotated.send(sender=self.__class__, batch_size=batch_size):
                self.stdout.write(line)
