"""The console's fragments: the parts of a page that static/console/console.js fetches alone.

Each fragment's content is built here by one function, which the full page that shows it calls
too (`pages`), so a record, a run's block, the run panel, the meter or a journal row is rendered
from one template whether it comes with the page or later.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponseBadRequest
from django.shortcuts import render
from django.views.decorators.http import require_GET

from agentloom.engine import ToolError
from agentloom.errors import NotFound
from sessions_app.console.errors import console_errors
from sessions_app.console.forms import ChatRecordsQuery, journal_filters
from sessions_app.console.presenters import (
    journal_row,
    meter,
    present_record,
    pretty_arguments,
    tools_text,
    with_marks,
)
from sessions_app.models import MAIN_INSTANCE, Run, Session, SessionMessage
from sessions_app.selectors.approvals import undecided
from sessions_app.selectors.context import compaction_marks, run_context
from sessions_app.selectors.journal import JOURNAL_ITEM_FIELDS, JOURNAL_LIMIT_MAX, journal_page
from sessions_app.selectors.questions import unanswered
from sessions_app.selectors.runs import (
    active_run,
    first_seq_of,
    model_call_in_flight,
    run_counters,
    run_get,
    runs_of,
)
from sessions_app.selectors.search import journal_search
from sessions_app.selectors.sessions import session_get, session_list

SESSIONS_PER_PAGE = 25


# --- content -------------------------------------------------------------------------------------


def sessions_page(request):
    """Return the page of the caller's sessions that `?page=` asks for."""
    sessions = session_list(request.user)
    return Paginator(sessions, SESSIONS_PER_PAGE).get_page(request.GET.get("page"))


def _all_records(
    session: Session, *, after: int, instance: str | None, upto: int | None = None
) -> Iterator[dict]:
    """Yield the session's journal items after `after` (up to seq `upto`), page by page through
    `journal_page`; seqs are unique, so a page never reads past `upto`."""
    while upto is None or after < upto:
        limit = JOURNAL_LIMIT_MAX if upto is None else min(JOURNAL_LIMIT_MAX, upto - after)
        page = journal_page(session=session, after=after, limit=limit, instance=instance)
        yield from (item for item in page["items"] if upto is None or item["seq"] <= upto)
        if len(page["items"]) < limit:
            return
        after = page["next_after"]


def _names_before(session: Session, items: list[dict], *, after: int, instance) -> dict:
    """Return the tool call names that `items` (read after `after`) may refer to: those of
    their runs' records up to `after`, so a result is named after a call read earlier.
    """
    call_names: dict[str, str] = {}
    if not (after and items):
        return call_names
    runs = runs_of(session).filter(pk__in={item["run_id"] for item in items}).only("pk")
    start = first_seq_of(runs)
    for item in _all_records(session, after=(start or after) - 1, instance=instance, upto=after):
        present_record(item, call_names)
    return call_names


def chat_items(session: Session, *, after: int) -> tuple[dict[int, list], int]:
    """Return the chat records of the main instance after `after` by run id, and the last seq.

    A tool result is named after its call even when the call was read before `after`: the
    names are collected from the start of the runs the new records belong to.
    """
    items = list(_all_records(session, after=after, instance=MAIN_INSTANCE))
    call_names = _names_before(session, items, after=after, instance=MAIN_INSTANCE)
    records: dict[int, list] = {}
    for item in items:
        shown = present_record(item, call_names)
        # The question heads its run's block; its journal copy would repeat it.
        if item["kind"] != SessionMessage.Kind.USER_INPUT:
            records.setdefault(item["run_id"], []).append(shown)
    return records, items[-1]["seq"] if items else after


def run_records(run: Run) -> list[dict]:
    """Return the run's chat records of the main instance (for its panel)."""
    first = first_seq_of([run])
    if first is None:
        return []
    records, _ = chat_items(run.session, after=first - 1)
    return records.get(run.pk, [])


def counters(run: Run) -> dict[str, int]:
    """Return the run's counters, with the model steps since its last compaction."""
    counts = run_counters(run)
    counts["steps_since_compaction"] = counts["model_steps"] - counts["baseline_model_steps"]
    return counts


def run_summary(run: Run | None, records: list[dict], context: dict[str, Any]) -> dict[str, Any]:
    """Return what the live panel shows of `run`: its own counts, the session's, plan, meter."""
    return {
        "run": run,
        "active": bool(run and run.is_active),
        "thinking": bool(run and run.is_active) and model_call_in_flight(run),
        "counters": counters(run) if run else None,
        "run_steps": sum(
            1 for record in records if record["kind"] == SessionMessage.Kind.ASSISTANT
        ),
        "tools": tools_text(records, waiting=_WAITING_FOR.get(run.status, "")) if run else "–",
        "meter": meter(context),
        "plan": context.get("plan"),
        "approvals": _approvals(run),
        "questions": unanswered(run) if run is not None else [],
    }


_WAITING_FOR = {Run.Status.WAITING_APPROVAL: "approval", Run.Status.WAITING_INPUT: "answers"}


def _approvals(run: Run | None) -> list[dict[str, Any]]:
    """Return the tool calls `run` waits on a decision for, arguments pretty-printed."""
    if run is None or run.status != Run.Status.WAITING_APPROVAL:
        return []
    return [{**item, "arguments": pretty_arguments(item["arguments"])} for item in undecided(run)]


def journal_records(session: Session, params: dict, *, previous_run: int | None) -> dict:
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
    records = [journal_row(present_record(item, call_names)) for item in items]
    # The runs of this page only, their number and status: a page's cost never grows with the
    # session's runs.
    runs = runs_of(session).filter(pk__in={item["run_id"] for item in items})
    runs = {run.pk: run for run in runs.only("pk", "number", "status")}
    for record in records:
        record["run"] = runs.get(record["run_id"])
        record["boundary"] = record["run_id"] != previous_run
        previous_run = record["run_id"]
    next_after = items[-1]["seq"] if items else params["after"]
    return {"records": records, "has_more": has_more, "next_after": next_after}


def search_records(session: Session, text: str, *, instance: str | None) -> dict:
    """Return the journal records that best match `text`, best first, as the timeline shows
    them (each under its run's heading), or `search_error` when `text` has nothing to find."""
    try:
        items = journal_search(session.pk, text, instance=instance)
    except ToolError as error:
        return {"records": [], "search_error": str(error)}
    # A result is named after its call: the calls of the hits' runs, read up to the last hit.
    call_names: dict[str, str] = {}
    run_ids = {item["run_id"] for item in items}
    if any(item["kind"] == SessionMessage.Kind.TOOL_RESULT for item in items):
        calls = SessionMessage.objects.filter(
            session=session, run_id__in=run_ids, kind=SessionMessage.Kind.ASSISTANT
        ).values(*JOURNAL_ITEM_FIELDS)
        for item in calls:
            present_record(item, call_names)
    runs = runs_of(session).filter(pk__in=run_ids).only("pk", "number", "status")
    runs = {run.pk: run for run in runs}
    records = [journal_row(present_record(item, call_names)) for item in items]
    for record in records:
        record["run"] = runs.get(record["run_id"])
        record["boundary"] = True
    return {"records": records, "search_error": None}


# --- fragments -----------------------------------------------------------------------------------


@require_GET
@login_required
@console_errors()
def home_sessions(request):
    """Serve the home page's table of the caller's sessions as HTML (the page refreshes it)."""
    return render(request, "console/_sessions.html", {"sessions": sessions_page(request)})


@require_GET
@login_required
@console_errors()
def session_state(request, session_id: int):
    """Serve where the session stands as HTML data attributes: its active run, its latest run
    and its last journal seq. The chat polls it, so a run started in another tab or through the
    API shows up there.
    """
    session = session_get(user=request.user, session_id=session_id)
    latest = runs_of(session).order_by("-number").first()
    state = {
        "active": active_run(session),
        "latest": latest,
        "last_seq": session.next_seq - 1,
    }
    return render(request, "console/_session_state.html", {"state": state})


@require_GET
@login_required
@console_errors()
def chat_records(request, session_id: int):
    """Serve the chat records after `?after=` as HTML, grouped by run, with the compaction marks
    of those runs and of `?run=`; the `X-Last-Seq` header says how far they go. An `after` that
    is not a position answers 404.
    """
    session = session_get(user=request.user, session_id=session_id)
    query = ChatRecordsQuery(request.GET)
    if not query.is_valid():
        raise NotFound("Not found.")
    records, last_seq = chat_items(session, after=query.cleaned_data["after"])
    run_ids = set(records)
    if query.cleaned_data["run"] is not None:
        run_ids.add(query.cleaned_data["run"])
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
@console_errors()
def run_block(request, run_id: int):
    """Serve a run's block of the chat (head, question, records and marks) as HTML."""
    run = run_get(user=request.user, run_id=run_id)
    block = {"run": run, "records": with_marks(run_records(run), compaction_marks(run))}
    return render(request, "console/_run_block.html", {"block": block})


@require_GET
@login_required
@console_errors()
def run_panel(request, run_id: int):
    """Serve the chat's run panel of `run` as HTML: status, counts, plan and meter."""
    run = run_get(user=request.user, run_id=run_id)
    summary = run_summary(run, run_records(run), run_context(run))
    return render(request, "console/_live_summary.html", {"summary": summary})


@require_GET
@login_required
@console_errors()
def run_meter(request, run_id: int):
    """Serve a run's context meter as HTML (the Context page polls it while the run is active)."""
    run = run_get(user=request.user, run_id=run_id)
    return render(request, "console/_meter.html", {"meter": meter(run_context(run))})


@require_GET
@login_required
@console_errors()
def journal_rows(request, session_id: int):
    """Serve the journal rows after `?after=` as HTML (the viewer's "Load more"); `?run=` is the
    run of the row shown last. Headers say where the page ends (`X-Next-After`) and whether
    more follows (`X-Has-More`). A filter that is not valid answers 400.
    """
    session = session_get(user=request.user, session_id=session_id)
    params, invalid = journal_filters(request.GET)
    if invalid:
        return HttpResponseBadRequest("That filter is not valid.")
    page = journal_records(session, params, previous_run=params["run"])
    response = render(
        request, "console/_journal_rows.html", {"records": page["records"], "session": session}
    )
    response["X-Next-After"] = str(page["next_after"])
    response["X-Has-More"] = "true" if page["has_more"] else "false"
    return response
