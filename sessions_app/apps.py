from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Sessions"

    def ready(self) -> None:
        # Bind shared tasks to the project's Celery app in every process that loads Django.
        import agentloom.celery  # noqa: F401
        import sessions_app.checks  # noqa: F401
        from agentloom.reencrypt import keys_rotated

        keys_rotated.connect(_rebuild_search_index, dispatch_uid="sessions_app.search_index")
        _start_tracing()


def _rebuild_search_index(sender, *, batch_size: int, **kwargs) -> str:
    """After a key rotation: rebuild the search index rows made under a retired key."""
    from sessions_app.services.search_index import index_journal

    report = index_journal(batch_size=batch_size)
    return f"search index: {report.indexed} record(s) indexed, {report.rebuilt} rebuilt"


def _start_tracing() -> None:
    """Send traces to the configured OTLP endpoint (nothing is loaded when none is)."""
    from django.conf import settings

    from agentloom import tracing

    if settings.TRACES_ENDPOINT and not tracing.configured():
        tracing.configure(endpoint=settings.TRACES_ENDPOINT)
        tracing.instrument_frameworks()
