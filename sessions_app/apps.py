from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Sessions"

    def ready(self) -> None:
        # Bind shared tasks to the project's Celery app in every process that loads Django.
        import agentloom.celery  # noqa: F401
        import sessions_app.checks  # noqa: F401
