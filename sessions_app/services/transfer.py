"""The session transfer format: JSON Lines, signed with a key of the deployment.

A file is one JSON object per line, each with a `type`, in this order:

- `header` — `format` (`agentloom.session`), `format_version`, the AgentLoom version, the session
  (id, title, created_at, origin), its agent version with the snapshot (secrets left out), who
  exported it and when, and `records`: how many journal records follow;
- `record` — every journal record in session order: `seq`, `run` (the run's number), `instance`,
  `kind`, `entry_key`, `local_seq`, `message` (decrypted, reasoning included), `created_at`, and
  `origin_seq` on a fork's copy;
- `run` — each run: number, status, question, answer, error, attempt, counters, times;
- `compaction` — each compaction attempt of a run with the journal ranges it summarised or
  masked; `reference` — each journal range a run's compaction snapshot refers to;
- `view` — each reusable view by reference (its entries name records by seq; only the messages
  that exist nowhere else, the summaries and placeholders, are written out);
- `model_call` — each gateway call: purpose, instance, usage, cost; its response only when asked;
- `signature` — last: `lines` (how many came before) and `hmac`, an HMAC-SHA256 of every byte
  before it.

The signing key is `SESSION_EXPORT_KEY`, else derived with HKDF from the field key; a file signed
under a fallback field key still verifies, so rotating the field key keeps old exports importable.
A file no key of this deployment signed (another deployment's, or altered) is refused whole.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

FORMAT = "agentloom.session"
FORMAT_VERSION = 1
LINE_TYPES = ("header", "record", "run", "compaction", "reference", "view", "model_call")
_HKDF_INFO = b"agentloom session exports v1"

# Keys of a snapshot (at any depth) that may hold a secret: never written to a file.
SECRET_NAMES = frozenset(
    {
        "api_key",
        "authorization",
        "headers",
        "password",
        "secret",
        "token",
        "access_token",
        "refresh_token",
        "client_secret",
    }
)


def without_secrets(value: Any) -> Any:
    """Return `value` with every key named like a secret left out, at any depth."""
    if isinstance(value, dict):
        return {
            key: without_secrets(item)
            for key, item in value.items()
            if str(key).lower() not in SECRET_NAMES
        }
    if isinstance(value, list):
        return [without_secrets(item) for item in value]
    return value


def _derived(secret: str) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_HKDF_INFO).derive(
        secret.encode()
    )


def signing_keys() -> list[bytes]:
    """Return the keys that verify a file, the one that signs first."""
    if settings.SESSION_EXPORT_KEY:
        return [_derived(settings.SESSION_EXPORT_KEY)]
    keys = [settings.FIELD_ENCRYPTION_KEY, *settings.FIELD_ENCRYPTION_KEY_FALLBACKS]
    return [_derived(key) for key in keys]


def dump_line(item: dict[str, Any]) -> bytes:
    """Return one line of a file: compact JSON and a newline."""
    return (
        json.dumps(item, ensure_ascii=False, separators=(",", ":"), default=str).encode(
            "utf-8", "surrogatepass"
        )
        + b"\n"
    )


class Signer:
    """The HMAC of a file as it is written (or read), line by line, under every key at once."""

    def __init__(self, keys: list[bytes] | None = None):
        self._macs = [hmac.new(key, digestmod=hashlib.sha256) for key in keys or signing_keys()]
        self.lines = 0

    def update(self, line: bytes) -> None:
        for mac in self._macs:
            mac.update(line)
        self.lines += 1

    def signature_line(self) -> bytes:
        """Return the last line of a file: the signature of every line before it."""
        return dump_line(
            {"type": "signature", "lines": self.lines, "hmac": self._macs[0].hexdigest()}
        )

    def verifies(self, hexdigest: str) -> bool:
        """Return whether one of the keys signed what was read."""
        return any(hmac.compare_digest(mac.hexdigest(), str(hexdigest)) for mac in self._macs)
