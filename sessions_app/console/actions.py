"""The console's actions: the forms a page posts (new session, ask, rename, pin, delete, revoke,
fork, legal hold) and the export download.

Each calls one service and redirects: to the page it leads to when done, with a message, and
when the service refuses it (`console_errors`) to the page it came from, with the refusal.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from agentloom.errors import InvalidInput, NotFound
from context_app.selectors import agent_get, latest_version
from sessions_app.console.errors import console_errors
from sessions_app.console.forms import AskForm, HoldForm, NewSessionForm
from sessions_app.downloads import export_response
from sessions_app.selectors.runs import run_get
from sessions_app.selectors.sessions import (
    session_for_deletion,
    session_for_revocation,
    session_get,
)
from sessions_app.services.deletion import session_delete
from sessions_app.services.export import EXPORT_FORMATS, session_export
from sessions_app.services.fork import session_fork
from sessions_app.services.retention import session_legal_hold
from sessions_app.services.reusable_views import view_revoke
from sessions_app.services.runs import run_ask, session_create, session_pin, session_rename


def _home(request, **url_kwargs) -> str:
    return reverse("home")


def _chat(request, *, session_id: int, **url_kwargs) -> str:
    return reverse("console-chat", args=[session_id])


def _next_or_chat(request, *, session_id: int, **url_kwargs) -> str:
    """Return the page named by the form's `next` when it is on this site, else the chat."""
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = reverse("console-chat", args=[session_id])
    return target


@require_POST
@login_required
@console_errors(back=_home)
def session_new(request):
    """Open a session with the latest published version of the chosen agent."""
    form = NewSessionForm(request.POST)
    if not form.is_valid():
        raise NotFound("Not found.")
    agent = agent_get(user=request.user, agent_id=form.cleaned_data["agent"])
    session = session_create(user=request.user, agent_version=latest_version(agent))
    return redirect("console-chat", session_id=session.pk)


@require_POST
@login_required
@console_errors(back=_chat)
def ask(request, session_id: int):
    """Ask a question from the plain form (the script uses the REST API instead)."""
    session = session_get(user=request.user, session_id=session_id)
    form = AskForm(request.POST)
    if not form.is_valid():
        raise InvalidInput(form.errors["question"][0], field="question")
    run = run_ask(user=request.user, session=session, question=form.cleaned_data["question"])
    for warning in run.spend_warnings:
        messages.warning(request, warning)
    return redirect("console-chat", session_id=session.pk)


@require_POST
@login_required
@console_errors(back=_chat, prefix="Not renamed: ")
def rename(request, session_id: int):
    """Rename one of the caller's sessions, then return to its chat."""
    session = session_get(user=request.user, session_id=session_id)
    session_rename(user=request.user, session=session, title=request.POST.get("title", ""))
    messages.success(request, f"Renamed to “{session}”.")
    return redirect("console-chat", session_id=session.pk)


@require_POST
@login_required
@console_errors(back=_chat, prefix="Not pinned: ")
def pin(request, session_id: int):
    """Pin instructions to one of the caller's sessions (blank unpins), then return to its chat.

    `run` (a question's **Pin question** button) adds that run's question to what is pinned.
    """
    session = session_get(user=request.user, session_id=session_id)
    text = request.POST.get("text", "")
    if "run" in request.POST:
        run_id = request.POST["run"]
        run = run_get(user=request.user, run_id=int(run_id)) if run_id.isdecimal() else None
        if run is None or run.session_id != session.pk:
            raise InvalidInput("That is not a question of this session.", field="run")
        text = "\n".join(part for part in (session.pinned, run.question) if part)
    session = session_pin(user=request.user, session=session, text=text)
    messages.success(request, "Pinned." if session.pinned else "Unpinned.")
    return redirect("console-chat", session_id=session.pk)


@require_POST
@login_required
@console_errors(back=_chat, prefix="Not deleted: ")
def delete(request, session_id: int):
    """Delete a session through the soft-delete service, then go to the console home."""
    session = session_for_deletion(user=request.user, session_id=session_id)
    session_delete(user=request.user, session=session)
    messages.success(request, f"Deleted “{session}”.")
    return redirect("home")


@require_POST
@login_required
@console_errors(back=_next_or_chat)
def revoke_view(request, session_id: int, revision: int):
    """Revoke a reusable view from the Context page, then return to it."""
    session = session_for_revocation(user=request.user, session_id=session_id)
    view = view_revoke(user=request.user, session=session, revision=revision)
    messages.success(request, f"View r{view.revision} revoked: new runs no longer use it.")
    return redirect(_next_or_chat(request, session_id=session_id))


@require_GET
@login_required
@console_errors()
def export(request, session_id: int):
    """Download the session's export (`?output=openai` for the OpenAI chat messages)."""
    session = session_get(user=request.user, session_id=session_id)
    output = request.GET.get("output", "jsonl")
    if output not in EXPORT_FORMATS:
        raise NotFound("Not found.")
    lines = session_export(user=request.user, session=session, format=output)
    return export_response(lines, session_id=session.pk, output=output)


@require_POST
@login_required
@console_errors(back=_chat, prefix="Not forked: ")
def fork(request, session_id: int):
    """Fork the session at the journal record posted as `seq`, then open the fork's chat."""
    session = session_get(user=request.user, session_id=session_id)
    try:
        seq = int(request.POST.get("seq", ""))
    except ValueError:
        raise InvalidInput("Choose a journal record to fork from.", field="seq") from None
    forked = session_fork(user=request.user, session=session, seq=seq)
    messages.success(request, f"Forked at record #{seq}: this session continues from there.")
    return redirect("console-chat", session_id=forked.pk)


@require_POST
@login_required
@console_errors(back=_chat, prefix="Hold not changed: ")
def hold(request, session_id: int):
    """Place the session on legal hold or release it (a space admin only), then return to it."""
    session = session_get(user=request.user, session_id=session_id)
    form = HoldForm(request.POST)
    if not form.is_valid():
        raise InvalidInput("Choose to place the hold or to release it.", field="hold")
    session = session_legal_hold(
        user=request.user, session=session, hold=bool(form.cleaned_data["hold"])
    )
    messages.success(
        request,
        "On legal hold: the space's retention rule does not delete this session."
        if session.legal_hold
        else "Legal hold released: the space's retention rule applies again.",
    )
    return redirect("console-chat", session_id=session.pk)
