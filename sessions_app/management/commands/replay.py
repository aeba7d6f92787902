"""Replay a session's history or a run's recordings (see sessions_app/services/replay.py)."""

from django.core.management.base import BaseCommand, CommandError

from sessions_app.models import Run, Session
from sessions_app.services.replay import describe_session_history, replay_run


class Command(BaseCommand):
    help = (
        "--session ID: print the history a new run of that session would receive. "
        "--run ID: re-drive the run from its stored model responses and tool results and diff "
        "the records and views against the journal and checkpoint (exit 1 on any difference)."
    )

    def add_arguments(self, parser):
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--session", type=int)
        target.add_argument("--run", type=int)

    def handle(self, *args, session=None, run=None, **options):
        if session is not None:
            found = Session.objects.select_related("agent_version").filter(pk=session).first()
            if found is None:
                raise CommandError(f"no session {session}")
            self.stdout.write(describe_session_history(found))
            return
        found = Run.objects.select_related("session__agent_version").filter(pk=run).first()
        if found is None:
            raise CommandError(f"no run {run}")
        report = replay_run(found)
        summary = (
            f"run {found.pk} (number {found.number}): {report.attempts} attempt(s), "
            f"{report.model_calls} stored model call(s) replayed"
        )
        if report.ok:
            self.stdout.write(f"{summary}: records and views match")
            return
        for difference in report.differences:
            self.stdout.write(difference)
        raise CommandError(f"{summary}: {len(report.differences)} difference(s)", returncode=1)
