"""README's "first two minutes", line by line, in one session of the shipped Demo agent.

The lines are read from README.md, so README and the Demo agent cannot drift apart: every line
must work through the real services, the demo model and the demo tools, and plain questions
asked afterwards must be answered.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from agentloom.engine import JsonBytesEstimator, ModelBudget, message_text
from agentloom.engine._protocol import render_message
from sessions_app import demo
from sessions_app.demo import DEMO_AGENT_NAME, DEMO_SUB_AGENTS, DEMO_TOOLS, ensure_demo
from sessions_app.models import Run
from sessions_app.services.execution import run_execute
from sessions_app.services.runs import run_ask, run_cancel, session_create, supplement_add

README = Path(__file__).resolve().parents[2] / "README.md"


def walkthrough_lines() -> list[str]:
    """Return the `/tool …` lines of README's walkthrough, in order."""
    text = README.read_text(encoding="utf-8")
    section = text.split("### The first two minutes", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\s+- `(/tool [^`]+)`", section, flags=re.MULTILINE)


def walkthrough_steps() -> list[tuple[str, str]]:
    """Return (line, what happens during its model call) in README's order.

    The sleep line is asked twice, once with a supplement and once with Cancel, and the
    big_output line four times, as README says.
    """
    steps = []
    for line in walkthrough_lines():
        if line.startswith("/tool sleep"):
            # One second instead of five: the test has no one to press a button.
            short = line.replace('"seconds": 5', '"seconds": 1')
            steps += [(short, "supplement"), (line, "cancel")]
        elif line.startswith("/tool big_output"):
            steps += [(line, "")] * 4
        else:
            steps.append((line, ""))
    return steps


def demo_session(user):
    space = ensure_demo(owner=user)
    version = space.agents.get(name=DEMO_AGENT_NAME).versions.order_by("-number").first()
    return session_create(user=user, agent_version=version)


def test_the_walkthrough_reads_every_tool_of_the_demo_agent():
    names = {line.split()[1] for line in walkthrough_lines()}
    assert {"calculator", "echo", "sleep", "update_plan", "fail", "big_output"} <= names
    offered = {*DEMO_TOOLS, *(f"delegate_{sub['name']}" for sub in DEMO_SUB_AGENTS)}
    assert names <= offered, "every line of README's walkthrough names a tool the agent has"


def test_readme_walkthrough_in_one_session_of_the_demo_agent(alice, gateway):
    session = demo_session(alice)
    outcomes, answers = [], {}
    for line, during in walkthrough_steps():
        run = run_ask(user=alice, session=session, question=line)
        if during == "supplement":
            gateway.during_call.append(
                lambda run=run: supplement_add(
                    user=alice, run=Run.objects.get(pk=run.pk), text="NONCE-SUPPLEMENT also this"
                )
            )
        elif during == "cancel":
            gateway.during_call.append(
                lambda run=run: run_cancel(user=alice, run=Run.objects.get(pk=run.pk))
            )
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        outcomes.append((line, run.status, run.error))
        answers[line] = run.answer
    for number in range(1, 6):
        run = run_ask(user=alice, session=session, question=f"What was NONCE-{number}?")
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        outcomes.append((run.question, run.status, run.error))

    expected = [
        (line, "cancelled" if during == "cancel" else "succeeded")
        for line, during in walkthrough_steps()
    ] + [(f"What was NONCE-{n}?", "succeeded") for n in range(1, 6)]
    assert [(line, status) for line, status, _ in outcomes] == expected, [
        o for o in outcomes if o[1] == "failed"
    ]
    # The big_output lines show a compaction, as README says, and no request the provider saw
    # was over the effective budget.
    assert any(r.purpose == "compaction" for r in gateway.requests)
    effective = session.agent_version.snapshot["budget"]
    budget = ModelBudget.from_dict(effective).effective_input_budget
    for request in gateway.requests:
        assert JsonBytesEstimator().upper_bound(request.messages, request.tools) <= budget
    # The sub-agent's finding is the delegation's answer, even when the run was compacted
    # after it: never a dump of summary lines.
    [delegation] = [line for line in answers if "delegate_researcher" in line]
    assert "- delegate_researcher:" in answers[delegation], answers[delegation]
    assert "echo: hi" in answers[delegation] and "[run note]" not in answers[delegation]
    # The identifier README asks the agent to remember outlives every compaction: the last
    # handoff summary the model was shown keeps it, verbatim or in its kept section.
    summaries = [
        message_text(m)
        for request in gateway.requests
        if request.purpose == "action"
        for m in request.messages
        if message_text(m).startswith("[handoff summary]")
    ]
    assert summaries and "NONCE-42" in summaries[-1], summaries[-1]
    # The search line finds the record that stated it, by its journal reference.
    [search] = [run for run in session.runs.all() if run.question.startswith("/tool search_h")]
    found = session.messages.filter(run=search, kind="tool_result").get().message
    assert re.search(
        r"\[s:\d+\] (tool_result|assistant|user_input), run \d+: .*NONCE-42 remember me",
        found["content"],
    ), found
    # Every summary of the demo model is made of lines of what it summarised (a long line in
    # pieces of at most 300 characters).
    for request, reply in gateway.exchanges("compaction"):
        # The messages as the summary request shows them (a request on the conversation's
        # prefix gives the messages themselves, tool calls included).
        given = {line.strip() for m in request.messages for line in render_message(m).splitlines()}
        body = [line for line in message_text(reply.message).splitlines()[1:] if line]
        invented = [line for line in body if not any(line in whole for whole in given)]
        assert invented == []


def test_summarised_ranges_include_what_an_inherited_summary_stood_for(alice, gateway):
    from rest_framework.test import APIClient

    session = demo_session(alice)
    api = APIClient()
    api.force_authenticate(alice)
    summaries = []  # (run number, session seqs its summary replaced), in order
    for n in range(10):
        run = run_ask(user=alice, session=session, question='/tool big_output {"chars": 1500}')
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        assert run.status == "succeeded", run.error
        for item in api.get(f"/api/v1/runs/{run.pk}/context").json()["compactions"]:
            if item["stage"] == "summary" and item["outcome"] == "succeeded":
                ranges = item["summarised_ranges"]
                summaries.append((n, {s for a, b in ranges for s in range(a, b + 1)}))
    across = [
        (earlier, later)
        for (run_a, earlier), (run_b, later) in itertools.pairwise(summaries)
        if run_b > run_a
    ]
    assert across, "a later run summarised the summary it inherited"
    for earlier, later in across:
        # Each summary updates the one before it, so it stands for all that one stood for.
        assert earlier <= later, sorted(earlier - later)


def test_a_delegation_compacted_after_its_result_answers_with_the_sub_agents_finding(
    alice, gateway, monkeypatch
):
    # README's lines, no supplement sent, then the delegation line again after one more large
    # result until a delegation's own run is compacted right after the sub-agent reports (where
    # that happens depends on the window's arithmetic), so that its answer comes from the
    # handoff summary. On the demo's earlier 8,192 window a compaction there takes in the
    # question's own progress; on a larger one the progress fits beside the summary.
    monkeypatch.setattr(demo, "DEMO_CONTEXT_WINDOW", 8_192)
    session = demo_session(alice)
    steps = walkthrough_steps()
    delegation = steps[-1][0]
    assert "delegate_researcher" in delegation
    for chars in range(40, 1000, 60):
        steps += [(f'/tool echo {{"text": "{"x" * chars}"}}', ""), (delegation, "")]
    for line, during in steps:
        run = run_ask(user=alice, session=session, question=line)
        if during == "cancel":
            gateway.during_call.append(
                lambda run=run: run_cancel(user=alice, run=Run.objects.get(pk=run.pk))
            )
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        purposes = [r.purpose for r in gateway.requests[-4:]]
        if line == delegation and purposes == ["action", "action", "compaction", "action"]:
            break
    assert line == delegation and run.status == "succeeded"
    assert purposes == ["action", "action", "compaction", "action"], purposes
    assert run.answer == (
        "[local demo model] Based on the tool results (from the compacted progress on this "
        "question):\n- delegate_researcher: - echo: hi"
    )
