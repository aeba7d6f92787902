"""Console pages (server-rendered): home, chat, session viewer, run context."""

from django.urls import path, register_converter

from agentloom.api import MAX_ID
from sessions_app import console


class ObjectIdConverter:
    """A primary key: a number too large for the database is simply not found (404)."""

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if number > MAX_ID:
            raise ValueError("not a primary key")
        return number

    def to_url(self, value) -> str:
        return str(value)


register_converter(ObjectIdConverter, "pk")

urlpatterns = [
    path("", console.home, name="home"),
    path("sessions/new/", console.session_new, name="console-session-new"),
    path("sessions/table/", console.home_sessions, name="console-home-sessions"),
    path("sessions/<pk:session_id>/", console.chat, name="console-chat"),
    path("sessions/<pk:session_id>/ask/", console.ask, name="console-ask"),
    path("sessions/<pk:session_id>/rename/", console.rename, name="console-session-rename"),
    path("sessions/<pk:session_id>/delete/", console.delete, name="console-session-delete"),
    path("sessions/<pk:session_id>/state/", console.session_state, name="console-session-state"),
    path("sessions/<pk:session_id>/records/", console.chat_records, name="console-chat-records"),
    path(
        "sessions/<pk:session_id>/journal/rows/", console.journal_rows, name="console-journal-rows"
    ),
    path("sessions/<pk:session_id>/journal/", console.journal, name="console-journal"),
    path(
        "sessions/<pk:session_id>/views/<pk:revision>/revoke/",
        console.revoke_view,
        name="console-view-revoke",
    ),
    path("runs/<pk:run_id>/context/", console.run_context_page, name="console-run-context"),
    path("runs/<pk:run_id>/block/", console.run_block, name="console-run-block"),
    path("runs/<pk:run_id>/panel/", console.run_panel, name="console-run-panel"),
    path("runs/<pk:run_id>/meter/", console.run_meter, name="console-run-meter"),
]
