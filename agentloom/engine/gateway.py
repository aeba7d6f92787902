"""The model gateway interface, and the gateways the engine ships for tests and the demo.

A gateway turns one `ModelRequest` (OpenAI chat-completions messages and tool schemas) into one
`ModelResponse` (an assistant message). Real providers live in `agentloom.providers`; they
implement this interface and are picked by the Django side.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from agentloom.engine.errors import GatewayError

__all__ = [
    "PURPOSES",
    "GatewayError",
    "ModelGateway",
    "ModelRequest",
    "ModelResponse",
]

PURPOSES = ("action", "compaction", "verification")


@dataclass(frozen=True)
class ModelRequest:
    """One chat-completions call: what the model is shown and what it may call."""

    purpose: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    max_output_tokens: int = 4096
    instance: str = "main"


@dataclass
class ModelResponse:
    """An assistant message (`role`, `content`, `tool_calls`) and what the provider said."""

    message: dict[str, Any]
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "usage": self.usage,
            "finish_reason": self.finish_reason,
            "model": self.model,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelResponse:
        return cls(
            message=data["message"],
            usage=data.get("usage"),
            finish_reason=data.get("finish_reason"),
            model=data.get("model"),
        )


class ModelGateway(abc.ABC):
    """Sends one request to a model and returns its reply, or raises `GatewayError`."""

    provider: str = "unknown"
    model_id: str = "unknown"

    @abc.abstractmethod
    def complete(self, request: ModelRequest) -> ModelResponse:
        """Return the model's reply to `request`."""
