"""Replace known runtime credentials with `[redacted]` before anything is recorded or sent."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["REDACTED", "Redactor"]

REDACTED = "[redacted]"


class Redactor:
    """Replace each known secret string wherever it appears in text or nested JSON values."""

    def __init__(self, secrets: Iterable[str] = ()):
        # Longest first, so a secret that contains another is replaced whole.
        self.secrets = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def text(self, value: str) -> str:
        """Return `value` with every secret replaced."""
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value

    def value(self, data: Any) -> Any:
        """Return a copy of a JSON value with every secret in its strings replaced."""
        if not self.secrets:
            return data
        if isinstance(data, str):
            return self.text(data)
        if isinstance(data, dict):
            return {key: self.value(item) for key, item in data.items()}
        if isinstance(data, list | tuple):
            return [self.value(item) for item in data]
        return data
