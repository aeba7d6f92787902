"""Prepare a local installation: an admin login (password printed once) and the demo space."""

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Create the local admin login (printed once) and the demo space, idempotently."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")
        parser.add_argument("--port", type=int, default=8000, help="the port the site is on")

    def handle(self, *args, username: str, port: int, **options):
        if not settings.DEBUG:
            raise CommandError("bootstrap_local is for local installations (DEBUG on) only")
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        if user is None:
            password = secrets.token_urlsafe(12)
            user = user_model.objects.create_superuser(username=username, password=password)
            self.stdout.write(
                self.style.SUCCESS(
                    "\nLocal admin login created (shown this once):\n"
                    f"    user:     {username}\n    password: {password}\n"
                    f"Open http://127.0.0.1:{port}/ and log in.\n"
                )
            )
        else:
            self.stdout.write(
                f"Local admin login {username!r} exists. Forgot its password? "
                f"python manage.py changepassword {username}"
            )
        from sessions_app.demo import ensure_demo

        ensure_demo(owner=user)
