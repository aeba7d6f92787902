"""The measure of a context, and the largest input a run can take, in the policy's own unit.

`measure_context` is the one place a view is measured against its policy: the engine's triggers,
the API's run context and the console's meter all read it, so they always agree.

    input_limit = target_at - size([system prompt], offered tool schemas) - plan_reserve

A question or supplement is one message the run must carry until compaction can summarise it,
and compaction can only work below its target once the pinned content (system prompt, tool
schemas, the plan at its size cap) is counted. An input larger than what is left would leave a
run that can never compact below its target, so it is refused before anything is journaled.

The unit is the policy's: estimator units for a context policy, characters for the legacy
character policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentloom.engine._budget import ModelBudget, TokenEstimator
from agentloom.engine._policy import LegacyCharPolicy, TriggerPolicy

__all__ = [
    "PLAN_MAX_CHARS",
    "PLAN_MAX_SHARE",
    "ContextMeasure",
    "InputCheck",
    "check_input",
    "input_limit",
    "input_size",
    "measure_context",
    "plan_reserve",
]

# The largest plan an agent may keep (pinned through compaction): the size of this many
# characters, and no more than this share of the compaction target, so a small window (or a
# legacy character threshold) keeps room for its inputs.
PLAN_MAX_CHARS = 4_000
PLAN_MAX_SHARE = 0.1


@dataclass(frozen=True)
class ContextMeasure:
    """A request measured in its policy's unit, with the lines it is compared with.

    `ceiling` is the most the view may measure: the effective input budget under a context
    policy, the character threshold under the legacy policy (whose unit is characters).
    """

    size: int
    trigger_at: int
    target_at: int
    ceiling: int
    unit: str  # "estimate" (the estimator's units) or "characters"


def measure_context(
    *,
    policy: TriggerPolicy,
    budget: ModelBudget,
    estimator: TokenEstimator,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
) -> ContextMeasure:
    """Return the size of the request `messages` + `tools` and its policy's lines, in one unit."""
    legacy = isinstance(policy, LegacyCharPolicy)
    trigger_at = policy.trigger_at(budget)
    return ContextMeasure(
        size=policy.measure(messages, tools, estimator) if messages else 0,
        trigger_at=trigger_at,
        target_at=policy.target_at(budget),
        ceiling=trigger_at if legacy else budget.effective_input_budget,
        unit="characters" if legacy else "estimate",
    )


def plan_reserve(*, policy: TriggerPolicy, budget: ModelBudget, estimator: TokenEstimator) -> int:
    """Return the room kept for the plan, in the policy's unit: the most a plan may measure."""
    longest = input_size(policy=policy, estimator=estimator, text="x" * PLAN_MAX_CHARS)
    return min(longest, int(policy.target_at(budget) * PLAN_MAX_SHARE))


@dataclass(frozen=True)
class InputCheck:
    """An input's size against the largest the run can take, in the policy's unit."""

    size: int
    limit: int

    @property
    def fits(self) -> bool:
        return self.size <= self.limit


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def input_size(*, policy: TriggerPolicy, estimator: TokenEstimator, text: str) -> int:
    """Return what one user message of `text` adds to a request."""
    return policy.measure([_user(text)], [], estimator) - policy.measure([], [], estimator)


def input_limit(
    *,
    policy: TriggerPolicy,
    budget: ModelBudget,
    estimator: TokenEstimator,
    system_prompt: str,
    tools: list[dict[str, Any]],
) -> int:
    """Return the largest input a run of this configuration takes (never below zero)."""
    pinned = policy.measure([{"role": "system", "content": system_prompt}], tools, estimator)
    plan = plan_reserve(policy=policy, budget=budget, estimator=estimator)
    return max(policy.target_at(budget) - pinned - plan, 0)


def check_input(
    *,
    policy: TriggerPolicy,
    budget: ModelBudget,
    estimator: TokenEstimator,
    system_prompt: str,
    tools: list[dict[str, Any]],
    text: str,
) -> InputCheck:
    """Return `text`'s size and the limit it must not exceed."""
    return InputCheck(
        size=input_size(policy=policy, estimator=estimator, text=text),
        limit=input_limit(
            policy=policy,
            budget=budget,
            estimator=estimator,
            system_prompt=system_prompt,
            tools=tools,
        ),
    )
