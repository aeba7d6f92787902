"""The console's routes: its pages, the fragments they poll and the actions they post."""

from django.urls import path, register_converter

from agentloom.api import MAX_ID
from sessions_app.console import actions, fragments, oauth, pages, spaces, usage


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
    path("", pages.home, name="home"),
    path("usage/", usage.usage, name="console-usage"),
    path("spaces/<pk:space_id>/", spaces.space, name="console-space"),
    path("spaces/<pk:space_id>/retention/", spaces.retention, name="console-space-retention"),
    path(
        "spaces/<pk:space_id>/tool-servers/<pk:server_id>/connect/",
        oauth.connect,
        name="console-oauth-connect",
    ),
    path(
        "spaces/<pk:space_id>/tool-servers/<pk:server_id>/disconnect/",
        oauth.disconnect,
        name="console-oauth-disconnect",
    ),
    path("oauth/callback/", oauth.callback, name="console-oauth-callback"),
    path("oauth/client-metadata.json", oauth.metadata_document, name="console-oauth-document"),
    path("sessions/new/", actions.session_new, name="console-session-new"),
    path("sessions/table/", fragments.home_sessions, name="console-home-sessions"),
    path("sessions/<pk:session_id>/", pages.chat, name="console-chat"),
    path("sessions/<pk:session_id>/ask/", actions.ask, name="console-ask"),
    path("sessions/<pk:session_id>/rename/", actions.rename, name="console-session-rename"),
    path("sessions/<pk:session_id>/pin/", actions.pin, name="console-session-pin"),
    path("sessions/<pk:session_id>/delete/", actions.delete, name="console-session-delete"),
    path("sessions/<pk:session_id>/export/", actions.export, name="console-session-export"),
    path("sessions/<pk:session_id>/fork/", actions.fork, name="console-session-fork"),
    path("sessions/<pk:session_id>/hold/", actions.hold, name="console-session-hold"),
    path("sessions/<pk:session_id>/state/", fragments.session_state, name="console-session-state"),
    path("sessions/<pk:session_id>/records/", fragments.chat_records, name="console-chat-records"),
    path(
        "sessions/<pk:session_id>/journal/rows/",
        fragments.journal_rows,
        name="console-journal-rows",
    ),
    path("sessions/<pk:session_id>/journal/", pages.journal, name="console-journal"),
    path(
        "sessions/<pk:session_id>/views/<pk:revision>/revoke/",
        actions.revoke_view,
        name="console-view-revoke",
    ),
    path("runs/<pk:run_id>/context/", pages.run_context_page, name="console-run-context"),
    path("runs/<pk:run_id>/block/", fragments.run_block, name="console-run-block"),
    path("runs/<pk:run_id>/panel/", fragments.run_panel, name="console-run-panel"),
    path("runs/<pk:run_id>/meter/", fragments.run_meter, name="console-run-meter"),
]
