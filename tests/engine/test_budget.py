import json

import pytest

from agentloom.engine import (
    ConfigurationError,
    ContextPolicy,
    JsonBytesEstimator,
    ModelBudget,
    estimator_from_binding,
)
from agentloom.engine._budget import DEFAULT_ESTIMATOR_ID, budget_refusal


def test_worked_example_of_the_design_note():
    budget = ModelBudget(context_window=32_768, max_output_tokens=4_096, safety_margin_tokens=1_024)

    assert budget.effective_input_budget == 27_648
    # 27,648 x 0.8 = 22,118.4: the trigger is the first whole estimate at or above it.
    assert ContextPolicy().trigger_at(budget) == 22_119
    assert ContextPolicy().target_at(budget) == 16_588


@pytest.mark.parametrize(
    ("window", "output", "margin", "field"),
    [
        (4_096, 4_096, 0, "context_window"),
        (5_000, 4_096, 1_000, "context_window"),
        (0, 1, 0, "context_window"),
        (32_768, 0, 0, "max_output_tokens"),
        (32_768, True, 0, "max_output_tokens"),
        (32_768, 4_096, -1, "safety_margin_tokens"),
        (32_768.0, 4_096, 0, "context_window"),
    ],
)
def test_a_budget_without_input_room_names_the_field(window, output, margin, field):
    with pytest.raises(ConfigurationError) as caught:
        ModelBudget(window, output, margin)

    assert caught.value.field == field


def test_budget_round_trips_through_a_dict():
    budget = ModelBudget(8_192, 1_024, 256)

    assert ModelBudget.from_dict(budget.to_dict()) == budget


def test_estimate_counts_utf8_bytes_of_the_json_request_plus_envelopes():
    estimator = JsonBytesEstimator(per_request=0, per_message=0, per_tool=0)
    messages = [{"role": "user", "content": "上下文"}]

    raw = len(json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode())
    assert estimator.estimate(messages, []) == raw
    assert raw - len(json.dumps(messages, ensure_ascii=False, separators=(",", ":"))) == 6


def test_estimate_includes_tool_schemas_and_envelopes_per_message_and_tool():
    estimator = JsonBytesEstimator()
    messages = [{"role": "user", "content": "hi"}]
    tool = {"type": "function", "function": {"name": "echo", "parameters": {"type": "object"}}}

    bare = estimator.estimate(messages, [])
    with_tool = estimator.estimate(messages, [tool])
    two_messages = estimator.estimate(messages * 2, [])

    assert with_tool - bare == 16 + len(json.dumps([tool], separators=(",", ":")))
    assert two_messages - bare == 12 + 1 + len(json.dumps(messages[0], separators=(",", ":")))


def test_estimate_is_never_below_the_request_length_in_characters():
    estimator = JsonBytesEstimator()
    messages = [{"role": "user", "content": "word " * 1000}]

    assert estimator.estimate(messages, []) > len(json.dumps(messages))


def test_estimator_binding_round_trips_and_unknown_modules_are_refused():
    estimator = JsonBytesEstimator(per_message=20)

    rebuilt = estimator_from_binding(estimator.binding())

    assert rebuilt.binding() == {"module_id": DEFAULT_ESTIMATOR_ID, "config": estimator.config}
    with pytest.raises(ConfigurationError) as caught:
        estimator_from_binding({"module_id": "someone.else/2", "config": {}})
    assert caught.value.field == "estimator"


def test_the_hard_check_sends_a_request_at_the_budget_and_refuses_one_above_it():
    budget = ModelBudget(8_000, 1_000, 0)

    assert budget_refusal("action", 7_000, budget) is None
    assert budget_refusal("compaction", 7_001, budget) == (
        "context_budget_exceeded: the compaction request is estimated at 7001, "
        "above the effective input budget of 7000"
    )


def test_a_smaller_window_keeps_the_reservations_shares_of_it():
    assumed = ModelBudget(32_768, 4_096, 1_024)
    assert assumed.within(4_096) == ModelBudget(4_096, 512, 128)
    # Never more than before, and a window that is not smaller changes nothing.
    assert ModelBudget(4_096, 512, 256).within(8_192) == ModelBudget(4_096, 512, 256)
    assert ModelBudget(100, 1, 0).within(10) == ModelBudget(10, 1, 0)
