"""Remove deleted sessions for good: their runs, journal, views, supplements and model calls."""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from agentloom.errors import ApplicationError
from sessions_app.selectors.sessions import deleted_sessions
from sessions_app.services.deletion import session_purge


class Command(BaseCommand):
    help = (
        "Purge sessions hidden by a delete (API DELETE /api/v1/sessions/{id}/ or the admin): "
        "each goes with its runs, journal, views, supplements and model calls in one "
        "transaction; its audit row stays, marked purged. An operator's command: no web request "
        "removes journal records."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--by",
            required=True,
            metavar="USERNAME",
            help="The superuser who purges (recorded in each session's deletion record).",
        )
        parser.add_argument(
            "--older-than-days",
            type=int,
            default=0,
            help="Only sessions deleted at least this many days ago (default: all).",
        )
        parser.add_argument(
            "--session", type=int, action="append", default=[], help="Only this session (repeat)."
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="List what would be purged, remove nothing."
        )

    def handle(self, *args, **options):
        if options["older_than_days"] < 0:
            raise CommandError("--older-than-days must be 0 or more.")
        operator = get_user_model().objects.filter(username=options["by"]).first()
        if operator is None or not (operator.is_active and operator.is_superuser):
            raise CommandError("--by must name an active superuser.")
        before = timezone.now() - timedelta(days=options["older_than_days"])
        sessions = deleted_sessions(before=before)
        if options["session"]:
            sessions = sessions.filter(pk__in=options["session"])
        ids = list(sessions.values_list("pk", flat=True))
        if options["dry_run"]:
            self.stdout.write(f"would purge {len(ids)} session(s): {ids}")
            return
        purged = rows = 0
        for session_id in ids:
            try:
                removed = session_purge(user=operator, session_id=session_id)
            except ApplicationError as error:
                # Restored or purged meanwhile by someone else: nothing to do here.
                self.stderr.write(f"session {session_id}: {error.detail}")
                continue
            purged += 1
            rows += sum(removed.values())
            self.stdout.write(f"purged session {session_id}: {removed}")
        self.stdout.write(f"purged {purged} session(s), {rows} row(s)")
