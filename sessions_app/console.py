"""Console pages: the start page, a session's chat, its journal viewer and a run's context.

Pages read through the selectors the REST API uses, so the access rule is the same: a session and
everything in it exists only for its creator while a member of its space; anyone else gets 404.
Writes go through the run services. Everything is rendered here, once: while a run is active
static/console/console.js fetches the same templates served alone (chat records, a run's block,
the run panel, the meter, journal rows) and puts them in place.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from rest_framework.exceptions import ValidationError

from agentloom.api import QueryPositionField
from agentloom.engine import FEEDBACK_PREFIX, REASONING_KEY, message_text
from agentloom.errors import ApplicationError, NotFound, PermissionDenied
from agentloom.spaces.selectors import spaces_for_user
from context_app.engine_adapter import estimator_name, input_check
from context_app.selectors import agent_get, agents_for_user, draft_changes, latest_versions
from context_app.services import latest_version
from models_app.models import ModelConnection
from sessions_app.models import MAIN_INSTANCE, Run, Session, SessionMessage
from sessions_app.selectors import (
    JOURNAL_LIMIT_MAX,
    active_run,
    compaction_marks,
    cost_summary,
    first_seq_of,
    instances_of,
    journal_page,
    model_call_in_flight,
    model_calls_of,
    run_context,
    run_counters,
    run_get,
    runs_of,
    session_cost,
    session_for_deletion,
    session_for_revocation,
    session_get,
    session_list,
    views_of,
)
from sessions_app.serializers import JournalQuerySerializer
from sessions_app.services.approvals import undecided
from sessions_app.services.deletion import session_delete
from sessions_app.services.runs import (
    MAX_QUESTION_CHARS,
    run_ask,
    session_create,
    session_rename,
)
from sessions_app.services.views import view_derivations, view_revoke
from sessions_app.templatetags.console_text import unit_name

SESSIONS_PER_PAGE = 25
# The chat shows the latest runs in full; older ones are read in the journal viewer.
CHAT_RUNS = 20
JOURNAL_PAGE = 50
# View messages longer than this are shown collapsed on the context page.
LONG_MESSAGE_CHARS = 800
EMPTY_CONTEXT = {
    "messages": [],
    "estimate": 0,
    "effective_budget": 0,
    "ceiling": 0,
    "unit": "estimate",
    "trigger_at": 0,
    "target_at": 0,
    "compactions": [],
    "plan": None,
}


# --- helpers -------------------------------------------------------------------------------------


def _or_404(read, **kwargs):
    """Call a selector; its NotFound (someone else's or a missing object) becomes Django's 404."""
    try:
        return read(**kwargs)
    except NotFound:
        raise Http404("Not found.") from None


def _pretty_arguments(raw: Any) -> str:
    if not isinstance(raw, str):
        return json.dumps(raw, indent=2, ensure_ascii=False)
    try:
        return json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return raw  # shown as the model wrote it: malformed or absurdly deep arguments too


def present_record(item: dict[str, Any], call_names: dict[str, str]) -> dict[str, Any]:
    """Return what the pages show of one journal item; remember tool call names in `call_names`."""
    message = item.get("message") or {}
    shown = {**item, "text": message_text(message), "tool_calls": []}
    # The model's reasoning (DeepSeek's thinking mode), shown folded as "Thinking".
    reasoning = message.get(REASONING_KEY)
    shown["reasoning"] = reasoning if isinstance(reasoning, str) else ""
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        name = str(function.get("name") or "?")
        call_names[str(call.get("id"))] = name
        shown["tool_calls"].append(
            {
                "id": call.get("id"),
                "name": name,
                "arguments": _pretty_arguments(function.get("arguments")),
            }
        )
    if message.get("role") == "tool":
        call_id = str(message.get("tool_call_id"))
        shown["tool_call_id"] = call_id
        shown["tool_name"] = call_names.get(call_id, "tool")
    if item["kind"] == SessionMessage.Kind.FEEDBACK:
        # The engine's note to the model; the pages show it as a notice, without its marker.
        shown["text"] = shown["text"].removeprefix(FEEDBACK_PREFIX)
    if item["kind"] == SessionMessage.Kind.STATUS:
        shown["status"] = message.get("status")
        shown["error"] = message.get("error") or ""
    shown["chars"] = len(shown["text"])
    return shown


def _all_records(session: Session, *, after: int, instance: str | None) -> Iterator[dict]:
    """Yield the session's journal items after `after`, page by page through `journal_page`."""
    while True:
        page = journal_page(
            session=session, after=after, limit=JOURNAL_LIMIT_MAX, instance=instance
        )
        yield from page["items"]
        if len(page["items"]) < JOURNAL_LIMIT_MAX:
            return
        after = page["next_after"]


def _meter(context: dict[str, Any]) -> dict[str, Any]:
    """Return the context meter's numbers: sizes and their positions on one common scale.

    Every number is the run context's (`measure_context`), in one unit: the meter fills against
    the ceiling, which is the effective budget, or the character threshold of a legacy version.
    """
    ceiling = context["ceiling"]
    scale = max(ceiling, context["estimate"], context["trigger_at"], 1)

    def percent(value: int) -> float:
        return round(100 * value / scale, 2)

    estimate = context["estimate"]
    return {
        **context,
        "fill": percent(estimate),
        "trigger_pos": percent(context["trigger_at"]),
        "target_pos": percent(context["target_at"]),
        "budget_pos": percent(ceiling),
        "share": _share_text(estimate, ceiling),
        "level": "over"
        if estimate > ceiling
        else "high"
        if estimate >= context["trigger_at"]
        else "ok",
        "compaction_count": len(context["compactions"]),
        "last_reported": _last_reported(context.get("last_reported")),
    }


def _share_text(estimate: int, ceiling: int) -> str:
    """Return the estimate's share of the ceiling in whole percent; "<1" for a visible sliver,
    so the meter never says 0% beside a fill.
    """
    share = 100 * estimate / max(ceiling, 1)
    return "<1" if 0 < share < 1 else str(round(share))


def _last_reported(reported: dict[str, Any] | None) -> dict | None:
    """Return the last reported call: its own estimate and error, side by side."""
    if reported is None:
        return None
    return {
        **reported,
        "error_percent": _signed_percent(reported["estimate_error"]),
        "unit": unit_name(
            calibrated=reported.get("calibrated", False), estimator=reported.get("estimator") or ""
        ),
    }


def _input_limit(session: Session) -> dict[str, Any]:
    """Return the largest question the session's version takes, and how the page counts it."""
    version = session.agent_version
    return {
        "inputLimit": input_check(version, "").limit,
        # The page counts bytes exactly as the byte estimator does; tokens only approximately.
        "inputUnit": estimator_name((version.snapshot.get("estimator") or {}).get("module_id")),
        "inputLegacy": version.snapshot.get("context_policy") is None,
        # The service's own ceiling in characters, whatever the estimator says.
        "questionMaxChars": MAX_QUESTION_CHARS,
    }


def _signed_percent(fraction: float | None) -> str | None:
    return None if fraction is None else f"{100 * fraction:+,.1f}"


def _cached_text(call) -> str | None:
    if not call.cached_tokens or not call.reported_prompt_tokens:
        return None
    share = round(100 * call.cached_tokens / call.reported_prompt_tokens)
    return f"{call.cached_tokens:,} provider tokens ({share}%)"


def _cost_text(amount, currency: str) -> str | None:
    """Return `amount currency` written out in full, or None when the cost is unknown."""
    if amount is None:
        return None
    return f"{format(amount.normalize(), 'f')} {currency}"


def _call_cost_text(call) -> str | None:
    """Return a call's cost, with the band of a time-of-day price or `manual` prices named."""
    text = _cost_text(call.cost, call.price_currency)
    if text is None:
        return None
    notes = [call.price_band.replace("_", "-")] if call.price_band else []
    if call.price_source == "manual":
        notes.append("manual prices")
    return f"{text} ({', '.join(notes)})" if notes else text


def _summary_text(summary: dict | None) -> dict | None:
    """Return a cost summary as the Context page shows it (None: no cost is known)."""
    if summary is None:
        return None
    return {
        "text": _cost_text(summary["amount"], summary["currency"]),
        "dates": ", ".join(day.isoformat() for day in summary["price_date"]),
        "complete": summary["complete"],
        "unpriced": summary["unpriced_calls"],
    }


def _cached_share(calls) -> int | None:
    """Return the share of the run's reported input tokens that came from the prompt cache."""
    reported = sum(call.reported_prompt_tokens or 0 for call in calls)
    if not reported:
        return None
    return round(100 * sum(call.cached_tokens or 0 for call in calls) / reported)


def _binding(session: Session) -> dict[str, Any]:
    """Return the agent version the session is bound to and the model it froze."""
    version = session.agent_version
    budget = version.snapshot.get("budget") or {}
    connection = version.model_connection
    return {
        "agent": session.agent,
        "version": version,
        "connection": connection,
        "provider": budget.get("provider") or (connection.provider if connection else ""),
        "model_id": budget.get("model_id") or (connection.model_id if connection else ""),
        "context_window": budget.get("context_window"),
        "is_demo": (budget.get("provider") or "") == ModelConnection.Provider.LOCAL,
        "legacy_policy": version.snapshot.get("context_policy") is None,
    }


def _usage_text(usage: Any) -> str:
    """Return the token usage a provider reported, as `prompt / completion / total` if it can."""
    if not isinstance(usage, dict) or not usage:
        return "–"
    names = ("prompt_tokens", "completion_tokens", "total_tokens")
    if all(isinstance(usage.get(name), int) for name in names):
        return " / ".join(f"{usage[name]:,}" for name in names)
    # Other shapes are shown as reported, minus nested details.
    return ", ".join(
        f"{key} {value}" for key, value in usage.items() if isinstance(value, int | float | str)
    )


def _counters(run: Run) -> dict[str, int]:
    counters = run_counters(run)
    counters["steps_since_compaction"] = counters["model_steps"] - counters["baseline_model_steps"]
    return counters


def _with_marks(records: list[dict], marks: list[dict]) -> list[dict]:
    """Return the run's chat records with its compactions placed after the record each saw.

    One that saw no shown record (none yet, or only the question, which heads the block) comes
    first. Records fetched live get theirs from `chat_records`, placed by the same rule.
    """
    seqs = {record["seq"] for record in records}
    placed = [{"kind": "compaction", **mark} for mark in marks if mark["journal_seq"] not in seqs]
    for record in records:
        placed.append(record)
        placed.extend(
            {"kind": "compaction", **mark} for mark in marks if mark["journal_seq"] == record["seq"]
        )
    return placed


def _context_url_template() -> str:
    # The script fills in run ids; the route itself stays defined in console_urls only.
    return reverse("console-run-context", args=[0]).replace("/0/", "/{id}/")


# --- pages ---------------------------------------------------------------------------------------


@require_GET
@login_required
def home(request):
    """Show the caller's spaces, their agents (drafts too, marked), and the caller's sessions."""
    user = request.user
    agents = list(
        agents_for_user(user).select_related("space", "model_connection").order_by("name", "id")
    )
    latest = latest_versions(agents)
    agents_by_space: dict[int, list] = {}
    for agent in agents:
        version = latest.get(agent.pk)
        provider = ((version.snapshot if version else {}).get("budget") or {}).get("provider", "")
        agents_by_space.setdefault(agent.space_id, []).append(
            {
                "agent": agent,
                "version": version,
                "is_demo": provider == ModelConnection.Provider.LOCAL,
                "changes": [name.replace("_", " ") for name in draft_changes(agent, version)]
                if version
                else [],
            }
        )
    spaces = [
        {"space": space, "agents": agents_by_space.get(space.pk, [])}
        for space in spaces_for_user(user).order_by("name", "id")
    ]
    config = {"sessionsUrl": reverse("console-home-sessions")}
    return render(
        request,
        "console/home.html",
        {"spaces": spaces, "sessions": _sessions_page(request), "config": config},
    )


def _sessions_page(request):
    sessions = session_list(request.user)
    return Paginator(sessions, SESSIONS_PER_PAGE).get_page(request.GET.get("page"))


@require_GET
@login_required
def home_sessions(request):
    """Serve the home page's table of the caller's sessions as HTML (the page refreshes it)."""
    return render(request, "console/_sessions.html", {"sessions": _sessions_page(request)})


@require_GET
@login_required
def session_state(request, session_id: int):
    """Serve where the session stands as HTML data attributes: its active run, its latest run
    and its last journal seq. The chat polls it, so a run started in another tab or through the
    API shows up there.
    """
    session = _or_404(session_get, user=request.user, session_id=session_id)
    latest = runs_of(session).order_by("-number").first()
    state = {
        "active": active_run(session),
        "latest": latest,
        "last_seq": session.next_seq - 1,
    }
    return render(request, "console/_session_state.html", {"state": state})


@require_POST
@login_required
def session_new(request):
    """Open a session with the latest published version of the chosen agent."""
    try:
        agent_id = int(request.POST.get("agent", ""))
    except ValueError:
        raise Http404("Not found.") from None
    agent = _or_404(agent_get, user=request.user, agent_id=agent_id)
    try:
        session = session_create(user=request.user, agent_version=latest_version(agent))
    except NotFound:
        raise Http404("Not found.") from None
    except ApplicationError as error:
        messages.error(request, error.detail)
        return redirect("home")
    return redirect("console-chat", session_id=session.pk)


def _chat_items(session: Session, *, after: int) -> tuple[dict[int, list], int]:
    """Return the chat records of the main instance after `after` by run id, and the last seq.

    A tool result is named after its call even when the call was read before `after`: the
    names are collected from the start of the runs the new records belong to.
    """
    items = list(_all_records(session, after=after, instance=MAIN_INSTANCE))
    call_names: dict[str, str] = {}
    if after and items:
        start = first_seq_of(runs_of(session).filter(pk__in={item["run_id"] for item in items}))
        for item in _all_records(session, after=(start or after) - 1, instance=MAIN_INSTANCE):
            if item["seq"] > after:
                break
            present_record(item, call_names)
    records: dict[int, list] = {}
    for item in items:
        shown = present_record(item, call_names)
        # The question heads its run's block; its journal copy would repeat it.
        if item["kind"] != SessionMessage.Kind.USER_INPUT:
            records.setdefault(item["run_id"], []).append(shown)
    return records, items[-1]["seq"] if items else after


def _tools_text(records: list[dict], *, waiting: bool = False) -> str:
    """Return the run's tool call count, and which one runs (or waits) now or ran last."""
    calls = [call for record in records for call in record.get("tool_calls") or []]
    if not calls:
        return "0"
    answered = sum(1 for record in records if record["kind"] == SessionMessage.Kind.TOOL_RESULT)
    state = "last:" if answered >= len(calls) else "waiting for approval:" if waiting else "running"
    return f"{len(calls)} ({state} {calls[-1]['name']})"


def _summary(run: Run | None, records: list[dict], context: dict[str, Any]) -> dict[str, Any]:
    """Return what the live panel shows of `run`: its own counts, the session's, plan, meter."""
    return {
        "run": run,
        "active": bool(run and run.is_active),
        "thinking": bool(run and run.is_active) and model_call_in_flight(run),
        "counters": _counters(run) if run else None,
        "run_steps": sum(
            1 for record in records if record["kind"] == SessionMessage.Kind.ASSISTANT
        ),
        "tools": _tools_text(records, waiting=run.status == Run.Status.WAITING_APPROVAL)
        if run
        else "–",
        "meter": _meter(context),
        "plan": context.get("plan"),
        "approvals": _approvals(run),
    }


def _approvals(run: Run | None) -> list[dict[str, Any]]:
    """Return the tool calls `run` waits on a decision for, arguments pretty-printed."""
    if run is None or run.status != Run.Status.WAITING_APPROVAL:
        return []
    return [{**item, "arguments": _pretty_arguments(item["arguments"])} for item in undecided(run)]


def _run_records(run: Run) -> list[dict]:
    """Return the run's chat records of the main instance (for its panel)."""
    first = first_seq_of([run])
    if first is None:
        return []
    records, _ = _chat_items(run.session, after=first - 1)
    return records.get(run.pk, [])


@require_GET
@login_required
def chat(request, session_id: int):
    """Show a session as a conversation, with the live controls of its active run.

    The live parts are the same templates served alone: `chat_records` (new records),
    `run_block` (a run's block) and `run_panel` (the run panel), which static/console/console.js
    polls and puts in place.
    """
    session = _or_404(session_get, user=request.user, session_id=session_id)
    shown = list(runs_of(session)[:CHAT_RUNS])
    older = runs_of(session).count() - len(shown)
    after = 0
    if older:
        first = first_seq_of(shown)
        after = (first - 1) if first else session.next_seq - 1
    active = active_run(session)
    records, last_seq = _chat_items(session, after=after)
    # A run resumed after newer runs, or an active one, is shown even when it is older.
    extra = (set(records) | {active.pk if active else None}) - {run.pk for run in shown} - {None}
    runs = sorted([*shown, *runs_of(session).filter(pk__in=extra)], key=lambda run: run.number)
    blocks = [
        {"run": run, "records": _with_marks(records.get(run.pk, []), compaction_marks(run))}
        for run in runs
    ]

    focus = active or (runs[-1] if runs else None)
    # Before the first run the meter is drawn empty; the script fills it once a run starts.
    limits = _input_limit(session)
    context = run_context(focus) if focus else {**EMPTY_CONTEXT, "estimator": limits["inputUnit"]}
    config = {
        "session": session.pk,
        "activeRun": active.pk if active else None,
        "lastSeq": last_seq,
        **_fragment_urls(),
        **limits,
    }
    return render(
        request,
        "console/chat.html",
        {
            "session": session,
            "binding": _binding(session),
            "blocks": blocks,
            "older_runs": older,
            "active": active,
            "focus": focus,
            "summary": _summary(focus, records.get(focus.pk, []) if focus else [], context),
            "config": config,
        },
    )


def _fragment_urls() -> dict[str, str]:
    # The script fills in ids; the routes themselves stay defined in console_urls only.
    return {
        "recordsUrl": reverse("console-chat-records", args=[0]).replace("/0/", "/{id}/"),
        "stateUrl": reverse("console-session-state", args=[0]).replace("/0/", "/{id}/"),
        "blockUrl": reverse("console-run-block", args=[0]).replace("/0/", "/{id}/"),
        "panelUrl": reverse("console-run-panel", args=[0]).replace("/0/", "/{id}/"),
        "contextUrl": _context_url_template(),
    }


def _after(request) -> int:
    """Return the `after` query parameter: a seq, 0 when missing; a bad one is a 404."""
    try:
        return QueryPositionField().run_validation(request.GET.get("after", "0"))
    except ValidationError:
        raise Http404("Not found.") from None


@require_GET
@login_required
def chat_records(request, session_id: int):
    """Serve the chat records after `?after=` as HTML, grouped by run, with the compaction marks
    of those runs and of `?run=`; the `X-Last-Seq` header says how far they go.
    """
    session = _or_404(session_get, user=request.user, session_id=session_id)
    records, last_seq = _chat_items(session, after=_after(request))
    run_ids = set(records)
    if request.GET.get("run", "").isdigit():
        run_ids.add(int(request.GET["run"]))
    runs = {run.pk: run for run in runs_of(session).filter(pk__in=run_ids)}
    groups = [{"run": runs[pk], "records": records[pk]} for pk in records if pk in runs]
    marks = [
        {"run": run, "marks": [{"kind": "compaction", **mark} for mark in compaction_marks(run)]}
        for run in runs.values()
    ]
    response = render(
        request, "console/_chat_records.html", {"groups": groups, "mark_groups": marks}
    )
    response["X-Last-Seq"] = str(last_seq)
    return response


@require_GET
@login_required
def run_block(request, run_id: int):
    """Serve a run's block of the chat (head, question, records and marks) as HTML."""
    run = _or_404(run_get, user=request.user, run_id=run_id)
    block = {"run": run, "records": _with_marks(_run_records(run), compaction_marks(run))}
    return render(request, "console/_run_block.html", {"block": block})


@require_GET
@login_required
def run_panel(request, run_id: int):
    """Serve the chat's run panel of `run` as HTML: status, counts, plan and meter."""
    run = _or_404(run_get, user=request.user, run_id=run_id)
    summary = _summary(run, _run_records(run), run_context(run))
    return render(request, "console/_live_summary.html", {"summary": summary})


@require_GET
@login_required
def run_meter(request, run_id: int):
    """Serve a run's context meter as HTML (the Context page polls it while the run is active)."""
    run = _or_404(run_get, user=request.user, run_id=run_id)
    return render(request, "console/_meter.html", {"meter": _meter(run_context(run))})


@require_POST
@login_required
def revoke_view(request, session_id: int, revision: int):
    """Revoke a reusable view from the Context page, then return to it."""
    try:
        session = session_for_revocation(user=request.user, session_id=session_id)
        view = view_revoke(user=request.user, session=session, revision=revision)
    except NotFound:
        raise Http404("Not found.") from None
    except ApplicationError as error:
        messages.error(request, error.detail)
    else:
        messages.success(request, f"View r{view.revision} revoked: new runs no longer use it.")
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = reverse("console-chat", args=[session_id])
    return redirect(target)


@require_POST
@login_required
def ask(request, session_id: int):
    """Ask a question from the plain form (the script uses the REST API instead)."""
    session = _or_404(session_get, user=request.user, session_id=session_id)
    try:
        run_ask(user=request.user, session=session, question=request.POST.get("question", ""))
    except NotFound:
        raise Http404("Not found.") from None
    except ApplicationError as error:
        messages.error(request, error.detail)
    return redirect("console-chat", session_id=session.pk)


@require_POST
@login_required
def rename(request, session_id: int):
    """Rename one of the caller's sessions, then return to its chat."""
    session = _or_404(session_get, user=request.user, session_id=session_id)
    try:
        session_rename(user=request.user, session=session, title=request.POST.get("title", ""))
    except NotFound:
        raise Http404("Not found.") from None
    except ApplicationError as error:
        messages.error(request, f"Not renamed: {error.detail}")
    else:
        messages.success(request, f"Renamed to “{session}”.")
    return redirect("console-chat", session_id=session.pk)


@require_POST
@login_required
def delete(request, session_id: int):
    """Delete a session through the soft-delete service, then go to the console home."""
    try:
        session = session_for_deletion(user=request.user, session_id=session_id)
        session_delete(user=request.user, session=session)
    except NotFound:
        raise Http404("Not found.") from None
    except PermissionDenied as error:
        raise DjangoPermissionDenied(error.detail) from None
    except ApplicationError as error:
        messages.error(request, f"Not deleted: {error.detail}")
        return redirect("console-chat", session_id=session_id)
    messages.success(request, f"Deleted “{session}”.")
    return redirect("home")


def _names_before(session: Session, items: list[dict], *, after: int, instance) -> dict:
    """Return the tool call names that `items` (read after `after`) may refer to: those of
    their runs' records up to `after`, so a result is named after a call read earlier.
    """
    call_names: dict[str, str] = {}
    if not (after and items):
        return call_names
    start = first_seq_of(runs_of(session).filter(pk__in={item["run_id"] for item in items}))
    for item in _all_records(session, after=(start or after) - 1, instance=instance):
        if item["seq"] > after:
            break
        present_record(item, call_names)
    return call_names


def _journal_query(request) -> tuple[dict[str, Any], bool]:
    query = JournalQuerySerializer(
        data={"limit": JOURNAL_PAGE, **{key: request.GET[key] for key in request.GET}}
    )
    invalid = not query.is_valid()
    return (query.validated_data if not invalid else {"after": 0, "limit": JOURNAL_PAGE}), invalid


def _journal_records(session: Session, params: dict, *, previous_run: int | None) -> dict:
    """Return a page of the journal as the timeline shows it: records with their runs, each
    marked `boundary` where a new run starts (after `previous_run`, the run shown last).
    """
    instance = params.get("instance")
    # One record more than the page tells whether "Load more" has anything to load.
    items = journal_page(
        session=session, after=params["after"], limit=params["limit"] + 1, instance=instance
    )["items"]
    has_more = len(items) > params["limit"]
    items = items[: params["limit"]]
    call_names = _names_before(session, items, after=params["after"], instance=instance)
    records = [present_record(item, call_names) for item in items]
    runs = {run.pk: run for run in runs_of(session)}
    for record in records:
        record["run"] = runs.get(record["run_id"])
        record["boundary"] = record["run_id"] != previous_run
        previous_run = record["run_id"]
    next_after = items[-1]["seq"] if items else params["after"]
    return {"records": records, "has_more": has_more, "next_after": next_after}


@require_GET
@login_required
def journal(request, session_id: int):
    """Show the session journal as a timeline in seq order, filterable by instance."""
    session = _or_404(session_get, user=request.user, session_id=session_id)
    params, invalid = _journal_query(request)
    instance = params.get("instance")
    page = _journal_records(session, params, previous_run=None)
    config = {
        "session": session.pk,
        "rowsUrl": reverse("console-journal-rows", args=[session.pk]),
        "instance": instance,
        "limit": params["limit"],
        "nextAfter": page["next_after"],
        "lastRun": page["records"][-1]["run_id"] if page["records"] else None,
        "stateUrl": reverse("console-session-state", args=[session.pk]),
        "sessionSeq": session.next_seq - 1,
    }
    return render(
        request,
        "console/journal.html",
        {
            "session": session,
            "binding": _binding(session),
            **page,
            "instances": instances_of(session),
            "instance": instance,
            "invalid_query": invalid,
            "after": params["after"],
            "limit": params["limit"],
            "focus": runs_of(session).first(),
            "config": config,
        },
    )


@require_GET
@login_required
def journal_rows(request, session_id: int):
    """Serve the journal rows after `?after=` as HTML (the viewer's "Load more"); `?run=` is the
    run of the row shown last. Headers say where the page ends (`X-Next-After`) and whether
    more follows (`X-Has-More`). A filter that is not valid answers 400.
    """
    session = _or_404(session_get, user=request.user, session_id=session_id)
    params, invalid = _journal_query(request)
    if invalid:
        return HttpResponseBadRequest("That filter is not valid.")
    previous = request.GET.get("run", "")
    page = _journal_records(
        session, params, previous_run=int(previous) if previous.isdigit() else None
    )
    response = render(request, "console/_journal_rows.html", {"records": page["records"]})
    response["X-Next-After"] = str(page["next_after"])
    response["X-Has-More"] = "true" if page["has_more"] else "false"
    return response


@require_GET
@login_required
def run_context_page(request, run_id: int):
    """Show what the model sees in a run, how it measures against the budget, and its history."""
    run = _or_404(run_get, user=request.user, run_id=run_id)
    session = run.session
    context = run_context(run)
    call_names: dict[str, str] = {}
    view = []
    for index, message in enumerate(context["messages"], start=1):
        shown = present_record({"kind": "view", "message": message}, call_names)
        shown.update(
            index=index,
            role=message.get("role", ""),
            tool_call_id=message.get("tool_call_id"),
            long=shown["chars"] > LONG_MESSAGE_CHARS,
        )
        view.append(shown)
    calls = list(model_calls_of(run))
    run_numbers = dict(runs_of(session).values_list("pk", "number"))
    derivations = view_derivations(session.pk)
    views = [
        {
            "view": item,
            "run_number": run_numbers.get(item.run_id),
            "revoked_ancestor": derivations[item.revision].revoked_ancestor,
        }
        for item in views_of(session)
    ]
    config = {
        "session": session.pk,
        "activeRun": run.pk if run.is_active else None,
        "meterUrl": reverse("console-run-meter", args=[run.pk]),
        "compactions": len(context["compactions"]),
        "run": run.pk,
        "stateUrl": reverse("console-session-state", args=[session.pk]),
        "sessionSeq": session.next_seq - 1,
        "contextUrl": _context_url_template(),
    }
    return render(
        request,
        "console/context.html",
        {
            "session": session,
            "run": run,
            "binding": _binding(session),
            "counters": _counters(run),
            "meter": _meter(context),
            "view": view,
            "compactions": context["compactions"],
            "views": views,
            "model_calls": [
                {
                    "call": call,
                    "usage": _usage_text(call.usage),
                    "error": _signed_percent(call.estimate_error),
                    "cached": _cached_text(call),
                    "cost": _call_cost_text(call),
                }
                for call in calls
            ],
            "cached_share": _cached_share(calls),
            "run_cost": _summary_text(cost_summary(calls)),
            "session_cost": _summary_text(session_cost(session)),
            "config": config,
        },
    )
