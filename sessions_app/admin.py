"""Sessions and their journal in the admin: read-only, scoped like the API.

A staff user sees the sessions she may manage through the API (her own, and every one of a space
she administers) and what hangs on them. Nothing here is added, edited or deleted, except that
deleting a session is `session_delete`'s soft delete.
"""

from django.contrib import admin, messages
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.urls import reverse
from django.utils.html import format_html_join

from agentloom.errors import ApplicationError
from agentloom.spaces.admin_encrypted import EncryptedPayloadAdmin
from agentloom.spaces.admin_json import json_tree
from agentloom.spaces.admin_scoping import ReadOnlyAdmin, SpaceScopedAdmin
from sessions_app.models import (
    ModelCall,
    Run,
    RunSupplement,
    Session,
    SessionDeletion,
    SessionMessage,
    SessionView,
)
from sessions_app.selectors.runs import call_responses
from sessions_app.selectors.sessions import may_delete, sessions_in_reach
from sessions_app.selectors.stored_messages import messages_read
from sessions_app.services.deletion import session_delete, session_delete_nested
from sessions_app.services.retention import session_legal_hold


class SessionScopedAdmin(SpaceScopedAdmin, EncryptedPayloadAdmin):
    """Rows of the sessions a staff user may manage, never changed here."""

    # The lookup path from the model to its Session ("" for Session itself).
    session_path = "session"

    def scope(self, request, queryset):
        if request.user.is_superuser:
            return queryset
        lookup = f"{self.session_path}__in" if self.session_path else "pk__in"
        return queryset.filter(**{lookup: sessions_in_reach(request.user)})


def _console_links(*links: tuple[str, str]):
    """Return links to console pages (which open for the session's creator only)."""
    return format_html_join(" · ", '<a href="{}">{}</a>', links)


@admin.register(Session)
class SessionAdmin(SessionScopedAdmin):
    session_path = ""
    link_fields = ("console",)
    list_display = [
        "id",
        "title",
        "space",
        "agent",
        "agent_version",
        "created_by",
        "created_at",
        "deleted_at",
        "legal_hold",
        "console",
    ]
    list_filter = ["space", "legal_hold"]
    # Titles are encrypted, so a session is found by its number, its creator or its agent.
    search_fields = ["=id", "created_by__username", "agent__name"]
    search_help_text = "Session number, creator's user name or agent name."
    ordering = ["-id"]
    actions = ["soft_delete", "hold", "release"]

    @admin.display(description="Console")
    def console(self, obj):
        return _console_links(
            (reverse("console-chat", args=[obj.pk]), "Chat"),
            (reverse("console-journal", args=[obj.pk]), "Journal"),
        )

    def get_actions(self, request):
        actions = super().get_actions(request)
        # Django's own "delete selected" would remove the journal: only the soft delete is offered.
        actions.pop("delete_selected", None)
        return actions

    def has_delete_permission(self, request, obj=None) -> bool:
        if not admin.ModelAdmin.has_delete_permission(self, request, obj):
            return False
        if obj is None:
            return True
        try:
            return obj.deleted_at is None and may_delete(request.user, obj)
        except ApplicationError:
            return False

    def get_deleted_objects(self, objs, request):
        # A soft delete removes nothing: the confirmation lists the sessions alone.
        return [str(obj) for obj in objs], {"sessions": len(objs)}, set(), []

    def log_deletions(self, request, queryset):
        # The admin's log is stored in clear: it names a session by number, never by its title.
        entries = [
            LogEntry(
                user_id=request.user.pk,
                content_type_id=ContentType.objects.get_for_model(obj).pk,
                object_id=obj.pk,
                object_repr=f"Session {obj.pk}",
                action_flag=DELETION,
            )
            for obj in queryset
        ]
        return LogEntry.objects.bulk_create(entries)

    def delete_model(self, request, obj):
        try:
            session_delete_nested(user=request.user, session=obj)
        except ApplicationError as error:
            self.message_user(request, f"{obj}: {error.detail}", messages.ERROR)

    @admin.action(description="Put selected sessions on legal hold (retention skips them)")
    def hold(self, request, queryset):
        self._legal_hold(request, queryset, hold=True)

    @admin.action(description="Release the legal hold of selected sessions")
    def release(self, request, queryset):
        self._legal_hold(request, queryset, hold=False)

    def _legal_hold(self, request, queryset, *, hold: bool) -> None:
        changed = 0
        for session in queryset:
            try:
                session_legal_hold(user=request.user, session=session, hold=hold)
                changed += 1
            except ApplicationError as error:
                self.message_user(request, f"Session {session.pk}: {error.detail}", messages.ERROR)
        self.message_user(request, f"{changed} session(s) {'held' if hold else 'released'}.")

    @admin.action(description="Delete selected sessions (hide them; purge is separate)")
    def soft_delete(self, request, queryset):
        deleted = 0
        for session in queryset:
            try:
                session_delete(user=request.user, session=session)
                deleted += 1
            except ApplicationError as error:
                self.message_user(request, f"{session}: {error.detail}", messages.ERROR)
        self.message_user(request, f"{deleted} session(s) deleted.")


@admin.register(Run)
class RunAdmin(SessionScopedAdmin):
    encrypted_fields = (
        "question",
        "answer",
        "checkpoint",
        "pending_approvals",
        "approval_decisions",
        "pending_questions",
        "question_answers",
        "question_rounds",
    )
    json_fields = ("checkpoint",)
    link_fields = ("console",)
    list_display = ["id", "session", "number", "status", "attempt", "error", "created_at"]
    list_display += ["console"]
    list_filter = ["status"]
    search_fields = ["=session__id", "=status"]
    search_help_text = (
        "Session number, or a status (queued, running, succeeded, failed, cancelled)."
    )
    ordering = ["-id"]

    @admin.display(description="Console")
    def console(self, obj):
        return _console_links(
            (reverse("console-chat", args=[obj.session_id]) + f"#run-{obj.pk}", "Chat"),
            (reverse("console-run-context", args=[obj.pk]), "Context"),
        )


@admin.register(SessionMessage)
class SessionMessageAdmin(SessionScopedAdmin):
    encrypted_fields = ("message",)
    json_fields = ("message",)
    list_display = ["session", "seq", "run", "instance", "kind", "entry_key", "created_at"]
    list_filter = ["kind", "instance"]
    ordering = ["-id"]


@admin.register(SessionView)
class SessionViewAdmin(SessionScopedAdmin):
    encrypted_fields = ("messages",)
    json_fields = ("messages",)
    list_display = ["session", "revision", "watermark", "run", "user_turns", "model_steps"]
    ordering = ["-id"]

    @admin.display(description="Messages")
    def messages_tree(self, obj):
        # A large message (the summary) is stored once for the session: show it, not its marker.
        return json_tree(messages_read(obj.session_id, obj.messages))


@admin.register(RunSupplement)
class RunSupplementAdmin(SessionScopedAdmin):
    session_path = "run__session"
    encrypted_fields = ("text",)
    list_display = ["run", "position", "consumed_at", "created_at"]
    ordering = ["-id"]
    list_select_related = ["run"]


@admin.register(ModelCall)
class ModelCallAdmin(SessionScopedAdmin):
    session_path = "run__session"
    encrypted_fields = ("response",)
    json_fields = ("response", "usage")
    link_fields = ("console",)
    list_display = [
        "run",
        "instance",
        "purpose",
        "request_estimate",
        "reported_usage",
        "latency_ms",
        "error",
    ]
    list_filter = ["purpose"]
    search_fields = [
        "=run__id",
        "run__session__agent_version__model_connection__provider",
        "=purpose",
    ]
    search_help_text = "Run id (as in its admin address), provider (openai, local, …) or purpose."
    ordering = ["-id"]
    list_select_related = ["run"]

    @admin.display(description="Reported input")
    def reported_usage(self, obj):
        if obj.usage_unreported:
            return obj.NO_USAGE
        return "—" if obj.reported_prompt_tokens is None else f"{obj.reported_prompt_tokens:,}"

    @admin.display(description="Response")
    def response_tree(self, obj):
        # An answer the journal holds is kept there only: show the response as the gateway gave
        # it, the message read from its journal record.
        response = call_responses([obj])[0]
        return "–" if response is None else json_tree(response)

    @admin.display(description="Console")
    def console(self, obj):
        url = reverse("console-run-context", args=[obj.run_id]) + f"#model-call-{obj.pk}"
        return _console_links((url, "Context page row"))


@admin.register(SessionDeletion)
class SessionDeletionAdmin(ReadOnlyAdmin, SpaceScopedAdmin):
    """Who deleted which session and when: a record, never changed."""

    list_display = ["session_number", "session_title", "space", "deleted_by_username"]
    list_display += ["deleted_at", "purged_at"]
    readonly_fields = [
        "session_number",
        "session_title",
        "space",
        "deleted_by",
        "deleted_by_username",
        "deleted_at",
        "purged_at",
    ]
