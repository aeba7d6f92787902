"""Export any session as an operator: a superuser's command, recorded as every export is."""

import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agentloom.errors import ApplicationError
from sessions_app.services.export import EXPORT_FORMATS, session_export_by_operator


class Command(BaseCommand):
    help = (
        "Write a session's export (the signed JSON Lines file, or the main conversation as "
        "OpenAI chat messages) to a file or standard output. Session content is its creator's: "
        "this is the operator's path, and it writes an audit row naming the superuser."
    )

    def add_arguments(self, parser):
        parser.add_argument("session", type=int, help="The session's id.")
        parser.add_argument(
            "--by", required=True, metavar="USERNAME", help="The superuser who exports."
        )
        parser.add_argument("--output", choices=EXPORT_FORMATS, default="jsonl")
        parser.add_argument("--bodies", action="store_true", help="Add each model call's response.")
        parser.add_argument("--file", help="Write here instead of standard output.")

    def handle(self, *args, **options):
        operator = get_user_model().objects.filter(username=options["by"]).first()
        if operator is None:
            raise CommandError("--by must name an active superuser.")
        try:
            lines = session_export_by_operator(
                user=operator,
                session_id=options["session"],
                format=options["output"],
                bodies=options["bodies"],
            )
        except ApplicationError as error:
            raise CommandError(str(error.detail)) from None
        if options["file"]:
            with open(options["file"], "wb") as out:
                out.writelines(lines)
            self.stderr.write(f"exported session {options['session']} to {options['file']}")
            return
        stream = getattr(self.stdout, "_out", sys.stdout)
        buffer = getattr(stream, "buffer", None)
        for line in lines:
            if buffer is not None:
                buffer.write(line)
            else:
                stream.write(line.decode())
