import pytest

from agentloom.engine import (
    DEFAULT_POLICY,
    ConfigurationError,
    ContextPolicy,
    LegacyCharPolicy,
    ModelBudget,
    load_policy,
)
from agentloom.engine._policy import LEGACY_CONTEXT_CHARS
from agentloom.engine._records import Counters

BUDGET = ModelBudget(32_768, 4_096, 1_024)  # effective 27,648; trigger at 22,118


def test_defaults_are_the_published_defaults():
    assert ContextPolicy.from_dict({}).to_dict() == DEFAULT_POLICY
    assert DEFAULT_POLICY == {
        "context_ratio": 0.8,
        "target_ratio": 0.6,
        "user_turns": None,
        "model_steps": None,
        "max_compaction_calls": 4,
        "mask_batch_ratio": 0.1,
    }


def test_the_mask_batch_is_left_out_of_the_binding_at_its_default():
    # A binding made before the field existed names the same policy as one made now.
    assert "mask_batch_ratio" not in ContextPolicy().bound()
    assert ContextPolicy(mask_batch_ratio=0.25).bound()["mask_batch_ratio"] == 0.25
    assert load_policy(ContextPolicy(mask_batch_ratio=0.25).bound()).mask_batch_ratio == 0.25
    # 27,648 x 0.1 = 2,764.8: a masking frees at least 2,765.
    assert ContextPolicy().mask_batch_at(BUDGET) == 2_765
    assert LegacyCharPolicy().mask_batch_at(BUDGET) == 0


def test_a_partial_policy_is_merged_over_the_defaults():
    policy = ContextPolicy.from_dict({"user_turns": 3, "context_ratio": 1})

    assert policy.to_dict() == {**DEFAULT_POLICY, "user_turns": 3, "context_ratio": 1}


@pytest.mark.parametrize(
    ("partial", "field"),
    [
        ({"context_ratio": 0}, "context_ratio"),
        ({"context_ratio": 1.01}, "context_ratio"),
        ({"context_ratio": True}, "context_ratio"),
        ({"context_ratio": "0.8"}, "context_ratio"),
        ({"context_ratio": float("nan")}, "context_ratio"),
        ({"target_ratio": 0}, "target_ratio"),
        ({"target_ratio": 0.8}, "target_ratio"),
        ({"target_ratio": 0.9}, "target_ratio"),
        ({"target_ratio": False}, "target_ratio"),
        ({"user_turns": 0}, "user_turns"),
        ({"user_turns": True}, "user_turns"),
        ({"user_turns": 2.0}, "user_turns"),
        ({"model_steps": -3}, "model_steps"),
        ({"model_steps": "4"}, "model_steps"),
        ({"max_compaction_calls": 0}, "max_compaction_calls"),
        ({"max_compaction_calls": 17}, "max_compaction_calls"),
        ({"max_compaction_calls": True}, "max_compaction_calls"),
        ({"max_compaction_calls": 2.0}, "max_compaction_calls"),
        ({"mask_batch_ratio": -0.1}, "mask_batch_ratio"),
        ({"mask_batch_ratio": 1.5}, "mask_batch_ratio"),
        ({"mask_batch_ratio": True}, "mask_batch_ratio"),
        ({"mask_batch_ratio": None}, "mask_batch_ratio"),
        ({"context_chars": 1000}, "context_chars"),
    ],
)
def test_invalid_policies_name_the_field(partial, field):
    with pytest.raises(ConfigurationError) as caught:
        ContextPolicy.from_dict(partial)

    assert caught.value.field == field


@pytest.mark.parametrize("calls", [1, 16])
def test_compaction_call_limits_at_the_edges_are_accepted(calls):
    assert ContextPolicy.from_dict({"max_compaction_calls": calls}).max_compaction_calls == calls


def test_budget_trigger_fires_at_eighty_percent_of_the_effective_budget():
    policy = ContextPolicy()
    counters = Counters(user_turns=1)

    # 27,648 x 0.8 = 22,118.4 exactly: 22,118 is below it, 22,119 at or above it.
    assert policy.fired(size=22_118, counters=counters, budget=BUDGET) == ()
    assert policy.fired(size=22_119, counters=counters, budget=BUDGET) == ("budget",)


@pytest.mark.parametrize(
    ("window", "ratio", "trigger"),
    [(10_000, 0.7, 7_000), (10_000, 0.8, 8_000), (1_000, 0.3, 300), (12_345, 0.8, 9_876)],
)
def test_a_whole_product_fires_at_itself_without_float_error(window, ratio, trigger):
    budget = ModelBudget(window + 2, 1, 1)  # effective budget = window
    assert ContextPolicy(context_ratio=ratio, target_ratio=0.1).trigger_at(budget) == trigger


def test_turns_or_steps_fire_only_when_enabled_and_count_from_the_baselines():
    both = ContextPolicy(user_turns=3, model_steps=5)
    none = ContextPolicy()
    counters = Counters(user_turns=7, model_steps=9, baseline_user_turns=4, baseline_model_steps=4)

    assert both.fired(size=0, counters=counters, budget=BUDGET) == ("user_turns", "model_steps")
    assert none.fired(size=0, counters=counters, budget=BUDGET) == ()

    counters.baseline_user_turns = 5
    assert both.fired(size=0, counters=counters, budget=BUDGET) == ("model_steps",)
    counters.baseline_model_steps = 5
    assert both.fired(size=0, counters=counters, budget=BUDGET) == ()
    assert both.fired(size=30_000, counters=counters, budget=BUDGET) == ("budget",)


def test_legacy_policy_compacts_only_above_its_character_threshold():
    policy = load_policy(None)
    huge_counts = Counters(user_turns=500, model_steps=500)

    assert isinstance(policy, LegacyCharPolicy)
    assert policy.context_chars == LEGACY_CONTEXT_CHARS == 48_000
    assert policy.fired(size=48_000, counters=huge_counts, budget=BUDGET) == ()
    assert policy.fired(size=48_001, counters=huge_counts, budget=BUDGET) == ("characters",)


def test_legacy_policy_measures_characters_of_the_view():
    policy = LegacyCharPolicy(context_chars=10)
    messages = [
        {"role": "user", "content": "abcde"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "ab", "arguments": "{}"}}
            ],
        },
    ]

    assert policy.measure(messages, [], None) == 5 + 2 + 2


def test_policies_round_trip_through_their_binding():
    for policy in (ContextPolicy(user_turns=2), LegacyCharPolicy(context_chars=1_000)):
        assert load_policy(policy.to_dict()) == policy
    with pytest.raises(ConfigurationError):
        load_policy({"legacy_context_chars": 0})
