import pytest

from agentloom.engine import JsonBytesEstimator, ModelBudget
from agentloom.engine._measure import one_measure_per_step, step_measure
from agentloom.engine.testing import text_response, tool_call_response
from tests.engine.helpers import make_engine


class CountingEstimator(JsonBytesEstimator):
    """Bytes, with every request it measured kept (messages and tools, as given)."""

    def __init__(self):
        super().__init__()
        self.estimated: list[tuple[list, list]] = []

    def estimate(self, messages, tools):
        self.estimated.append((list(messages), list(tools)))
        return super().estimate(messages, tools)


class CountingBound(CountingEstimator):
    """Bytes with an upper bound of its own (as the tokenizer estimators have), counted apart."""

    def __init__(self):
        super().__init__()
        self.bounded: list[tuple[list, list]] = []

    def upper_bound(self, messages, tools):
        self.bounded.append((list(messages), list(tools)))
        return JsonBytesEstimator.estimate(self, messages, tools) + 7


def _times(measured: list[tuple[list, list]], messages: list, tools: list) -> int:
    return sum(1 for sent in measured if sent == (messages, tools))


def _run(estimator, scripted):
    gateway = scripted(tool_call_response(("echo", {"text": "hi"})), text_response("done"))
    engine = make_engine(gateway, estimator=estimator, budget=ModelBudget(100_000, 1_000, 0))
    outcome = engine.start(run_number=1, attempt=1, system_prompt="sys", question="q")
    assert outcome.status == "succeeded"
    return gateway.requests


def test_each_step_measures_the_payload_it_sends_once(scripted):
    # The trigger check, the prepared request's check and the check of what the gateway sends
    # measure the same payload: one estimate a step.
    estimator = CountingEstimator()

    requests = _run(estimator, scripted)

    assert len(requests) == 2
    for request in requests:
        assert _times(estimator.estimated, request.messages, request.tools) == 1


def test_an_estimator_with_its_own_bound_computes_each_figure_once_a_step(scripted):
    estimator = CountingBound()

    requests = _run(estimator, scripted)

    for request in requests:
        assert _times(estimator.estimated, request.messages, request.tools) == 1
        assert _times(estimator.bounded, request.messages, request.tools) == 1


def test_a_step_measures_another_payload_anew_and_the_same_one_from_equal_items():
    estimator = CountingEstimator()
    first = [{"role": "user", "content": "a"}]
    second = [*first, {"role": "assistant", "content": "b"}]

    with one_measure_per_step():
        measure = step_measure(estimator)
        sizes = [
            measure.estimate(first, []),
            measure.upper_bound(list(first), []),
            measure.estimate(second, []),
            # Equal items (a copy of each message) are the same payload.
            measure.estimate([dict(m) for m in second], []),
            measure.estimate(first, []),
        ]

    assert [len(messages) for messages, _ in estimator.estimated] == [1, 2, 1]
    assert sizes == [
        JsonBytesEstimator().estimate(m, []) for m in (first, first, second, second, first)
    ]


def test_outside_a_step_every_figure_is_measured():
    estimator = CountingEstimator()
    messages = [{"role": "user", "content": "a"}]

    assert step_measure(estimator) is estimator
    step_measure(estimator).estimate(messages, [])
    step_measure(estimator).estimate(messages, [])

    assert len(estimator.estimated) == 2


@pytest.mark.parametrize("changed", ["content", "tools"])
def test_a_changed_item_is_measured_anew(changed):
    estimator = CountingEstimator()
    messages = [{"role": "user", "content": "a"}]
    tools = [{"type": "function", "function": {"name": "echo"}}]

    with one_measure_per_step():
        measure = step_measure(estimator)
        before = measure.estimate(messages, tools)
        if changed == "content":
            after = measure.estimate([{"role": "user", "content": "ab"}], tools)
        else:
            after = measure.estimate(messages, [])

    assert len(estimator.estimated) == 2
    assert after != before
