"""Load the versioned manifest of exact model IDs whose windows were checked by hand.

`manifest.json` lists, per provider, models by their exact ID with `context_window`,
`max_output_cap`, `chat`, `source_url`, `verified_on` and, for chat models, the `tokenizer`
family (`o200k`, `cl100k`, `deepseek`). Lookups are by exact ID only: a dated snapshot or a
fine-tune is another model and is listed separately or not at all.
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["MANIFEST_PATH", "TOKENIZERS", "Manifest", "ManifestEntry", "load_manifest"]

MANIFEST_PATH = Path(__file__).with_name("manifest.json")
TOKENIZERS = ("o200k", "cl100k", "deepseek")


@dataclass(frozen=True)
class ManifestEntry:
    """What the manifest records about one exact model ID of one provider."""

    provider: str
    model_id: str
    chat: bool
    context_window: int | None
    max_output_cap: int | None
    source_url: str
    verified_on: str
    note: str | None = None
    tokenizer: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Manifest:
    """The manifest's version and its entries keyed by `(provider, model_id)`."""

    version: str
    entries: Mapping[tuple[str, str], ManifestEntry]

    def lookup(self, provider: str, model_id: str) -> ManifestEntry | None:
        """Return the entry for exactly this provider and model ID, or None."""
        return self.entries.get((provider, model_id))

    def lookup_any(self, model_id: str) -> list[ManifestEntry]:
        """Return the entries of every provider that lists exactly this model ID."""
        return [entry for (_, listed), entry in self.entries.items() if listed == model_id]


def load_manifest(path: Path | str | None = None) -> Manifest:
    """Return the manifest at `path` (default: the bundled one); raise ValueError if malformed."""
    if path is None:
        return _bundled()
    return _parse(json.loads(Path(path).read_text(encoding="utf-8")))


@functools.cache
def _bundled() -> Manifest:
    return _parse(json.loads(MANIFEST_PATH.read_text(encoding="utf-8")))


def _parse(document: Any) -> Manifest:
    if not isinstance(document, dict):
        raise ValueError("manifest: the document must be an object")
    version = document.get("version")
    if not isinstance(version, str) or not version:
        raise ValueError("manifest: version must be a non-empty string")
    providers = document.get("models")
    if not isinstance(providers, dict):
        raise ValueError("manifest: models must be an object of providers")
    entries: dict[tuple[str, str], ManifestEntry] = {}
    for provider, models in providers.items():
        if not isinstance(models, dict):
            raise ValueError(f"manifest: models.{provider} must be an object of model IDs")
        for model_id, fields in models.items():
            entries[(provider, model_id)] = _entry(provider, model_id, fields)
    return Manifest(version=version, entries=entries)


def _entry(provider: str, model_id: str, fields: Any) -> ManifestEntry:
    where = f"manifest: {provider}/{model_id}"
    if not isinstance(fields, dict):
        raise ValueError(f"{where}: must be an object")
    chat = fields.get("chat")
    if not isinstance(chat, bool):
        raise ValueError(f"{where}: chat must be true or false")
    window = _optional_positive(fields.get("context_window"), f"{where}: context_window")
    cap = _optional_positive(fields.get("max_output_cap"), f"{where}: max_output_cap")
    if chat and window is None:
        raise ValueError(f"{where}: a chat model needs a context_window")
    if window is not None and cap is not None and cap > window:
        raise ValueError(f"{where}: max_output_cap exceeds context_window")
    source_url = fields.get("source_url")
    if not isinstance(source_url, str) or not source_url.startswith("https://"):
        raise ValueError(f"{where}: source_url must be an https URL")
    verified_on = fields.get("verified_on")
    try:
        datetime.date.fromisoformat(verified_on)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: verified_on must be an ISO date") from None
    note = fields.get("note")
    if note is not None and not isinstance(note, str):
        raise ValueError(f"{where}: note must be a string")
    tokenizer = fields.get("tokenizer")
    if tokenizer is not None and tokenizer not in TOKENIZERS:
        raise ValueError(f"{where}: tokenizer must be one of {TOKENIZERS}")
    return ManifestEntry(
        provider=provider,
        model_id=model_id,
        chat=chat,
        context_window=window,
        max_output_cap=cap,
        source_url=source_url,
        verified_on=verified_on,
        note=note,
        tokenizer=tokenizer,
    )


def _optional_positive(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where} must be a positive integer or null")
    return value
