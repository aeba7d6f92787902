"""Rendering 5: a new run's first request starts with the last request of the run before it.

Byte for byte, tools included: the history a new run inherits shows every message the previous
run last sent exactly as it was sent (call ids, excerpts and their references, notes, the
decisions of approvals, a sub-agent's answer), and its new material only after it. Under
rendering 4 an excerpt's reference changed form at the boundary (`r1:4` in the run, `s:4` in the
history after it), and a run's state could be merged into the note shown before it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from agentloom.engine import (
    WAITING_APPROVAL,
    Decision,
    EngineConfig,
    GatewayError,
    JournalRecord,
    JsonBytesEstimator,
    ModelBudget,
    ModelRequest,
    project_history,
)
from agentloom.engine.testing import (
    MemoryJournal,
    ScriptedGateway,
    text_response,
    tool_call_response,
)
from tests.engine.helpers import Recorder, assert_openai_valid, make_engine
from tests.engine.test_approval import Transfer
from tests.engine.test_engine import RESEARCHER

BUDGET = ModelBudget(16_384, 1_024, 256)
LARGE = {"share": 0.1}
BINDING = {
    "budget": BUDGET.to_dict(),
    "estimator": JsonBytesEstimator().binding(),
    "large_records": LARGE,
}
UPSTREAM = GatewayError("upstream", "The provider failed to answer.")
_REF = re.compile(r'read_record\(ref="([^"]+)"(?:, offset=(\d+))?\)')


class Session:
    """Runs questions one after another on one journal, each with the history it inherits."""

    def __init__(self, rendering: int, tools: tuple[Any, ...] = ("big_output", "echo")):
        self.rendering = rendering
        self.tools = tools
        self.journal = MemoryJournal()
        self.gateways: list[ScriptedGateway] = []
        self.engines: list[Any] = []

    def ask(self, *replies: Any, question: str = "q", **options: Any) -> Any:
        number = len(self.gateways) + 1
        recorder = Recorder(journal=self.journal, run_id=number)
        gateway = ScriptedGateway(replies, validate=assert_openai_valid)
        engine = make_engine(
            gateway,
            tools=self.tools,
            budget=BUDGET,
            recorder=recorder,
            large_records=LARGE,
            rendering=self.rendering,
            config=EngineConfig(record_store=recorder.store()),
            **options,
        )
        self.gateways.append(gateway)
        self.engines.append(engine)
        history = self.journal.history(binding=BINDING, rendering=self.rendering)
        return engine.start(
            run_number=number,
            attempt=1,
            system_prompt="sys",
            question=f"{question} {number}",
            history=history,
        )

    def sent(self, run: int) -> list[ModelRequest]:
        """Return the main instance's action requests of run `run` (1-based), in order."""
        gateway = self.gateways[run - 1]
        return [r for r in gateway.requests if r.purpose == "action" and r.instance == "main"]

    def first_difference(self, run: int) -> int | None:
        """Return the index of the first message of run `run`'s last request that run `run + 1`'s
        first request does not repeat byte for byte (None: it repeats them all, tools too)."""
        before = self.gateways[run - 1].payload(self.sent(run)[-1])
        after = self.gateways[run].payload(self.sent(run + 1)[0])
        assert json.dumps(after.get("tools")) == json.dumps(before.get("tools"))
        assert len(after["messages"]) > len(before["messages"]), "new material comes after"
        for index, message in enumerate(before["messages"]):
            if json.dumps(message) != json.dumps(after["messages"][index]):
                return index
        return None


def _read_back(request: ModelRequest):
    """Read the last excerpt the request shows, from where it leaves off."""
    found = [hit for m in request.messages for hit in _REF.findall(str(m.get("content")))]
    ref, offset = found[-1]
    return tool_call_response(("read_record", {"ref": ref, "offset": int(offset or 0)}))


def _excerpted(session: Session) -> None:
    outcome = session.ask(
        tool_call_response(("big_output", {"chars": 30_000})), text_response("done 1")
    )
    assert outcome.status == "succeeded", outcome.error


def test_an_excerpt_keeps_its_run_reference_so_the_next_run_extends_the_last_request():
    session = Session(5)
    _excerpted(session)
    outcome = session.ask(_read_back, text_response("done 2"))
    assert outcome.status == "succeeded", outcome.error
    assert session.first_difference(1) is None
    first = json.dumps(session.sent(2)[0].messages)
    assert 'read_record(ref=\\"r1:3\\"' in first and "s:3" not in first
    # The run after reads the excerpt back by the run's reference.
    read = outcome.frame["context"]["records"][2]["message"]["content"]
    assert read.startswith("[r1:3: characters ")


def test_under_rendering_4_the_excerpt_changed_its_reference_at_the_run_boundary():
    session = Session(4)
    _excerpted(session)
    session.ask(text_response("done 2"))
    # sys, the question, the call, then the excerpt: the first message that differs.
    assert session.first_difference(1) == 3
    assert 'read_record(ref=\\"s:3\\"' in json.dumps(session.sent(2)[0].messages)


def test_tool_groups_reads_and_a_plan_are_repeated_as_they_were_sent():
    session = Session(5, tools=("big_output", "echo", "update_plan"))
    plan = {"steps": [{"step": "look", "status": "in_progress"}]}
    outcome = session.ask(
        tool_call_response(
            ("echo", {"text": "NONCE-A"}),
            ("big_output", {"chars": 30_000}),
            ("update_plan", plan),
        ),
        _read_back,
        tool_call_response(("big_output", {"chars": 40_000}), ("echo", {"text": "NONCE-B"})),
        UPSTREAM,
    )
    # The provider fails on the run's last request, after a group was answered.
    assert outcome.status == "failed"
    assert outcome.frame["state"]["compaction_log"] == [], "nothing was masked"
    outcome = session.ask(_read_back, text_response("done 2"))
    assert outcome.status == "succeeded", outcome.error
    outcome = session.ask(text_response("done 3"))
    assert outcome.status == "succeeded", outcome.error
    assert session.first_difference(1) is None
    assert session.first_difference(2) is None


def test_a_run_that_failed_or_stopped_before_leaves_notes_that_never_change():
    session = Session(5)
    failed = session.ask(tool_call_response(("big_output", {"chars": 30_000})), UPSTREAM)
    assert failed.status == "failed"
    assert session.ask(text_response("done 2")).status == "succeeded"
    assert session.ask(text_response("done 3")).status == "succeeded"
    assert session.first_difference(1) is None
    assert session.first_difference(2) is None
    shown = json.dumps(session.sent(3)[0].messages)
    assert "[run note] run 1 failed: upstream (s:" in shown


def test_an_approved_group_and_its_decisions_are_repeated_as_they_were_sent():
    session = Session(5, tools=(Transfer(), "echo", "big_output"))
    decisions: dict[str, Decision] = {}
    waiting = session.ask(
        tool_call_response(("big_output", {"chars": 30_000}), ("transfer", {"amount": 5})),
        tool_call_response(("echo", {"text": "after"})),
        text_response("done 1"),
        decisions=lambda: decisions,
    )
    assert waiting.status == WAITING_APPROVAL
    call_id = waiting.pending_approvals[0]["call_id"]
    decisions[call_id] = Decision(True, by="alice", at="2026-12-01T10:00:00Z")
    assert session.engines[0].continue_run(waiting.frame).status == "succeeded"
    assert "approved by alice" in json.dumps(session.sent(1)[-1].messages)
    assert session.ask(text_response("done 2"), decisions=lambda: {}).status == "succeeded"
    assert session.first_difference(1) is None


def test_a_sub_agents_answer_is_repeated_as_it_was_sent():
    session = Session(5)
    outcome = session.ask(
        tool_call_response(("big_output", {"chars": 30_000})),
        tool_call_response(("delegate_researcher", {"task": "compute 6*7"})),
        tool_call_response(("calculator", {"expression": "6*7"})),
        text_response("42 NONCE-CHILD"),
        text_response("done 1"),
        sub_agents=[RESEARCHER],
    )
    assert outcome.status == "succeeded", outcome.error
    assert session.ask(text_response("done 2"), sub_agents=[RESEARCHER]).status == "succeeded"
    assert session.first_difference(1) is None
    assert "NONCE-CHILD" in json.dumps(session.sent(2)[0].messages)


def _row(seq: int, run: int, kind: str, message: dict[str, Any]) -> JournalRecord:
    return JournalRecord(seq, run, "main", kind, message, f"k{seq}", seq)


ROWS = [
    _row(1, 1, "user_input", {"role": "user", "content": "q 1"}),
    _row(2, 1, "assistant", {"role": "assistant", "content": "done 1"}),
    _row(3, 2, "status", {"status": "failed", "error": "upstream: down"}),
    _row(4, 3, "status", {"status": "cancelled", "error": None}),
    _row(5, 4, "status", {"status": "cancelled", "error": None}),
]


@pytest.mark.parametrize("upto", range(1, len(ROWS)))
def test_projecting_more_records_only_appends_messages(upto):
    shorter = project_history(ROWS[:upto], rendering=5).messages
    longer = project_history(ROWS, rendering=5).messages
    assert json.dumps(longer[: len(shorter)]) == json.dumps(shorter)
    assert [m["content"] for m in longer[2:]] == [
        "[run note] run 2 failed: upstream",
        "[run note] run 3 cancelled",
        "[run note] run 4 cancelled",
    ]


def test_under_rendering_4_run_states_in_a_row_were_merged_into_one_note():
    shorter = project_history(ROWS[:3], rendering=4).messages
    longer = project_history(ROWS, rendering=4).messages
    assert shorter[-1]["content"] == "[run note] run 2 failed: upstream"
    assert longer[-1]["content"] == "[run note] run 2 failed: upstream; runs 3–4 cancelled"
    assert len(longer) == len(shorter)
