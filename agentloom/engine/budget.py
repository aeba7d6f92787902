"""The model budget and the token estimators that measure requests against it.

    effective_input_budget = context_window - max_output_tokens - safety_margin_tokens

The default estimator counts UTF-8 bytes of the JSON request plus an envelope per message and per
tool. A byte is never less than a token, so it is conservative: it may compact well before a real
tokenizer would, and it is not the `usage` a provider reports. Estimators are injectable; their
`module_id` and `config` are bound into the checkpoint so a resumed run measures the same way.
"""

from __future__ import annotations

import abc
import json
from dataclasses import dataclass
from typing import Any

from agentloom.engine.errors import ConfigurationError

__all__ = [
    "DEFAULT_ESTIMATOR_ID",
    "JsonBytesEstimator",
    "ModelBudget",
    "TokenEstimator",
    "estimator_from_binding",
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


class TokenEstimator(abc.ABC):
    """Estimates the input size of a whole request (messages and tool schemas)."""

    module_id: str
    config: dict[str, Any]

    @abc.abstractmethod
    def estimate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        """Return the estimated input size of a request with these messages and tools."""

    def binding(self) -> dict[str, Any]:
        """Return what the checkpoint records about this estimator."""
        return {"module_id": self.module_id, "config": dict(self.config)}


DEFAULT_ESTIMATOR_ID = "agentloom.engine.budget.JsonBytesEstimator/1"


class JsonBytesEstimator(TokenEstimator):
    """UTF-8 bytes of the JSON request plus an envelope per request, message and tool."""

    module_id = DEFAULT_ESTIMATOR_ID

    def __init__(self, *, per_request: int = 16, per_message: int = 12, per_tool: int = 16):
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

    def estimate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        size = self._per_request + self._per_message * len(messages)
        size += len(json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode())
        if tools:
            size += self._per_tool * len(tools)
            size += len(json.dumps(tools, ensure_ascii=False, separators=(",", ":")).encode())
        return size


def estimator_from_binding(binding: dict[str, Any] | None) -> TokenEstimator:
    """Return the estimator a checkpoint's binding names (the default when it names none)."""
    if not binding:
        return JsonBytesEstimator()
    module_id = binding.get("module_id")
    if module_id != DEFAULT_ESTIMATOR_ID:
        raise ConfigurationError("estimator", f"unknown estimator module {module_id!r}")
    config = binding.get("config") or {}
    unknown = set(config) - {"per_request", "per_message", "per_tool"}
    if unknown:
        raise ConfigurationError("estimator", f"unknown config keys {sorted(unknown)}")
    return JsonBytesEstimator(**config)
