"""The console's full pages: the start page, a session's chat, its journal and a run's context.

A page shows its live parts through the same builders and templates its fragments serve alone
(`fragments`), and hands the script their addresses in its `config`.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from agentloom.spaces.models import Membership
from agentloom.spaces.selectors import space_role, spaces_for_user
from context_app.engine_adapter import estimator_name, input_check
from context_app.selectors import agents_for_user, draft_changes, latest_versions
from models_app.models import ModelConnection
from sessions_app.console.errors import console_errors
from sessions_app.console.forms import BLANK_QUESTION, journal_filters
from sessions_app.console.fragments import (
    chat_items,
    counters,
    journal_records,
    run_summary,
    search_records,
    sessions_page,
)
from sessions_app.console.presenters import (
    binding,
    cached_share,
    cached_share_chart,
    compaction_money,
    cost_summary_text,
    meter,
    model_call,
    view_messages,
    with_marks,
)
from sessions_app.models import Session
from sessions_app.selectors.context import compaction_marks, run_context
from sessions_app.selectors.costs import cached_share_by_run, cost_summary, session_cost
from sessions_app.selectors.runs import active_run, first_seq_of, model_calls_of, run_get, runs_of
from sessions_app.selectors.sessions import instances_of, session_get
from sessions_app.selectors.views import view_derivations, views_of
from sessions_app.services.runs import MAX_QUESTION_CHARS
from sessions_app.templatetags.console_text import meter_unit

# The chat shows the latest runs in full; older ones are read in the journal viewer.
CHAT_RUNS = 20
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


def _input_limit(session: Session) -> dict[str, Any]:
    """Return the largest question the session's version takes, how the page counts it, and
    what the page says of a blank one."""
    version = session.agent_version
    return {
        "inputLimit": input_check(version, "", session.pinned).limit,
        # The page counts bytes exactly as the byte estimator does; tokens only approximately.
        "inputUnit": estimator_name((version.snapshot.get("estimator") or {}).get("module_id")),
        "inputLegacy": version.snapshot.get("context_policy") is None,
        # The service's own ceiling in characters, whatever the estimator says.
        "questionMaxChars": MAX_QUESTION_CHARS,
        # Said at the door too: a question of nothing but spaces is not sent.
        "blankQuestion": BLANK_QUESTION,
    }


def _context_url_template() -> str:
    # The script fills in run ids; the route itself stays defined in the console's urls only.
    return reverse("console-run-context", args=[0]).replace("/0/", "/{id}/")


def _fragment_urls() -> dict[str, str]:
    # The script fills in ids; the routes themselves stay defined in the console's urls only.
    return {
        "recordsUrl": reverse("console-chat-records", args=[0]).replace("/0/", "/{id}/"),
        "stateUrl": reverse("console-session-state", args=[0]).replace("/0/", "/{id}/"),
        "blockUrl": reverse("console-run-block", args=[0]).replace("/0/", "/{id}/"),
        "panelUrl": reverse("console-run-panel", args=[0]).replace("/0/", "/{id}/"),
        "contextUrl": _context_url_template(),
    }


@require_GET
@login_required
@console_errors()
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
        {"spaces": spaces, "sessions": sessions_page(request), "config": config},
    )


@require_GET
@login_required
@console_errors()
def chat(request, session_id: int):
    """Show a session as a conversation, with the live controls of its active run.

    The live parts are the same templates served alone: `chat_records` (new records),
    `run_block` (a run's block) and `run_panel` (the run panel), which static/console/console.js
    polls and puts in place.
    """
    session = session_get(user=request.user, session_id=session_id)
    shown = list(runs_of(session)[:CHAT_RUNS])
    older = runs_of(session).count() - len(shown)
    after = 0
    if older:
        first = first_seq_of(shown)
        after = (first - 1) if first else session.next_seq - 1
    active = active_run(session)
    records, last_seq = chat_items(session, after=after)
    # A run resumed after newer runs, or an active one, is shown even when it is older.
    extra = (set(records) | {active.pk if active else None}) - {run.pk for run in shown} - {None}
    runs = sorted([*shown, *runs_of(session).filter(pk__in=extra)], key=lambda run: run.number)
    blocks = [
        {"run": run, "records": with_marks(records.get(run.pk, []), compaction_marks(run))}
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
            "binding": binding(session),
            # Only a space admin places or releases a legal hold.
            "space_admin": space_role(request.user, session.space_id) == Membership.Role.ADMIN,
            "blocks": blocks,
            "older_runs": older,
            "active": active,
            "focus": focus,
            "summary": run_summary(focus, records.get(focus.pk, []) if focus else [], context),
            "config": config,
        },
    )


@require_GET
@login_required
@console_errors()
def journal(request, session_id: int):
    """Show the session journal as a timeline in seq order, filterable by instance."""
    session = session_get(user=request.user, session_id=session_id)
    params, invalid = journal_filters(request.GET)
    instance = params.get("instance")
    searched = params.get("q") or ""
    if searched:
        page = {
            "has_more": False,
            "next_after": 0,
            **search_records(session, searched, instance=instance),
        }
    else:
        page = journal_records(session, params, previous_run=None)
    config = {
        "session": session.pk,
        "rowsUrl": reverse("console-journal-rows", args=[session.pk]),
        "instance": instance,
        "limit": params["limit"],
        "nextAfter": page["next_after"],
        "lastRun": page["records"][-1]["run_id"] if page["records"] else None,
        "stateUrl": reverse("console-session-state", args=[session.pk]),
        "sessionSeq": session.next_seq - 1,
        "searched": bool(searched),
    }
    return render(
        request,
        "console/journal.html",
        {
            "session": session,
            "binding": binding(session),
            **page,
            "instances": instances_of(session),
            "instance": instance,
            "invalid_query": invalid,
            "searched": searched,
            "after": params["after"],
            "limit": params["limit"],
            # The link to its Context page needs the latest run's id and number only.
            "focus": runs_of(session).only("pk", "number", "session_id").first(),
            "config": config,
        },
    )


@require_GET
@login_required
@console_errors()
def run_context_page(request, run_id: int):
    """Show what the model sees in a run, how it measures against the budget, and its history."""
    run = run_get(user=request.user, run_id=run_id)
    session = run.session
    context = run_context(run, costs=True)
    shown = meter(context)
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
            "binding": binding(session),
            "counters": counters(run),
            "meter": shown,
            "view": view_messages(context["messages"]),
            "compactions": compaction_money(context["compactions"], meter_unit(shown)),
            "cache_chart": cached_share_chart(cached_share_by_run(session)),
            "views": views,
            "model_calls": [model_call(call) for call in calls],
            "cached_share": cached_share(calls),
            "run_cost": cost_summary_text(cost_summary(calls)),
            "session_cost": cost_summary_text(session_cost(session)),
            "config": config,
        },
    )
