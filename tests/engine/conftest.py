"""Engine test fixtures: a scripted gateway that refuses what OpenAI would refuse, and a clock."""

from __future__ import annotations

import pytest

from agentloom.engine import ModelBudget
from agentloom.engine.testing import ScriptedGateway
from tests.engine.helpers import FakeClock, assert_openai_valid


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def scripted():
    """Return a factory of scripted gateways that validate every request against OpenAI's rules."""

    def make(*steps) -> ScriptedGateway:
        return ScriptedGateway(steps, validate=assert_openai_valid)

    return make


@pytest.fixture
def budget() -> ModelBudget:
    return ModelBudget(context_window=32_768, max_output_tokens=4_096, safety_margin_tokens=1_024)
