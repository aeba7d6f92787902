"""Create an API token for a user and print its key, the only time it is shown."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agentloom.errors import ApplicationError
from agentloom.spaces.services.tokens import MAX_EXPIRY_DAYS, token_create


class Command(BaseCommand):
    help = (
        "Create an API token for USERNAME and print its key once (only its digest is stored). "
        "Clients send it as `Authorization: Token <key>`."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument(
            "--expires-days",
            type=int,
            default=None,
            help=f"Days until the token stops working (1–{MAX_EXPIRY_DAYS}; default: never).",
        )
        parser.add_argument("--name", default="", help="A label to tell tokens apart.")

    def handle(self, *args, **options):
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No user named {options['username']!r}.")
        try:
            token, key = token_create(
                user=user, name=options["name"], expires_days=options["expires_days"]
            )
        except ApplicationError as error:
            raise CommandError(f"--expires-days: {error.detail}") from None
        expiry = (
            f"expires {token.expires_at:%Y-%m-%d %H:%M} UTC" if token.expires_at else "no expiry"
        )
        self.stdout.write(f"{key}\n")
        self.stderr.write(
            f"Token {token.prefix}… for {user.get_username()} ({expiry}). "
            "Keep the key: it cannot be shown again."
        )
