"""The model budget and the token estimators that measure requests against it.

    effective_input_budget = context_window - max_output_tokens - safety_margin_tokens

The default estimator counts UTF-8 bytes of the JSON request plus an envelope per message and per
tool. A byte is never less than a token, so it is conservative: it may compact well before a real
tokenizer would, and it is not the `usage` a provider reports. Tokenizer estimators
(`agentloom.engine._estimators`) count real tokens. Estimators are injectable; their `module_id`
and `config` are bound into the checkpoint so a resumed run measures the same way.

The soft triggers (when to compact, how far) use `estimate`; the hard check that refuses to send
a request over the effective input budget uses `upper_bound`. `budget_refusal` is that check: the
context manager applies it to each request it prepares, the engine to what the gateway would send.

A server that refuses a request as too long teaches the run a smaller window (`learned_window`):

- the window it names, when it names one and that window is below the refused request's size
  plus the output and safety reserve (a request the hard check measured within the named window
  was refused anyway: the server's tokens are not bounded by the measure, so the number alone
  cannot be trusted to let the retry through);
- otherwise, when it names its window and how many tokens it counted in the refused request's
  input, and that count is above the measure, the named window scaled by measure / count: the
  measure falls short of the server's count (a chat template, tool schemas rendered its own
  way) and the window in the measure's units is what still fits;
- otherwise the largest request that succeeded in this run and binding is a size the server
  took: the effective input budget becomes that size, when it is below the refused one; with no
  such request, half the refused size;
- never larger than the budget in force (itself never larger than the frozen one).

Every request the run sends later is measured within the learned budget, so a limit learned from
a named window or from a request the server took is refused at most once.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

from agentloom.engine._errors import ConfigurationError
from agentloom.engine._sizecache import DEFAULT_CACHE_ITEMS, JSON_BYTES, SizeCache, json_bytes

__all__ = [
    "DEFAULT_ESTIMATOR_ID",
    "BoundMeasure",
    "JsonBytesEstimator",
    "LearnedLimit",
    "ModelBudget",
    "TokenEstimator",
    "budget_refusal",
    "estimator_from_binding",
    "learned_window",
]


def _require_int(field: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(field, "must be an integer")
    if value < minimum:
        raise ConfigurationError(field, f"must be at least {minimum}")


@dataclass(frozen=True)
class ModelBudget:
    """The context window of a model and what is reserved for its output and for safety."""

    context_window: int
    max_output_tokens: int
    safety_margin_tokens: int

    def __post_init__(self) -> None:
        _require_int("context_window", self.context_window, minimum=1)
        _require_int("max_output_tokens", self.max_output_tokens, minimum=1)
        _require_int("safety_margin_tokens", self.safety_margin_tokens, minimum=0)
        if self.effective_input_budget <= 0:
            raise ConfigurationError(
                "context_window",
                f"leaves no input budget: {self.context_window} - {self.max_output_tokens} "
                f"(max_output_tokens) - {self.safety_margin_tokens} (safety_margin_tokens) "
                f"= {self.effective_input_budget}",
            )

    @property
    def effective_input_budget(self) -> int:
        return self.context_window - self.max_output_tokens - self.safety_margin_tokens

    def share(self, ratio: float) -> int:
        """Return `ratio` of the effective input budget, rounded down."""
        return int(self.effective_input_budget * ratio)

    def within(self, window: int) -> ModelBudget:
        """Return this budget for a smaller window learned from the server.

        The output limit and the safety margin keep their shares of the window, never more than
        before and the output limit at least 1: a reservation chosen for an assumed 32K window
        (4,096 + 1,024) would leave a 4K one no input, where an eighth and a sixteenth of it
        (512 + 256) leave most of it. A window that is not smaller returns this budget.
        """
        if window >= self.context_window:
            return self
        output = self.max_output_tokens * window // self.context_window
        margin = self.safety_margin_tokens * window // self.context_window
        return ModelBudget(window, max(1, output), margin)

    def to_dict(self) -> dict[str, int]:
        return {
            "context_window": self.context_window,
            "max_output_tokens": self.max_output_tokens,
            "safety_margin_tokens": self.safety_margin_tokens,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelBudget:
        for name in ("context_window", "max_output_tokens", "safety_margin_tokens"):
            if name not in data:
                raise ConfigurationError(name, "is required")
        return cls(data["context_window"], data["max_output_tokens"], data["safety_margin_tokens"])


@dataclass(frozen=True)
class LearnedLimit:
    """What a run learned from a refusal and applied: a smaller window, or a reasoning rule.

    `kind` is "context_window" (`value`: the window in tokens) or "reasoning" (`value`: the rule,
    such as "tool_spans"); `evidence` is a short phrase of what the server said (never its raw
    body); `refused` the size of the refused request and `largest_ok` of the largest one the run
    sent with success, in the budget's unit (None when not known).
    """

    kind: str
    value: int | str
    evidence: str
    refused: int | None = None
    largest_ok: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "value": self.value,
            "evidence": self.evidence,
            "refused": self.refused,
            "largest_ok": self.largest_ok,
        }


def learned_window(
    budget: ModelBudget,
    *,
    named: int | None,
    refused: int,
    largest_ok: int | None,
    counted: int | None = None,
) -> int:
    """Return the context window a length refusal teaches (see the module docstring).

    `named` is the window the server's refusal names (None: it named none), `refused` the
    measured size of the refused request, `largest_ok` the largest that succeeded and `counted`
    the server's count of the refused request's input (None: not said). The result may leave
    no input room (at most the reserve): the version must be republished.
    """
    reserve = budget.max_output_tokens + budget.safety_margin_tokens
    if named is not None and named - reserve < refused:
        window = named
    elif named is not None and counted is not None and counted > refused:
        window = named * refused // counted
    elif largest_ok is not None and largest_ok < refused:
        window = largest_ok + reserve
    else:
        window = refused // 2 + reserve
    return max(min(window, budget.context_window), 1)


def budget_refusal(purpose: str, bound: int, budget: ModelBudget) -> str | None:
    """Return why a `purpose` request of upper bound `bound` is not sent; None when it fits."""
    effective = budget.effective_input_budget
    if bound <= effective:
        return None
    return (
        f"context_budget_exceeded: the {purpose} request is estimated at {bound}, "
        f"above the effective input budget of {effective}"
    )


class TokenEstimator(abc.ABC):
    """Estimates the input size of a whole request (messages and tool schemas)."""

    module_id: str
    config: dict[str, Any]
    # The keys `config` may hold; a binding with any other key is refused.
    config_keys: tuple[str, ...] = ()

    @abc.abstractmethod
    def estimate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        """Return the estimated input size of a request with these messages and tools."""

    def upper_bound(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        """Return the size the hard budget check compares with the effective input budget.

        It is the estimator's best figure that the provider's count does not exceed: a tokenizer
        estimator's count, the byte estimator's estimate (a token is at least one byte). An
        estimator whose `estimate` may fall short of the real count overrides this.
        """
        return self.estimate(messages, tools)

    def binding(self) -> dict[str, Any]:
        """Return what the checkpoint records about this estimator."""
        return {"module_id": self.module_id, "config": dict(self.config)}


DEFAULT_ESTIMATOR_ID = "agentloom.engine.budget.JsonBytesEstimator/1"


class JsonBytesEstimator(TokenEstimator):
    """UTF-8 bytes of the JSON request plus an envelope per request, message and tool.

    Each message's and tool's byte count is cached, so a view that grew by k messages costs k
    serialisations: `len(json.dumps(items))` is 2 brackets, the items' own lengths and a comma
    between each two.
    """

    module_id = DEFAULT_ESTIMATOR_ID
    config_keys = ("per_request", "per_message", "per_tool")

    def __init__(
        self,
        *,
        per_request: int = 16,
        per_message: int = 12,
        per_tool: int = 16,
        cache_size: int = DEFAULT_CACHE_ITEMS,
    ):
        for field, value in (
            ("per_request", per_request),
            ("per_message", per_message),
            ("per_tool", per_tool),
        ):
            _require_int(f"estimator.{field}", value, minimum=0)
        self.config = {"per_request": per_request, "per_message": per_message, "per_tool": per_tool}
        self._per_request = per_request
        self._per_message = per_message
        self._per_tool = per_tool
        # A byte length is the item's alone: the process's cache serves every estimator (see
        # `_sizecache.JSON_BYTES`), unless a cache of another size is asked for.
        if cache_size == DEFAULT_CACHE_ITEMS:
            self._messages = self._tools = JSON_BYTES
        else:
            self._messages = SizeCache(max_items=cache_size, content_keys=False)
            self._tools = SizeCache(max_items=cache_size, content_keys=False)

    def estimate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        size = self._per_request + self._per_message * len(messages)
        size += _json_list_bytes(messages, self._messages)
        if tools:
            size += self._per_tool * len(tools)
            size += _json_list_bytes(tools, self._tools)
        return size


class BoundMeasure(TokenEstimator):
    """Measures with another estimator's `upper_bound`: the hard check's own count.

    Compaction from version 5 measures with it, so that a view it accepts below the trigger is
    one the hard check sends (an estimator whose estimate runs below its bound — the server's
    tokenizer without the template's margins — could otherwise leave a view the check refuses).
    """

    def __init__(self, inner: TokenEstimator):
        self.inner = inner
        self.module_id = inner.module_id
        self.config = inner.config

    def binding(self) -> dict[str, Any]:
        return self.inner.binding()

    def estimate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        return self.inner.upper_bound(messages, tools)

    def upper_bound(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        return self.inner.upper_bound(messages, tools)


def _json_list_bytes(items: list[Any], cache: SizeCache) -> int:
    """Return the UTF-8 length of the compact JSON of `items`, from cached item lengths."""
    return 2 + max(len(items) - 1, 0) + cache.total(items, json_bytes)


def estimator_from_binding(binding: dict[str, Any] | None, counter: Any = None) -> TokenEstimator:
    """Return the estimator a checkpoint's binding names (the default when it names none).

    `counter` (a `TokenCounter`) is attached to an estimator that counts with the server's
    tokenizer; any other estimator ignores it.
    """
    if not binding:
        return JsonBytesEstimator()
    # Imported here because the tokenizer estimators build on this module.
    from agentloom.engine._estimators import ESTIMATOR_CLASSES

    module_id = binding.get("module_id")
    estimator_class = ESTIMATOR_CLASSES.get(module_id) if isinstance(module_id, str) else None
    if estimator_class is None:
        raise ConfigurationError("estimator", f"unknown estimator module {module_id!r}")
    config = binding.get("config") or {}
    if not isinstance(config, dict):
        raise ConfigurationError("estimator", "config must be an object")
    unknown = set(config) - set(estimator_class.config_keys)
    if unknown:
        raise ConfigurationError("estimator", f"unknown config keys {sorted(unknown)}")
    estimator = estimator_class(**config)
    attach = getattr(estimator, "attach", None)
    if counter is not None and attach is not None:
        attach(counter)
    return estimator
