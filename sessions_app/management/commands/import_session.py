"""Import a session export into a space as a new session of the named user."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agentloom.errors import ApplicationError
from agentloom.spaces.models import Space
from context_app.models import AgentVersion
from sessions_app.services.imports import session_import


class Command(BaseCommand):
    help = (
        "Import a signed session export (from `manage.py export_session` or the API) into a "
        "space as a new session of --by, bound to --agent-version (or read only). A file this "
        "deployment did not sign, or altered, is refused whole with the line and the reason."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="The export (JSON Lines).")
        parser.add_argument("--by", required=True, metavar="USERNAME", help="The importer.")
        parser.add_argument("--space", type=int, required=True, help="The space's id.")
        parser.add_argument("--agent-version", type=int, help="A version of an agent of it.")

    def handle(self, *args, **options):
        user = get_user_model().objects.filter(username=options["by"], is_active=True).first()
        space = Space.objects.filter(pk=options["space"]).first()
        if user is None or space is None:
            raise CommandError("--by must name an active user and --space a space.")
        version = None
        if options["agent_version"] is not None:
            version = AgentVersion.objects.filter(pk=options["agent_version"]).first()
            if version is None:
                raise CommandError("--agent-version names no version.")
        try:
            with open(options["file"], "rb") as stream:
                session = session_import(
                    user=user, space=space, stream=stream, agent_version=version
                )
        except ApplicationError as error:
            raise CommandError(str(error.detail)) from None
        self.stdout.write(f"imported as session {session.pk}")
