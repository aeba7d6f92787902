"""A tool server's questions: the run waits with them in its checkpoint, then sends the same
call again with the answers; a call that is open asks through its context; questions and answers
are journaled after the tool group."""

from __future__ import annotations

from agentloom.engine import WAITING_INPUT, Answer, InputRequired, Tool
from agentloom.engine.testing import ScriptedGateway, text_response, tool_call_response
from tests.engine.helpers import make_engine

QUESTION = {"key": "day", "mode": "form", "message": "Which day?", "fields": [], "unsupported": ""}


class Booking(Tool):
    """A server tool whose server asks which day before it books (2026-07-28 rounds)."""

    name = "book"
    description = "Book a room."
    parameters = {"type": "object", "properties": {"room": {"type": "string"}}}

    def __init__(self, rounds: int = 1):
        self.sent: list = []
        self.rounds = rounds

    def run(self, arguments):
        raise AssertionError("run_in is used")

    def run_in(self, arguments, context):
        self.sent.append(context.reply)
        if len(self.sent) <= self.rounds:
            raise InputRequired(server="hotel", questions=[QUESTION], request_state="S1")
        answer = context.reply.responses["day"]
        return f"booked {arguments['room']}: {answer}"


class AskingDuringTheCall(Tool):
    """A server tool whose server asks while the call is open (2025 revisions)."""

    name = "book_now"
    description = "Book a room now."
    parameters = {"type": "object", "properties": {}}

    def run(self, arguments):
        raise AssertionError("run_in is used")

    def run_in(self, arguments, context):
        if context.ask is None:
            return "declined: no one to ask"
        answers = context.ask("hotel", [QUESTION], 30.0)
        return "declined" if answers is None else f"booked: {answers['day']}"


def _records(outcome, kind):
    return [r for r in outcome.frame["context"]["records"] if r["kind"] == kind]


def _start(tool, answers, *replies, **hooks):
    gateway = ScriptedGateway(list(replies))
    engine = make_engine(gateway, tools=[tool, "echo"], answers=lambda: answers, **hooks)
    return engine, engine.start(run_number=1, attempt=1, system_prompt="s", question="q")


def test_input_required_stops_the_run_with_the_questions_and_state_in_the_checkpoint():
    tool, answers = Booking(), {}
    _engine, outcome = _start(
        tool,
        answers,
        tool_call_response(("book", {"room": "blue"}), ("echo", {"text": "after"})),
    )
    assert outcome.status == WAITING_INPUT
    call_id = outcome.frame["state"]["pending_tool_calls"][0]["id"]
    assert outcome.pending_questions == [
        {**QUESTION, "call_id": call_id, "tool": "book", "server": "hotel"}
    ]
    assert outcome.frame["state"]["asking"]["request_state"] == "S1"
    assert _records(outcome, "tool_result") == [], "the group stays open, later calls too"
    assert _records(outcome, "feedback") == [], "nothing between a call and its result"
    assert _records(outcome, "status") == [], "waiting is not an end"


def test_the_same_call_goes_again_with_the_answers_and_the_exchange_follows_the_group():
    tool, answers = Booking(), {}
    engine, outcome = _start(
        tool,
        answers,
        tool_call_response(("book", {"room": "blue"}), ("echo", {"text": "after"})),
        text_response("done"),
    )
    call_id = outcome.frame["state"]["pending_tool_calls"][0]["id"]
    assert engine.continue_run(outcome.frame).status == WAITING_INPUT, "no answer yet"
    answers["day"] = Answer("accept", by="alice", at="T1", content={"day": "monday"})
    finished = engine.continue_run(outcome.frame)
    assert finished.status == "succeeded" and finished.answer == "done"
    assert tool.sent[0] is None
    reply = tool.sent[-1]
    assert reply.request_state == "S1"
    assert reply.responses == {"day": {"action": "accept", "content": {"day": "monday"}}}
    results = _records(finished, "tool_result")
    assert [r["message"]["content"] for r in results] == [
        "booked blue: {'action': 'accept', 'content': {'day': 'monday'}}",
        "after",
    ]
    feedback = _records(finished, "feedback")
    assert [f["message"]["content"] for f in feedback] == [
        f"[feedback] tool server hotel asked during book ({call_id}): Which day?",
        f'[feedback] question day of book ({call_id}): accept by alice at T1: {{"day": "monday"}}',
    ]
    assert min(f["seq"] for f in feedback) > max(r["seq"] for r in results)
    assert finished.frame["state"]["attempt"] == 1 and finished.frame["state"]["asking"] is None


def test_a_server_that_asks_again_makes_the_run_wait_again():
    tool, answers = Booking(rounds=2), {}
    engine, outcome = _start(tool, answers, tool_call_response(("book", {"room": "red"})))
    answers["day"] = Answer("decline", by="alice", at="T1")
    again = engine.continue_run(outcome.frame)
    assert again.status == WAITING_INPUT
    assert tool.sent[-1].responses == {"day": {"action": "decline"}}


def test_a_resume_answers_a_call_that_waited_unknown_and_keeps_the_question():
    from agentloom.engine import UNKNOWN_RESULT

    tool, answers = Booking(), {}
    engine, outcome = _start(
        tool, answers, tool_call_response(("book", {"room": "blue"})), text_response("later")
    )
    resumed = engine.resume(outcome.frame, attempt=2)
    assert resumed.status == "succeeded"
    assert [r["message"]["content"] for r in _records(resumed, "tool_result")] == [UNKNOWN_RESULT]
    assert len(tool.sent) == 1, "never sent again"
    assert "asked during book" in _records(resumed, "feedback")[0]["message"]["content"]


def test_a_call_that_is_open_asks_the_person_and_the_exchange_follows_the_group():
    asked = []

    def ask(call_id, tool, server, questions, seconds):
        asked.append((tool, server, seconds))
        return {"day": Answer("accept", by="alice", at="T2", content={"day": "friday"})}

    _engine, outcome = _start(
        AskingDuringTheCall(),
        {},
        tool_call_response(("book_now", {})),
        text_response("done"),
        ask=ask,
    )
    assert outcome.status == "succeeded"
    assert asked == [("book_now", "hotel", 30.0)]
    [result] = _records(outcome, "tool_result")
    assert (
        result["message"]["content"] == "booked: {'action': 'accept', 'content': {'day': 'friday'}}"
    )
    feedback = _records(outcome, "feedback")
    assert len(feedback) == 2 and all(f["seq"] > result["seq"] for f in feedback)


def test_no_one_to_ask_without_the_hook_and_a_timed_out_question_is_declined():
    _engine, outcome = _start(
        AskingDuringTheCall(), {}, tool_call_response(("book_now", {})), text_response("done")
    )
    assert _records(outcome, "tool_result")[0]["message"]["content"] == "declined: no one to ask"
    _engine, outcome = _start(
        AskingDuringTheCall(),
        {},
        tool_call_response(("book_now", {})),
        text_response("done"),
        ask=lambda *args: None,
    )
    assert _records(outcome, "tool_result")[0]["message"]["content"] == "declined"
    texts = [f["message"]["content"] for f in _records(outcome, "feedback")]
    assert any("no one answered question day of book_now" in t for t in texts)
