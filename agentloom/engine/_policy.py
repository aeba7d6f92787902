"""When to compact: the context policy of a published version, or the legacy character policy.

    budget trigger = estimated request >= effective_input_budget * context_ratio   (exactly)
    turns trigger  = user_turns  - baseline_user_turns  >= policy.user_turns        (if set)
    steps trigger  = model_steps - baseline_model_steps >= policy.model_steps       (if set)

Compaction runs when any enabled trigger holds. Versions published without a policy use the
legacy policy: compact when the view holds more than `LEGACY_CONTEXT_CHARS` characters.

From compaction version 5 a masking frees at least `mask_batch_ratio` of the effective input
budget at once, or does not happen (`mask_batch_at`): masking rewrites the middle of the
prompt, so one masking must pay for the prompt-cache misses it causes (Anthropic's
`clear_at_least` is the same rule). The field is left out of a policy's binding at its default
(`bound`), so the binding of a policy frozen before the field existed is unchanged; a new
default would come with a new compaction version.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import Any

from agentloom.engine._budget import ModelBudget, TokenEstimator
from agentloom.engine._errors import ConfigurationError
from agentloom.engine._protocol import message_text, tool_calls_of
from agentloom.engine._records import Counters

__all__ = [
    "DEFAULT_POLICY",
    "LEGACY_CONTEXT_CHARS",
    "MASK_BATCH_RATIO",
    "TRIGGER_BUDGET",
    "TRIGGER_CHARACTERS",
    "TRIGGER_MODEL_STEPS",
    "TRIGGER_USER_TURNS",
    "ContextPolicy",
    "LegacyCharPolicy",
    "TriggerPolicy",
    "load_policy",
    "view_characters",
]

LEGACY_CONTEXT_CHARS = 48_000
# The least share of the effective input budget one masking frees, by default (version 5 on).
MASK_BATCH_RATIO = 0.1
# The legacy policy had no target of its own; compaction aims at this share of its threshold.
LEGACY_TARGET_RATIO = 0.6

TRIGGER_BUDGET = "budget"
TRIGGER_USER_TURNS = "user_turns"
TRIGGER_MODEL_STEPS = "model_steps"
TRIGGER_CHARACTERS = "characters"
# Triggers that measure size; the others count turns and steps.
SIZE_TRIGGERS = frozenset({TRIGGER_BUDGET, TRIGGER_CHARACTERS})


def view_characters(messages: list[dict[str, Any]]) -> int:
    """Return the characters of the messages' text and tool-call names and arguments."""
    total = 0
    for message in messages:
        total += len(message_text(message))
        for call in tool_calls_of(message):
            function = call.get("function") or {}
            total += len(function.get("name") or "") + len(function.get("arguments") or "")
    return total


class TriggerPolicy(abc.ABC):
    """Measures a view, says which triggers fire, and where compaction should bring it."""

    max_compaction_calls: int

    @abc.abstractmethod
    def measure(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        estimator: TokenEstimator,
    ) -> int:
        """Return the size of a request in this policy's unit."""

    @abc.abstractmethod
    def trigger_at(self, budget: ModelBudget) -> int:
        """Return the size at which the size trigger fires."""

    @abc.abstractmethod
    def target_at(self, budget: ModelBudget) -> int:
        """Return the size at or below which compaction reached its target."""

    def mask_batch_at(self, budget: ModelBudget) -> int:
        """Return the least one masking frees, in this policy's unit (none by default)."""
        return 0

    @abc.abstractmethod
    def fired(self, *, size: int, counters: Counters, budget: ModelBudget) -> tuple[str, ...]:
        """Return the names of the triggers that hold, in a fixed order."""

    @abc.abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """Return every field of the policy."""

    def bound(self) -> dict[str, Any]:
        """Return the policy as bound into a checkpoint (and the views keyed by it)."""
        return self.to_dict()


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _optional_positive_int(field: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(field, "must be a positive integer or null")


@dataclass(frozen=True)
class ContextPolicy(TriggerPolicy):
    """Budget, turn and step triggers with a reduction target, as frozen in a published version."""

    context_ratio: float = 0.8
    target_ratio: float = 0.6
    user_turns: int | None = None
    model_steps: int | None = None
    max_compaction_calls: int = 4
    # The least share of the effective input budget one masking frees (compaction version 5 on).
    mask_batch_ratio: float = MASK_BATCH_RATIO

    def __post_init__(self) -> None:
        if not _is_number(self.context_ratio) or not 0 < self.context_ratio <= 1:
            raise ConfigurationError("context_ratio", "must be a number in (0, 1]")
        if not _is_number(self.target_ratio) or not self.target_ratio > 0:
            raise ConfigurationError("target_ratio", "must be a number above 0")
        if not self.target_ratio < self.context_ratio:
            raise ConfigurationError("target_ratio", "must be below context_ratio")
        _optional_positive_int("user_turns", self.user_turns)
        _optional_positive_int("model_steps", self.model_steps)
        calls = self.max_compaction_calls
        if isinstance(calls, bool) or not isinstance(calls, int) or not 1 <= calls <= 16:
            raise ConfigurationError("max_compaction_calls", "must be an integer from 1 to 16")
        if not _is_number(self.mask_batch_ratio) or not 0 <= self.mask_batch_ratio <= 1:
            raise ConfigurationError("mask_batch_ratio", "must be a number from 0 to 1")

    @classmethod
    def from_dict(cls, partial: dict[str, Any] | None) -> ContextPolicy:
        """Merge a partial policy over the defaults, then validate it."""
        partial = partial or {}
        if not isinstance(partial, dict):
            raise ConfigurationError("context_policy", "must be an object")
        for key in partial:
            if key not in DEFAULT_POLICY:
                raise ConfigurationError(key, "is not a context policy field")
        return cls(**{**DEFAULT_POLICY, **partial})

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def bound(self) -> dict[str, Any]:
        policy = self.to_dict()
        if policy["mask_batch_ratio"] == MASK_BATCH_RATIO:
            # At its default the field is left out: bindings made before it existed stay equal.
            del policy["mask_batch_ratio"]
        return policy

    def measure(self, messages, tools, estimator) -> int:
        return estimator.estimate(messages, tools)

    def trigger_at(self, budget: ModelBudget) -> int:
        # The trigger holds when the estimate reaches the exact product: 27,648 x 0.8 = 22,118.4,
        # so 22,118 does not fire and 22,119 does. Computed in exact fractions, never floats.
        return math.ceil(Fraction(repr(self.context_ratio)) * budget.effective_input_budget)

    def target_at(self, budget: ModelBudget) -> int:
        return budget.share(self.target_ratio)

    def mask_batch_at(self, budget: ModelBudget) -> int:
        return math.ceil(Fraction(repr(self.mask_batch_ratio)) * budget.effective_input_budget)

    def fired(self, *, size: int, counters: Counters, budget: ModelBudget) -> tuple[str, ...]:
        triggers = []
        if size >= self.trigger_at(budget):
            triggers.append(TRIGGER_BUDGET)
        turns = counters.user_turns - counters.baseline_user_turns
        if self.user_turns is not None and turns >= self.user_turns:
            triggers.append(TRIGGER_USER_TURNS)
        steps = counters.model_steps - counters.baseline_model_steps
        if self.model_steps is not None and steps >= self.model_steps:
            triggers.append(TRIGGER_MODEL_STEPS)
        return tuple(triggers)


# The defaults of every policy field, as the API and the console show them: ContextPolicy's own.
DEFAULT_POLICY: dict[str, Any] = {field.name: field.default for field in fields(ContextPolicy)}


@dataclass(frozen=True)
class LegacyCharPolicy(TriggerPolicy):
    """Compact when the view has more than `context_chars` characters; no turn or step trigger."""

    context_chars: int = LEGACY_CONTEXT_CHARS
    max_compaction_calls: int = 4

    def __post_init__(self) -> None:
        chars = self.context_chars
        if isinstance(chars, bool) or not isinstance(chars, int) or chars < 1:
            raise ConfigurationError("legacy_context_chars", "must be a positive integer")

    def to_dict(self) -> dict[str, Any]:
        return {"legacy_context_chars": self.context_chars}

    def measure(self, messages, tools, estimator) -> int:
        return view_characters(messages)

    def trigger_at(self, budget: ModelBudget) -> int:
        # "More than N characters" is "at least N + 1".
        return self.context_chars + 1

    def target_at(self, budget: ModelBudget) -> int:
        return int(self.context_chars * LEGACY_TARGET_RATIO)

    def fired(self, *, size: int, counters: Counters, budget: ModelBudget) -> tuple[str, ...]:
        return (TRIGGER_CHARACTERS,) if size >= self.trigger_at(budget) else ()


def load_policy(data: dict[str, Any] | None) -> TriggerPolicy:
    """Return the policy a version or checkpoint binding describes; none means legacy."""
    if data is None:
        return LegacyCharPolicy()
    if isinstance(data, dict) and "legacy_context_chars" in data:
        unknown = set(data) - {"legacy_context_chars"}
        if unknown:
            raise ConfigurationError(sorted(unknown)[0], "is not a legacy policy field")
        return LegacyCharPolicy(context_chars=data["legacy_context_chars"])
    return ContextPolicy.from_dict(data)
