"""Source records of an instance, their entry keys, and the turn and step counters.

A record is what an instance actually received or produced, in order. Records are append-only:
compaction, projection and resume read them and never change them.

Entry keys are stable and unique within an instance, because the database deduplicates on
(run, instance, entry_key) and re-saving a checkpoint must insert nothing new:

| kind          | entry_key                 |
|---------------|---------------------------|
| `user_input`  | `user_input`              |
| `assistant`   | `assistant:<step>`        |
| `tool_result` | `tool:<call id>`          |
| `supplement`  | `supplement:<source key>` |
| `feedback`    | `feedback:<n>`            |
| `status`      | `status:<attempt>`        |

A run from before the journal adopts what survives of it under `legacy:<n>` (`legacy_key`;
`sessions_app.services.legacy`), whatever the kind.

`<step>` and `<n>` count from 1 within the instance. Call ids are assigned by the engine
(`r<run>-<step>-<n>`, or `r<child id>-<step>-<n>` in a child), so they are unique within the
session whatever ids the provider returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentloom.engine._errors import FrameError

__all__ = [
    "KINDS",
    "LEGACY_KEY_PREFIX",
    "MAIN_INSTANCE",
    "USER_INPUT_KEY",
    "Counters",
    "Record",
    "assistant_key",
    "feedback_key",
    "legacy_key",
    "status_key",
    "supplement_key",
    "tool_key",
]

KINDS = ("user_input", "supplement", "assistant", "tool_result", "feedback", "status")
MAIN_INSTANCE = "main"
USER_INPUT_KEY = "user_input"


def assistant_key(step: int) -> str:
    """Return the entry key of the instance's `step`-th action response."""
    return f"assistant:{step}"


def tool_key(call_id: str) -> str:
    """Return the entry key of the result of tool call `call_id`."""
    return f"tool:{call_id}"


LEGACY_KEY_PREFIX = "legacy:"


def legacy_key(index: int) -> str:
    """Return the entry key of the `index`-th message adopted from a run before the journal."""
    return f"{LEGACY_KEY_PREFIX}{index}"


def supplement_key(source_key: str) -> str:
    """Return the entry key of the supplement taken from the queue under `source_key`."""
    return f"supplement:{source_key}"


def feedback_key(number: int) -> str:
    """Return the entry key of the instance's `number`-th feedback record."""
    return f"feedback:{number}"


def status_key(attempt: int) -> str:
    """Return the entry key of the terminal status of execution `attempt`."""
    return f"status:{attempt}"


@dataclass(frozen=True)
class Record:
    """One source record: `message` is a chat message, or `{status, error}` for `status`."""

    seq: int
    kind: str
    message: dict[str, Any]
    entry_key: str
    at: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "kind": self.kind,
            "message": self.message,
            "entry_key": self.entry_key,
            "at": self.at,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        try:
            record = cls(
                seq=int(data["seq"]),
                kind=str(data["kind"]),
                message=dict(data["message"]),
                entry_key=str(data["entry_key"]),
                at=str(data["at"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise FrameError(f"malformed record: {exc!r}") from exc
        if record.kind not in KINDS:
            raise FrameError(f"unknown record kind {record.kind!r}")
        return record


@dataclass
class Counters:
    """Totals of user turns and model steps, and where the last successful compaction left them."""

    user_turns: int = 0
    model_steps: int = 0
    baseline_user_turns: int = 0
    baseline_model_steps: int = 0

    def advance_baselines(self) -> None:
        """Move the baselines to the current totals, as a successful compaction does."""
        self.baseline_user_turns = self.user_turns
        self.baseline_model_steps = self.model_steps

    def to_dict(self) -> dict[str, int]:
        return {
            "user_turns": self.user_turns,
            "model_steps": self.model_steps,
            "baseline_user_turns": self.baseline_user_turns,
            "baseline_model_steps": self.baseline_model_steps,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Counters:
        data = data or {}
        try:
            return cls(**{name: int(data.get(name, 0)) for name in cls().to_dict()})
        except (TypeError, ValueError) as exc:
            raise FrameError(f"malformed counters: {exc!r}") from exc
