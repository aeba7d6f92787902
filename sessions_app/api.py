"""REST endpoints of sessions, runs, the journal, views, model calls and run context.

Everything here belongs to the session's creator: anyone else gets 404, whatever their role in the
space. Runs are started, resumed and cancelled through the run services and answer 202 at once;
a worker does the rest.
"""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import status
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from agentloom.api import ApiView, api_schema, object_id
from agentloom.errors import InvalidInput
from context_app.selectors import agent_get, latest_version, space_get, version_get
from sessions_app.downloads import export_response
from sessions_app.selectors.context import run_context
from sessions_app.selectors.journal import journal_page
from sessions_app.selectors.runs import model_calls_of, run_get, runs_of
from sessions_app.selectors.sessions import (
    session_for_deletion,
    session_for_revocation,
    session_get,
    sessions_for_user,
)
from sessions_app.selectors.views import view_derivations, views_of
from sessions_app.serializers import (
    AnswerSerializer,
    ApprovalDecisionSerializer,
    ExportQuerySerializer,
    ForkSerializer,
    ImportSerializer,
    JournalPageSerializer,
    JournalQuerySerializer,
    ModelCallSerializer,
    PinSerializer,
    QuestionSerializer,
    RunContextSerializer,
    RunSerializer,
    SessionCreateSerializer,
    SessionSerializer,
    SessionViewSerializer,
    SupplementCreateSerializer,
    SupplementSerializer,
    journal_page_data,
    journal_page_json,
)
from sessions_app.services.approvals import run_decide
from sessions_app.services.deletion import session_delete
from sessions_app.services.export import session_export
from sessions_app.services.fork import session_fork
from sessions_app.services.imports import session_import
from sessions_app.services.questions import run_answer
from sessions_app.services.reusable_views import view_revoke
from sessions_app.services.runs import (
    run_ask,
    run_cancel,
    run_resume,
    session_create,
    session_pin,
    supplement_add,
)

SESSION_ID = "Session id (the caller's own session)."
RUN_ID = "Run id (a run of the caller's own session)."


class SessionListCreateApi(ApiView):
    @api_schema(ok=200, response=SessionSerializer(many=True), operation_id="sessions_list")
    def get(self, request):
        """List the caller's own sessions, newest first."""
        return self.paginated(sessions_for_user(request.user), SessionSerializer)

    @api_schema(
        ok=201,
        response=SessionSerializer,
        request=SessionCreateSerializer,
        errors=(404, 409),
        operation_id="sessions_create",
        description="Open a session of `agent_version`, or of the latest published version of "
        "`agent` (409 when it has none).",
    )
    def post(self, request):
        """Open a session."""
        data = SessionCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        if "agent_version" in fields:
            version = version_get(user=request.user, version_id=fields["agent_version"])
            if fields.get("agent", version.agent_id) != version.agent_id:
                raise InvalidInput("This version belongs to another agent.", field="agent")
        else:
            version = latest_version(agent_get(user=request.user, agent_id=fields["agent"]))
        session = session_create(
            user=request.user, agent_version=version, title=fields.get("title", "")
        )
        return Response(SessionSerializer(session).data, status=status.HTTP_201_CREATED)


class SessionDetailApi(ApiView):
    @api_schema(
        ok=200,
        response=SessionSerializer,
        errors=(404,),
        path_id=SESSION_ID,
        operation_id="sessions_retrieve",
    )
    def get(self, request, id):
        """Return one of the caller's sessions."""
        session = session_get(user=request.user, session_id=object_id(id))
        return Response(SessionSerializer(session).data)

    @api_schema(
        ok=204,
        response=None,
        errors=(404, 409),
        path_id="Session id (the caller's own, or one in a space the caller administers).",
        operation_id="sessions_destroy",
        description="Delete a session: it disappears from every list and page and takes no new "
        "run; its journal is kept until an operator purges deleted sessions. The session's "
        "creator or a space admin may (403 for another member); 409 while a run is active.",
    )
    def delete(self, request, id):
        """Delete a session."""
        session = session_for_deletion(user=request.user, session_id=object_id(id))
        session_delete(user=request.user, session=session)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SessionRunsApi(ApiView):
    @api_schema(
        ok=200,
        response=RunSerializer(many=True),
        errors=(404,),
        path_id=SESSION_ID,
        operation_id="sessions_runs_list",
    )
    def get(self, request, id):
        """List the session's runs, newest first."""
        session = session_get(user=request.user, session_id=object_id(id))
        return self.paginated(runs_of(session), RunSerializer)

    @api_schema(
        ok=202,
        response=RunSerializer,
        request=QuestionSerializer,
        errors=(404, 409),
        path_id=SESSION_ID,
        operation_id="sessions_runs_create",
        description="Ask a new question; the run is queued for a worker. 409 while another run "
        "of the session is active.",
    )
    def post(self, request, id):
        """Ask a question."""
        session = session_get(user=request.user, session_id=object_id(id))
        data = QuestionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run = run_ask(user=request.user, session=session, **data.validated_data)
        body = RunSerializer(run, context={"just_asked": True}).data
        return Response(body, status=status.HTTP_202_ACCEPTED)


class RunDetailApi(ApiView):
    @api_schema(
        ok=200, response=RunSerializer, errors=(404,), path_id=RUN_ID, operation_id="runs_retrieve"
    )
    def get(self, request, id):
        """Return the run."""
        return Response(RunSerializer(run_get(user=request.user, run_id=object_id(id))).data)


class RunSupplementsApi(ApiView):
    @api_schema(
        ok=202,
        response=SupplementSerializer,
        request=SupplementCreateSerializer,
        errors=(404, 409),
        path_id=RUN_ID,
        operation_id="runs_supplements_create",
        description="Queue a supplement; it enters the run's view at its next safe point. "
        "409 once the run has succeeded.",
    )
    def post(self, request, id):
        """Add a supplement to the run."""
        run = run_get(user=request.user, run_id=object_id(id))
        data = SupplementCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        supplement = supplement_add(user=request.user, run=run, **data.validated_data)
        return Response(SupplementSerializer(supplement).data, status=status.HTTP_202_ACCEPTED)


class RunResumeApi(ApiView):
    @api_schema(
        ok=202,
        response=RunSerializer,
        errors=(404, 409),
        path_id=RUN_ID,
        operation_id="runs_resume",
        description="Queue a failed or cancelled run again, continuing its checkpoint. 409 "
        "otherwise, or while another run of the session is active.",
    )
    def post(self, request, id):
        """Resume the run."""
        run = run_get(user=request.user, run_id=object_id(id))
        run = run_resume(user=request.user, run=run)
        return Response(RunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class RunCancelApi(ApiView):
    @api_schema(
        ok=202,
        response=RunSerializer,
        errors=(404, 409),
        path_id=RUN_ID,
        operation_id="runs_cancel",
        description="Cancel a queued run at once, or a running one at its next safe point. 409 "
        "once it has finished.",
    )
    def post(self, request, id):
        """Cancel the run."""
        run = run_get(user=request.user, run_id=object_id(id))
        run = run_cancel(user=request.user, run=run)
        return Response(RunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class RunApprovalsApi(ApiView):
    @api_schema(
        ok=202,
        response=RunSerializer,
        request=ApprovalDecisionSerializer,
        errors=(404, 409),
        path_id=RUN_ID,
        operation_id="runs_approvals_create",
        description="Approve or deny one tool call the run waits on (the session's creator "
        "only). Once every pending call is decided the run is queued and continues. 409 for a "
        "call already decided or a run that is not waiting.",
    )
    def post(self, request, id):
        """Decide a pending tool call."""
        run = run_get(user=request.user, run_id=object_id(id))
        data = ApprovalDecisionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run = run_decide(user=request.user, run=run, **data.validated_data)
        return Response(RunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class RunAnswersApi(ApiView):
    @api_schema(
        ok=202,
        response=RunSerializer,
        request=AnswerSerializer,
        errors=(404, 409),
        path_id=RUN_ID,
        operation_id="runs_answers_create",
        description="Answer (`accept` with the form's `content`, or a URL confirmed), decline "
        "or cancel one question a tool server asked (the run object's `pending_questions`; "
        "the session's creator only). Once every question of a wait is answered the run is "
        "queued and sends the same call again with the answers. 409 for a question already "
        "answered, a run that is not waiting, or a call past its deadline.",
    )
    def post(self, request, id):
        """Answer a tool server's question."""
        run = run_get(user=request.user, run_id=object_id(id))
        data = AnswerSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run = run_answer(user=request.user, run=run, **data.validated_data)
        return Response(RunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class SessionMessagesApi(ApiView):
    @api_schema(
        ok=200,
        response=JournalPageSerializer,
        errors=(400, 404),
        path_id=SESSION_ID,
        parameters=[JournalQuerySerializer],
        operation_id="sessions_messages_list",
        description="Read the session journal in seq order with a cursor: pass `next_after` "
        "as `after` for the next page.",
    )
    def get(self, request, id):
        """Read the session journal."""
        session = session_get(user=request.user, session_id=object_id(id))
        # A plain dict: DRF would read an empty `after=` or `instance=` as "not given".
        query = JournalQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        if "indent" in (request.accepted_media_type or ""):
            # A client asked for indented JSON: the renderer writes it from the parsed records.
            page = journal_page(session=session, **query.validated_data)
            return Response(journal_page_data(page))
        page = journal_page(session=session, message_text=True, **query.validated_data)
        return HttpResponse(journal_page_json(page), content_type="application/json")


class SessionExportApi(ApiView):
    @api_schema(
        ok=200,
        response={
            "application/x-ndjson": OpenApiTypes.STR,
            # The OpenAI format: a JSON array of chat messages.
            "application/json": {"type": "array", "items": {"type": "object"}},
        },
        errors=(400, 404),
        path_id=SESSION_ID,
        parameters=[ExportQuerySerializer],
        operation_id="sessions_export",
        description="Export the session (its creator only): `output=jsonl` streams the signed "
        "transfer file (header, every journal record in order, runs, compactions, references, "
        "views, model calls, signature), `output=openai` the main conversation as OpenAI chat "
        "messages. Every export is recorded.",
    )
    def get(self, request, id):
        """Export the session."""
        session = session_get(user=request.user, session_id=object_id(id))
        query = ExportQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        output = query.validated_data["output"]
        lines = session_export(
            user=request.user,
            session=session,
            format=output,
            bodies=query.validated_data["bodies"],
        )
        return export_response(lines, session_id=session.pk, output=output)


class SessionForkApi(ApiView):
    @api_schema(
        ok=201,
        response=SessionSerializer,
        request=ForkSerializer,
        errors=(404, 409),
        path_id=SESSION_ID,
        operation_id="sessions_fork",
        description="Fork the session at journal record `seq`: a new session of the same "
        "creator and version whose journal starts with a copy of the main records up to it "
        "(numbered from 1, each naming its origin seq; an open tool group closed `unknown`). "
        "400 naming `seq` when no record has it; 409 while a run is active.",
    )
    def post(self, request, id):
        """Fork the session."""
        session = session_get(user=request.user, session_id=object_id(id))
        data = ForkSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fork = session_fork(user=request.user, session=session, seq=data.validated_data["seq"])
        return Response(SessionSerializer(fork).data, status=status.HTTP_201_CREATED)


class SessionPinApi(ApiView):
    @api_schema(
        ok=200,
        response=SessionSerializer,
        request=PinSerializer,
        errors=(400, 404),
        path_id=SESSION_ID,
        operation_id="sessions_pin",
        description="Pin instructions to the session (its creator only; blank unpins): every "
        "run asked from now on carries them word for word after the system prompt, in every "
        "view, compactions included; they count in the room for a question (400 naming `text` "
        "when they would leave less than the floor).",
    )
    def post(self, request, id):
        """Pin instructions."""
        session = session_get(user=request.user, session_id=object_id(id))
        data = PinSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        session = session_pin(user=request.user, session=session, text=data.validated_data["text"])
        return Response(SessionSerializer(session).data)


class SessionImportApi(ApiView):
    # The file comes as a multipart upload (streamed to a temporary file past Django's memory
    # limit); the import reads it line by line and stops at SESSION_IMPORT_MAX_BYTES.
    parser_classes = [MultiPartParser]

    @api_schema(
        ok=201,
        response=SessionSerializer,
        request={"multipart/form-data": ImportSerializer},
        errors=(400, 404),
        operation_id="sessions_import",
        description="Import a session export into a space of the caller's as a new session of "
        "theirs, bound to `agent_version` (read only without it). The file is checked whole "
        "before anything is written: 400 naming `file` with the line and the reason for a file "
        "that is malformed, inconsistent, over the size cap, altered or signed by another "
        "deployment. It is written hidden and published in one step.",
    )
    def post(self, request):
        """Import a session."""
        data = ImportSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        space = space_get(user=request.user, space_id=fields["space"])
        version = None
        if "agent_version" in fields:
            version = version_get(user=request.user, version_id=fields["agent_version"])
        session = session_import(
            user=request.user, space=space, stream=fields["file"], agent_version=version
        )
        return Response(SessionSerializer(session).data, status=status.HTTP_201_CREATED)


class SessionViewsApi(ApiView):
    @api_schema(
        ok=200,
        response=SessionViewSerializer(many=True),
        errors=(404,),
        path_id=SESSION_ID,
        operation_id="sessions_views_list",
    )
    def get(self, request, id):
        """List the session's reusable compacted views."""
        session = session_get(user=request.user, session_id=object_id(id))
        return self.paginated(
            views_of(session),
            SessionViewSerializer,
            context={"derivations": view_derivations(session.pk)},
        )


class SessionViewRevokeApi(ApiView):
    @api_schema(
        ok=200,
        response=SessionViewSerializer,
        errors=(404, 409),
        path_id=SESSION_ID,
        parameters=[
            OpenApiParameter("revision", int, OpenApiParameter.PATH, description="View revision.")
        ],
        operation_id="sessions_views_revoke",
        description="Revoke a reusable view: later new runs use neither it nor the views derived "
        "from it, and fall back to the newest compliant view with a clean chain or to full "
        "projection. The session's creator or a space admin may; the view "
        "stays on record with who revoked it and when.",
    )
    def post(self, request, id, revision):
        """Revoke a reusable view."""
        session = session_for_revocation(user=request.user, session_id=object_id(id))
        view = view_revoke(user=request.user, session=session, revision=object_id(revision))
        derivations = {"derivations": view_derivations(session.pk)}
        return Response(SessionViewSerializer(view, context=derivations).data)


class RunContextApi(ApiView):
    @api_schema(
        ok=200,
        response=RunContextSerializer,
        errors=(404,),
        path_id=RUN_ID,
        operation_id="runs_context_retrieve",
        description="The run's current view and its measure against the budget and policy "
        "bound into its checkpoint (the frozen version's before the first checkpoint), with "
        "every compaction attempt and what it spent and saved, in money where the calls' "
        "prices are known (computed when read).",
    )
    def get(self, request, id):
        """Return the run's context."""
        run = run_get(user=request.user, run_id=object_id(id))
        return Response(RunContextSerializer(run_context(run, costs=True)).data)


class RunModelCallsApi(ApiView):
    @api_schema(
        ok=200,
        response=ModelCallSerializer(many=True),
        errors=(404,),
        path_id=RUN_ID,
        operation_id="runs_model_calls_list",
        description="Every gateway call of the run, in order; responses are not listed.",
    )
    def get(self, request, id):
        """List the run's model calls."""
        run = run_get(user=request.user, run_id=object_id(id))
        return self.paginated(model_calls_of(run), ModelCallSerializer)
