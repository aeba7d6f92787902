"""Streamed model calls in the engine: redacted deltas with a hold-back, a cancel that stops."""

from __future__ import annotations

import threading
import time

from agentloom.engine import GatewayError, ModelBudget, ModelGateway, Redactor, StreamRedactor
from agentloom.engine.testing import text_response, tool_call_response
from tests.engine.helpers import Recorder, kinds, make_engine

SECRET = "sk-live-0123456789abcdef"


def start(engine, question="q"):
    return engine.start(run_number=1, attempt=1, system_prompt="sys", question=question)


class StreamingGateway(ModelGateway):
    """Stream each reply's pieces `delay` seconds apart; stop when the stream is aborted."""

    streams = True

    def __init__(self, *replies, delay=0.0):
        self.replies = list(replies)
        self.delay = delay
        self.aborted = threading.Event()

    def complete(self, request, stream=None):
        pieces, reasoning, reply = self.replies.pop(0)
        self.aborted.clear()
        stream.on_abort(self.aborted.set)
        for thought in reasoning:
            stream.delta("", thought, [])
        for piece in pieces:
            if self.aborted.wait(self.delay):
                raise GatewayError("network", "The provider could not be reached.")
            stream.delta(piece, "", [])
        for call in reply.message.get("tool_calls") or []:
            stream.delta("", "", [call["function"]["name"]])
        return reply


def test_a_key_split_across_two_chunks_never_reaches_a_delta():
    text = f"the key is {SECRET} ok"
    cut = text.index(SECRET) + 9
    gateway = StreamingGateway(([text[:cut], text[cut:]], [], text_response(text)))
    deltas = []
    outcome = start(
        make_engine(gateway, secrets=[SECRET], on_delta=lambda i, d: deltas.append((i, d)))
    )
    assert outcome.status == "succeeded"
    shown = "".join(delta["content"] for _, delta in deltas)
    assert SECRET not in shown and SECRET[:9] not in shown
    assert shown == "the key is [redacted] ok"
    assert {instance for instance, _ in deltas} == {"main"}
    assert outcome.answer == "the key is [redacted] ok"


def test_reasoning_and_decided_tool_calls_are_relayed():
    gateway = StreamingGateway(
        (["Calling."], ["I should ", "echo."], tool_call_response(("echo", {"text": "x"}))),
        (["done"], [], text_response("done")),
    )
    deltas = []
    start(make_engine(gateway, on_delta=lambda i, d: deltas.append(d)))
    assert "".join(d["reasoning"] for d in deltas) == "I should echo."
    assert [d["tool_calls"] for d in deltas if d["tool_calls"]] == [["echo"]]


def test_a_key_split_across_two_reasoning_chunks_never_reaches_a_delta():
    cut = 9
    thoughts = [f"I saw {SECRET[:cut]}", f"{SECRET[cut:]} there"]
    gateway = StreamingGateway((["done"], thoughts, text_response("done")))
    deltas = []
    start(make_engine(gateway, secrets=[SECRET], on_delta=lambda i, d: deltas.append(d)))
    shown = "".join(delta["reasoning"] for delta in deltas)
    assert shown == "I saw [redacted] there"


def test_text_that_cannot_begin_a_secret_is_not_held_back():
    stream = StreamRedactor(Redactor([SECRET]))
    assert stream.feed("plain words ") == "plain words "
    assert stream.feed("and sk-li") == "and "
    assert stream.feed("ve-0123456789abcdef.") == "[redacted]."
    assert stream.feed("sk") == ""
    assert stream.flush() == "sk"


def test_a_cancel_mid_stream_stops_the_call_and_records_it_cancelled():
    pieces = ["tok "] * 100  # 20 s of streaming
    gateway = StreamingGateway((pieces, [], text_response("".join(pieces))), delay=0.2)
    recorder = Recorder()
    asked = time.monotonic() + 0.4
    deltas = []
    engine = make_engine(
        gateway,
        recorder=recorder,
        should_cancel=lambda: time.monotonic() > asked,
        cancel_poll_seconds=0.1,
        on_delta=lambda i, d: deltas.append(d),
    )
    outcome = start(engine)
    assert outcome.status == "cancelled"
    assert time.monotonic() - asked < 1.0
    assert gateway.aborted.is_set()
    call = recorder.calls[-1]
    assert call.cancelled and call.response is None and call.usage is None
    assert call.error.startswith("cancelled:")
    assert deltas  # tokens were shown before the cancel
    frame = outcome.frame
    assert "assistant" not in kinds(frame)  # nothing partial is journaled


class PurposeStreamingGateway(ModelGateway):
    """Stream every reply's text in one piece: echo calls with long texts, then a summary on
    request, then `done`."""

    streams = True

    def __init__(self, steps: int):
        self.steps = steps

    def complete(self, request, stream=None):
        if request.purpose == "compaction":
            reply = text_response("summary of the echoed texts")
        elif self.steps:
            self.steps -= 1
            reply = tool_call_response(("echo", {"text": "long text " * 60}))
        else:
            reply = text_response("done")
        stream.delta(reply.message.get("content") or "", "", [])
        return reply


def test_each_delta_says_the_purpose_of_its_call():
    # A summary's text streams too, but it is not the answer: the reader must be able to tell.
    deltas = []
    outcome = start(
        make_engine(
            PurposeStreamingGateway(steps=8),
            budget=ModelBudget(4_000, 500, 0),
            on_delta=lambda i, d: deltas.append(d),
        )
    )
    assert outcome.status == "succeeded"
    by_purpose = {d["purpose"]: d["content"] for d in deltas if d["content"]}
    assert by_purpose["compaction"] == "summary of the echoed texts"
    assert by_purpose["action"] == "done"
