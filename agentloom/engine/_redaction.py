"""Replace known runtime credentials with `[redacted]` before anything is recorded or sent."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["REDACTED", "Redactor", "StreamRedactor"]

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


class StreamRedactor:
    """Redact text that arrives in pieces, so that a secret split across pieces is still caught.

    `feed(piece)` returns what may be shown now: everything but the longest tail that could
    still begin a secret, which is held back until the next piece decides it. `flush()`
    returns the rest once the text is complete.
    """

    def __init__(self, redactor: Redactor):
        self.redactor = redactor
        self._pending = ""

    def feed(self, piece: str) -> str:
        text = self.redactor.text(self._pending + piece)
        hold = self._held(text)
        self._pending = text[len(text) - hold :] if hold else ""
        return text[: len(text) - hold]

    def flush(self) -> str:
        text, self._pending = self._pending, ""
        return self.redactor.text(text)

    def _held(self, text: str) -> int:
        """Return the length of the longest tail of `text` that begins some secret."""
        secrets = self.redactor.secrets
        longest = max((len(s) for s in secrets), default=0)
        for size in range(min(len(text), longest - 1), 0, -1):
            tail = text[-size:]
            if any(secret.startswith(tail) for secret in secrets):
                return size
        return 0
