"""Length refusals learned from: a smaller window, compaction against it, one retry."""

from __future__ import annotations

import pytest

from agentloom.engine import (
    ContextPolicy,
    GatewayError,
    JsonBytesEstimator,
    LearnedLimit,
    ModelBudget,
    ModelGateway,
)
from agentloom.engine._budget import learned_window
from agentloom.engine.testing import (
    MemoryJournal,
    ScriptedGateway,
    text_response,
    tool_call_response,
)
from tests.engine.helpers import Recorder, make_engine

FROZEN = ModelBudget(40_000, 1_000, 0)
BYTES = JsonBytesEstimator()


def refusal(window: int | None, requested: int | None = None) -> GatewayError:
    """Return a length refusal as the provider layer raises it (its attributes set)."""
    error = GatewayError("context_length", "The request is longer than the model's context.")
    error.window = window
    error.requested = requested
    error.evidence = f"maximum context length is {window} tokens" if window else None
    return error


class WindowDouble(ModelGateway):
    """A server with a real window, counted in the same unit as the byte estimator's bound.

    It refuses a request whose size plus its output limit exceeds `window`, naming the window
    when `named`; it answers `steps` tool calls with large texts, then a final answer, and a
    short summary to compaction requests.
    """

    provider, model_id = "double", "window"

    def __init__(self, window: int, steps: int, *, named: bool = True, text: int = 3_000):
        self.window = window
        self.named = named
        self.steps = steps
        self.text = text
        self.sizes: list[int] = []
        self.refused: list[int] = []
        self.before_refusal: list[int] = []
        # Summaries this long come first (a compaction that leaves a large view), then short ones.
        self.long_summaries: list[int] = []

    def complete(self, request):
        size = BYTES.upper_bound(request.messages, request.tools)
        if size + request.max_output_tokens > self.window:
            if not self.refused:
                self.before_refusal = list(self.sizes)
            self.refused.append(size)
            raise refusal(self.window if self.named else None, size + request.max_output_tokens)
        self.sizes.append(size)
        if request.purpose == "compaction":
            long = self.long_summaries.pop(0) if self.long_summaries else 0
            return text_response("summary: the echoes so far " + "z" * long)
        if request.purpose == "verification":
            return text_response("PASS")
        if self.steps:
            self.steps -= 1
            return tool_call_response(("echo", {"text": f"{self.steps} " + "y" * self.text}))
        return text_response("done")


def _engine(gateway, recorder, *, budget=FROZEN, learned=None):
    return make_engine(
        gateway,
        budget=budget,
        recorder=recorder,
        on_learned=(learned.append if learned is not None else None),
        record_store=recorder.store(),
    )


def _start(gateway, *, budget=FROZEN, question="Echo large texts, please."):
    recorder, learned = Recorder(MemoryJournal()), []
    outcome = _engine(gateway, recorder, budget=budget, learned=learned).start(
        run_number=1, attempt=1, system_prompt="You echo.", question=question
    )
    return outcome, recorder, learned


def test_the_rule_learns_the_named_window_else_the_largest_success_never_above_the_budget():
    budget = ModelBudget(40_000, 1_000, 500)
    # A named window below what was refused is the window.
    assert learned_window(budget, named=12_000, refused=15_000, largest_ok=9_000) == 12_000
    # A named window that the refused request measured within cannot be trusted: bounded.
    assert learned_window(budget, named=12_000, refused=10_000, largest_ok=9_000) == 10_500
    # Never larger than the budget in force.
    assert learned_window(budget, named=90_000, refused=30_000, largest_ok=None) == 16_500
    assert learned_window(budget, named=None, refused=30_000, largest_ok=31_000) == 16_500
    assert learned_window(budget, named=None, refused=30_000, largest_ok=20_000) == 21_500
    assert learned_window(budget, named=None, refused=90_000, largest_ok=60_000) == 40_000
    # A named window the refused request measured within, with the server's count of its input:
    # the window scaled by how far the measure falls short of that count.
    assert (
        learned_window(budget, named=12_000, refused=8_000, largest_ok=5_000, counted=12_000)
        == 8_000
    )
    # A count the measure does not fall short of teaches nothing new.
    assert (
        learned_window(budget, named=12_000, refused=10_000, largest_ok=9_000, counted=9_000)
        == 10_500
    )


def test_a_refusal_naming_a_window_is_learned_compacted_against_and_the_call_retried_once():
    double = WindowDouble(12_000, steps=4)

    outcome, recorder, learned = _start(double)

    assert outcome.status == "succeeded", outcome.error
    assert len(double.refused) == 1
    assert learned == [
        LearnedLimit(
            "context_window",
            12_000,
            "maximum context length is 12000 tokens",
            refused=double.refused[0],
            largest_ok=max(double.before_refusal),
        )
    ]
    final = recorder.saves[-1]
    assert final["binding"]["budget"] == {
        "context_window": 12_000,
        "max_output_tokens": 1_000,
        "safety_margin_tokens": 0,
    }
    notes = [
        r["message"]["content"]
        for r in final["context"]["records"]
        if r["kind"] == "feedback" and "context window learned" in str(r["message"]["content"])
    ]
    assert len(notes) == 1 and "12,000 tokens" in notes[0]
    # The refused call's record keeps what the refusal said, so a replay can rebuild it.
    (refused_call,) = [call for call in recorder.calls if call.error]
    assert refused_call.refusal == {
        "window": 12_000,
        "requested": double.refused[0] + 1_000,
        "evidence": "maximum context length is 12000 tokens",
    }
    # The retried request came after a compaction, within the learned window.
    purposes = [call.purpose for call in recorder.calls]
    refused_at = next(i for i, call in enumerate(recorder.calls) if call.error)
    assert "compaction" in purposes[refused_at + 1 :]
    assert all(size + 1_000 <= 12_000 for size in double.sizes)


class TemplatingDouble(WindowDouble):
    """A server whose chat template makes a request half as large again as the measure, that
    names its window and its count of the refused request's input (llama-cpp-python's
    `chatml-function-calling` counted 4,387 where the measure said 2,626)."""

    def complete(self, request):
        size = BYTES.upper_bound(request.messages, request.tools)
        counted = size * 3 // 2
        if counted >= self.window:
            if not self.refused:
                self.before_refusal = list(self.sizes)
            self.refused.append(size)
            error = refusal(self.window, counted + request.max_output_tokens)
            error.input_tokens = counted
            raise error
        return super().complete(request)


def test_a_server_counting_more_than_the_measure_teaches_the_window_in_the_measures_units():
    double = TemplatingDouble(24_000, steps=8)

    outcome, recorder, learned = _start(double)

    assert outcome.status == "succeeded", outcome.error
    (limit,) = learned
    (refused,) = double.refused
    # The named window times measure / count, not the largest success plus the reserve.
    assert limit.value == 24_000 * refused // (refused * 3 // 2)
    assert limit.value > max(double.before_refusal) + FROZEN.max_output_tokens
    assert recorder.saves[-1]["binding"]["budget"]["context_window"] == limit.value


def test_a_refusal_without_a_number_learns_the_largest_request_that_succeeded():
    double = WindowDouble(12_000, steps=4, named=False)

    outcome, recorder, learned = _start(double)

    assert outcome.status == "succeeded", outcome.error
    assert len(double.refused) == 1
    (limit,) = learned
    assert limit.largest_ok == max(double.before_refusal)
    assert limit.value == limit.largest_ok + FROZEN.max_output_tokens
    assert limit.evidence.startswith("context_length: ")
    assert recorder.saves[-1]["binding"]["budget"]["context_window"] == limit.value


@pytest.mark.parametrize("named", [True, False])
def test_a_learned_limit_is_refused_once_in_a_long_session(named):
    double = WindowDouble(12_000, steps=14, named=named, text=2_000)

    outcome, _, learned = _start(double)

    assert outcome.status == "succeeded", outcome.error
    assert len(double.refused) == 1
    assert len(learned) == 1


def test_a_window_a_server_names_above_the_frozen_budget_is_never_learned_as_is():
    class Boasting(WindowDouble):
        def complete(self, request):
            try:
                return super().complete(request)
            except GatewayError as exc:
                raise refusal(100_000) from exc

    double = Boasting(12_000, steps=4)

    outcome, recorder, learned = _start(double)

    assert outcome.status == "succeeded", outcome.error
    (limit,) = learned
    assert limit.value <= FROZEN.context_window
    assert limit.value == max(double.before_refusal) + FROZEN.max_output_tokens
    assert recorder.saves[-1]["binding"]["budget"]["context_window"] == limit.value


def test_after_an_overflow_the_next_question_succeeds_within_the_learned_window():
    double = WindowDouble(12_000, steps=4)
    outcome, recorder, learned = _start(double)
    assert outcome.status == "succeeded", outcome.error
    # The application starts new runs with the learned window (never above the frozen one).
    budget = ModelBudget(learned[0].value, FROZEN.max_output_tokens, FROZEN.safety_margin_tokens)
    nxt = Recorder(recorder.journal, run_id=2)
    again = WindowDouble(12_000, steps=2)

    second = _engine(again, nxt, budget=budget).start(
        run_number=2,
        attempt=1,
        system_prompt="You echo.",
        question="And two more, please.",
        history=recorder.journal.history(),
    )

    assert second.status == "succeeded", second.error
    assert again.refused == []


class RefusingRetry(WindowDouble):
    """Refuses the action request right after a refusal as well, once, naming a window a little
    smaller than that request with its output limit."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.forced = 0

    def complete(self, request):
        if self.refused and request.purpose == "action" and self.forced == 0:
            self.forced += 1
            size = BYTES.upper_bound(request.messages, request.tools)
            self.refused.append(size)
            raise refusal(size + 900)
        return super().complete(request)


def test_a_second_refusal_ends_the_run_and_a_resume_sees_the_learned_window():
    double = RefusingRetry(12_000, steps=4)
    double.long_summaries = [3_000, 3_000]
    outcome, recorder, learned = _start(double)

    assert outcome.status == "failed"
    assert "refused again once the learned window" in outcome.error
    assert len(learned) == 2 and learned[1].value < learned[0].value
    saved = recorder.saves[-1]
    assert saved["binding"]["budget"]["context_window"] == learned[1].value

    # Resumed by an engine of the frozen version: the checkpoint's learned window holds.
    resumed_recorder = Recorder(recorder.journal)
    after = WindowDouble(12_000, steps=1)
    resumed = _engine(after, resumed_recorder).resume(saved, attempt=2)

    assert resumed.status == "succeeded", resumed.error
    assert after.refused == []
    assert all(size + 1_000 <= learned[1].value for size in after.sizes)
    assert resumed_recorder.saves[-1]["binding"]["budget"] == saved["binding"]["budget"]


def test_a_learned_window_too_small_for_a_question_fails_the_run_saying_to_republish():
    double = WindowDouble(2_200, steps=0)

    outcome, recorder, learned = _start(double, question="q" * 1_000)

    assert outcome.status == "failed"
    assert "republish" in outcome.error and "below the floor of 512" in outcome.error
    assert [limit.value for limit in learned] == [2_200]
    assert recorder.saves[-1]["binding"]["budget"]["context_window"] == 2_200
    assert len(double.refused) == 1


def test_a_named_window_without_room_for_the_output_limit_keeps_the_reservations_shares():
    # The frozen output limit and margin leave 900 no input: they keep their shares of it, and
    # the room for a question is then judged (too small here: republish).
    double = WindowDouble(900, steps=0)

    outcome, recorder, learned = _start(double)

    assert [limit.value for limit in learned] == [900]
    assert recorder.saves[-1]["binding"]["budget"] == FROZEN.within(900).to_dict()
    assert outcome.status == "failed"
    assert "room for a question" in outcome.error and "republish" in outcome.error


class Adapting(ScriptedGateway):
    """A gateway that answers a `reasoning_missing` refusal by changing its payload rule."""

    def __init__(self, steps):
        super().__init__(steps)
        self.rule = "never"
        self.adapted: list[str] = []
        self.payloads: list[str] = []

    def payload(self, request):
        self.payloads.append(self.rule)
        return super().payload(request)

    def adapt(self, error):
        self.adapted.append(error.kind)
        if error.kind != "reasoning_missing" or self.rule == "tool_spans":
            return None
        self.rule = "tool_spans"
        return LearnedLimit("reasoning", "tool_spans", "reasoning_content is missing")


def test_a_refusal_the_gateway_adapts_to_is_announced_and_resent_once():
    missing = GatewayError("reasoning_missing", "The reasoning must be passed back.")
    gateway = Adapting([missing, text_response("answer")])
    recorder, learned = Recorder(MemoryJournal()), []

    outcome = _engine(gateway, recorder, learned=learned).start(
        run_number=1, attempt=1, system_prompt="s", question="q"
    )

    assert outcome.status == "succeeded", outcome.error
    assert learned == [LearnedLimit("reasoning", "tool_spans", "reasoning_content is missing")]
    # The payload was rebuilt under the new rule and checked again before the resend.
    assert gateway.payloads[-1] == "tool_spans"
    assert [call.error is None for call in recorder.calls] == [False, True]


def test_the_gateway_is_asked_to_adapt_once_per_call():
    missing = GatewayError("reasoning_missing", "The reasoning must be passed back.")
    gateway = Adapting([missing, missing])
    recorder, learned = Recorder(MemoryJournal()), []

    outcome = _engine(gateway, recorder, learned=learned).start(
        run_number=1, attempt=1, system_prompt="s", question="q"
    )

    assert outcome.status == "failed"
    assert outcome.error.startswith("reasoning_missing")
    assert gateway.adapted == ["reasoning_missing"]
    assert len(gateway.requests) == 2


def test_a_summary_call_refused_for_length_teaches_the_window_and_the_step_is_prepared_again():
    double = WindowDouble(12_000, steps=2, text=6_000)
    recorder, learned = Recorder(MemoryJournal()), []
    engine = make_engine(
        double,
        budget=FROZEN,
        policy=ContextPolicy(model_steps=1),
        recorder=recorder,
        on_learned=learned.append,
        record_store=recorder.store(),
    )

    outcome = engine.start(run_number=1, attempt=1, system_prompt="You echo.", question="Echo.")

    assert outcome.status == "succeeded", outcome.error
    refused = [call for call in recorder.calls if call.error]
    assert [call.purpose for call in refused] == ["compaction"]
    assert [limit.value for limit in learned] == [12_000]
    assert all(size + 1_000 <= 12_000 for size in double.sizes)
