from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Sessions"

    def ready(self) -> None:
        # Bind shared tasks to the project's Celery app in every process that loads Django.
        import agentloom.celery  # noqa: F401
        import sessions_app.checks  # noqa: F401

        _start_tracing()


def _start_tracing() -> None:
    """Send traces to the configured OTLP endpoint (nothing is loaded when none is)."""
    from django.conf import settings

    from agentloom import tracing

    if settings.TRACES_ENDPOINT and not tracing.configured():
        tracing.configure(endpoint=settings.TRACES_ENDPOINT)
        tracing.instrument_frameworks()
