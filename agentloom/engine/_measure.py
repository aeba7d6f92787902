"""The measure of a context, and the largest input a run can take, in the policy's own unit.

`measure_context` is the one place a view is measured against its policy: the engine's triggers,
the API's run context and the console's meter all read it, so they always agree.

    input_limit = target_at - size([system prompt], offered tool schemas) - plan_reserve

A question or supplement is one message the run must carry until compaction can summarise it,
and compaction can only work below its target once the pinned content (system prompt, tool
schemas, the plan at its size cap) is counted. An input larger than what is left would leave a
run that can never compact below its target, so it is refused before anything is journaled.

The room for a question (`question_room`) is what a version leaves for the conversation itself
once everything else that must fit under the trigger is counted:

    question_room = trigger_at - size([system prompt], tool schemas) - plan_reserve
                    - summary limit - large-record limit

where the tool schemas are every tool a request of the version may offer (`read_record` too under
a large-record policy: offered from the first request since rendering 4), the summary limit is
the handoff summary's reserve (`SUMMARY_RESERVE_SHARE` of the target,
at most the model's output limit) and the large-record limit is one excerpt's share (zero without
a large-record policy). Publishing refuses a version whose room is below `QUESTION_ROOM_FLOOR`:
such an agent could hold a question, a summary and one tool result under its trigger only by
luck, so its sessions could not be kept alive.

The unit is the policy's: estimator units for a context policy, characters for the legacy
character policy.

A step measures its payload once (`one_measure_per_step`, opened by the engine around each model
step): the trigger check, the prepared request's hard check and the engine's check of what the
gateway sends each build the gateway's payload and measure it through `step_measure`, which
computes each figure (estimate, upper bound, a calibrated decision) of one payload once and gives
it again while the next payload measured has exactly the same messages and tool schemas (equal
item by item; the same objects in the same order when nothing changed between them). Another
payload (a compaction changed the view, a summary request) is measured anew. The server
tokenizer's estimator is not memoised: each measure records the counts and the fallback it used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from agentloom.engine._budget import ModelBudget, TokenEstimator
from agentloom.engine._calibration import CalibratedEstimator
from agentloom.engine._policy import LegacyCharPolicy, TriggerPolicy
from agentloom.engine._server_count import server_estimator_of

__all__ = [
    "PLAN_MAX_CHARS",
    "PLAN_MAX_SHARE",
    "QUESTION_ROOM_FLOOR",
    "ContextMeasure",
    "InputCheck",
    "QuestionRoom",
    "check_input",
    "input_limit",
    "input_size",
    "measure_context",
    "one_measure_per_step",
    "plan_reserve",
    "question_room",
    "step_measure",
]

# The largest plan an agent may keep (pinned through compaction): the size of this many
# characters, and no more than this share of the compaction target, so a small window (or a
# legacy character threshold) keeps room for its inputs.
PLAN_MAX_CHARS = 4_000
PLAN_MAX_SHARE = 0.1
# The least room for a question a version may be published with (in the policy's unit).
QUESTION_ROOM_FLOOR = 512
# The handoff summary's reserve: this share of the compaction target (as `_compaction` keeps).
SUMMARY_RESERVE_SHARE = 0.2


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


@dataclass(frozen=True)
class QuestionRoom:
    """The room a version leaves for a question under its trigger, with every figure counted."""

    trigger_at: int
    pinned: int  # the system prompt and the tool schemas
    plan: int
    summary: int
    large_record: int

    @property
    def room(self) -> int:
        return self.trigger_at - self.pinned - self.plan - self.summary - self.large_record

    @property
    def fits(self) -> bool:
        return self.room >= QUESTION_ROOM_FLOOR

    def to_dict(self) -> dict[str, int]:
        return {
            "room": self.room,
            "floor": QUESTION_ROOM_FLOOR,
            "trigger_at": self.trigger_at,
            "system_prompt_and_tools": self.pinned,
            "plan_reserve": self.plan,
            "summary_limit": self.summary,
            "large_record_limit": self.large_record,
        }

    def describe(self) -> str:
        return (
            f"The room for a question is {self.room:,} (trigger {self.trigger_at:,} - system "
            f"prompt and tool schemas {self.pinned:,} - plan reserve {self.plan:,} - summary limit "
            f"{self.summary:,} - large-record limit {self.large_record:,}), below the floor of "
            f"{QUESTION_ROOM_FLOOR:,}: offer fewer tools, shorten the system prompt or use a "
            "larger context window."
        )


def question_room(
    *,
    policy: TriggerPolicy,
    budget: ModelBudget,
    estimator: TokenEstimator,
    system_prompt: str,
    tools: list[dict[str, Any]],
    large_record_limit: int = 0,
) -> QuestionRoom:
    """Return the room for a question of this configuration (see the module docstring)."""
    pinned = policy.measure([{"role": "system", "content": system_prompt}], tools, estimator)
    target = policy.target_at(budget)
    return QuestionRoom(
        trigger_at=policy.trigger_at(budget),
        pinned=pinned,
        plan=plan_reserve(policy=policy, budget=budget, estimator=estimator),
        summary=min(int(target * SUMMARY_RESERVE_SHARE), budget.max_output_tokens),
        large_record=large_record_limit,
    )


# --- one measure per step ----------------------------------------------------------------------


class _StepFigures:
    """The figures of the payload a step measured last (one payload: the step sends one)."""

    def __init__(self) -> None:
        self._sent: tuple[TokenEstimator, tuple[Any, ...], tuple[Any, ...]] | None = None
        self._figures: dict[str, Any] = {}

    def figure(
        self,
        estimator: TokenEstimator,
        name: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        compute: Callable[[], Any],
    ) -> Any:
        sent = (estimator, tuple(messages), tuple(tools))
        last = self._sent
        if last is None or last[0] is not estimator or last[1:] != sent[1:]:
            self._sent, self._figures = sent, {}
        if name not in self._figures:
            self._figures[name] = compute()
        return self._figures[name]


_STEP: ContextVar[_StepFigures | None] = ContextVar("agentloom_step_figures", default=None)


@contextmanager
def one_measure_per_step() -> Iterator[None]:
    """Measure each payload of the step within once (see the module docstring)."""
    token = _STEP.set(_StepFigures())
    try:
        yield
    finally:
        _STEP.reset(token)


class _OnceMeasured(TokenEstimator):
    """Measures with `inner`, each figure of the step's payload once."""

    def __init__(self, inner: TokenEstimator, figures: _StepFigures):
        self.inner = inner
        self.figures = figures
        self.module_id = inner.module_id
        self.config = inner.config

    def binding(self) -> dict[str, Any]:
        return self.inner.binding()

    def estimate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        if isinstance(self.inner, CalibratedEstimator):
            return self.decision(messages, tools)["estimate"]
        return self.figures.figure(
            self.inner, "estimate", messages, tools, lambda: self.inner.estimate(messages, tools)
        )

    def upper_bound(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        if type(self.inner).upper_bound is TokenEstimator.upper_bound:
            # The default bound is the estimate itself.
            return self.estimate(messages, tools)
        return self.figures.figure(
            self.inner,
            "upper_bound",
            messages,
            tools,
            lambda: self.inner.upper_bound(messages, tools),
        )

    def decision(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict:
        """Return a calibrated estimator's decision (`CalibratedEstimator.decision`)."""
        inner = self.inner
        assert isinstance(inner, CalibratedEstimator)
        decided = self.figures.figure(
            inner, "decision", messages, tools, lambda: inner.decision(messages, tools)
        )
        return dict(decided)


def step_measure(estimator: TokenEstimator) -> TokenEstimator:
    """Return what measures a payload with `estimator` in the step under way: each figure once
    (`one_measure_per_step`); outside a step, or with the server's tokenizer, `estimator`."""
    figures = _STEP.get()
    if figures is None or server_estimator_of(estimator) is not None:
        return estimator
    return _OnceMeasured(estimator, figures)
