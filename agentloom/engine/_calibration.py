"""Calibrate a byte estimator against the prompt tokens the provider reports.

UTF-8 bytes over-count tokens several times, so on a `bytes` connection the budget trigger would
fire at a fraction of the real window. A version published with calibration measures its
requests for triggers and targets with `CalibratedEstimator`:

- after each action call whose usage reports prompt tokens, the ratio reported / bytes of that
  request is a sample; the run's ratio is the median of its last `samples` samples, or the ratio
  the connection's recent calls gave when the run started;
- a request that extends the last reported one (the same messages, then more) measures as the
  reported tokens plus the ratio times the bytes appended since; any other request as the ratio
  times its bytes. "Extends" is decided on content, never on object identity: a digest of the
  exact reported messages, tools and estimator binding must equal the digest of the request's
  first messages, its tools and binding. The reported call (`base`) is kept with the samples in
  the checkpoint, so a resume starts from it.

The hard budget check never uses the ratio. `upper_bound` is the reported tokens plus the raw
bytes appended since, for a request that extends the last reported one, else the raw byte count:
a token is never less than a byte. A ratio learned on English that meets Chinese or base64 may
move a trigger, never let an over-budget request out. Compaction measures in the same upper-bound
units (`bound_estimator`), so what it leaves can be sent by the hard check's own count, and a
request the hard check would refuse triggers compaction whatever its calibrated size.

What a decision used is recorded: the run's samples and starting ratio live in the checkpoint
(`state.calibration`), and every model call reports the ratio and reported base it was measured
with, so a replay given the same starting ratio makes the same decisions.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import dataclass, field
from typing import Any

from agentloom.engine._budget import TokenEstimator
from agentloom.engine._errors import ConfigurationError

__all__ = [
    "DEFAULT_SAMPLES",
    "CalibratedEstimator",
    "Calibration",
    "calibration_config",
    "resumed_estimator",
]

DEFAULT_SAMPLES = 5


def calibration_config(data: Any) -> dict[str, int] | None:
    """Return a version's calibration setting (None: not calibrated), validated."""
    if data is None:
        return None
    if not isinstance(data, dict) or set(data) - {"samples"}:
        raise ConfigurationError("calibration", "must be an object with `samples` only")
    samples = data.get("samples", DEFAULT_SAMPLES)
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= 50:
        raise ConfigurationError("calibration", "samples must be an integer from 1 to 50")
    return {"samples": samples}


@dataclass
class Calibration:
    """A run's learned ratio of reported tokens to estimated bytes."""

    start: float | None = None
    samples: list[float] = field(default_factory=list)
    keep: int = DEFAULT_SAMPLES
    # The last reported action request: message count, digest, reported tokens and raw size.
    base: dict[str, Any] | None = None
    # The reported request the run started from (the session's last), kept for replay.
    start_base: dict[str, Any] | None = None

    @property
    def ratio(self) -> float | None:
        """Return the ratio in force: the median of recent samples, else the starting one."""
        if self.samples:
            return statistics.median(self.samples)
        return self.start

    def add(self, sample: float) -> None:
        self.samples = [*self.samples, sample][-self.keep :]

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"start": self.start, "samples": list(self.samples)}
        if self.base is not None:
            data["base"] = dict(self.base)
        if self.start_base is not None:
            data["start_base"] = dict(self.start_base)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, *, keep: int) -> Calibration:
        data = data or {}
        start = data.get("start")
        samples = [float(s) for s in data.get("samples") or [] if _positive(s)]
        return cls(
            start=float(start) if _positive(start) else None,
            samples=samples,
            keep=keep,
            base=_base(data.get("base")),
            start_base=_base(data.get("start_base")),
        )


def _base(data: Any) -> dict[str, Any] | None:
    """Return a stored reported request, or None when it is not one."""
    if isinstance(data, dict) and set(data) == {"count", "digest", "tokens", "raw"}:
        return dict(data)
    return None


def request_digest(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], binding: dict[str, Any]
) -> str:
    """Return the digest of exactly these messages, tools and estimator binding."""
    text = json.dumps(
        [messages, tools, binding], sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


class CalibratedEstimator(TokenEstimator):
    """An estimator measured in the provider's tokens for triggers, in its own units for limits."""

    def __init__(self, inner: TokenEstimator, calibration: Calibration):
        self.inner = inner
        self.calibration = calibration
        self.module_id = inner.module_id
        self.config = inner.config

    def binding(self) -> dict[str, Any]:
        return self.inner.binding()

    def upper_bound(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        raw = self.inner.upper_bound(messages, tools)
        base = self._extends_base(messages, tools)
        if base is None:
            return raw
        # Exact for the reported prefix; bytes (never fewer than tokens) for what was appended.
        return min(raw, base["tokens"] + max(raw - base["raw"], 0))

    @property
    def bound_estimator(self) -> TokenEstimator:
        """Return the estimator compaction measures with: the raw one, the hard check's unit."""
        return self.inner

    def _extends_base(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> dict[str, Any] | None:
        """Return the reported request when this one starts with exactly its messages."""
        base = self.calibration.base
        if base is None or not messages or len(messages) < base["count"]:
            return None
        prefix = messages[: base["count"]]
        if request_digest(prefix, tools, self.inner.binding()) != base["digest"]:
            return None
        return base

    def decision(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict:
        """Return what measuring this request uses: raw size, ratio and reported base."""
        raw = self.inner.estimate(messages, tools)
        ratio = self.calibration.ratio
        base = self._extends_base(messages, tools) if ratio is not None else None
        if ratio is None:
            size = raw
        elif base is not None:
            size = base["tokens"] + round(ratio * max(raw - base["raw"], 0))
        else:
            size = round(ratio * raw)
        return {
            "raw": raw,
            "ratio": ratio,
            "base_tokens": base["tokens"] if base is not None else None,
            "estimate": max(size, 1),
        }

    def estimate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        return self.decision(messages, tools)["estimate"]

    def observe(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], reported: int
    ) -> None:
        """Learn from the prompt tokens the provider reported for this request."""
        raw = self.inner.estimate(messages, tools)
        if raw <= 0 or reported <= 0 or not messages:
            return
        self.calibration.add(reported / raw)
        self.calibration.base = {
            "count": len(messages),
            "digest": request_digest(messages, tools, self.inner.binding()),
            "tokens": reported,
            "raw": raw,
        }


def resumed_estimator(
    estimator: TokenEstimator, binding: dict[str, Any], calibration: dict[str, Any] | None
) -> TokenEstimator:
    """Return `estimator` as a checkpoint measures with it: calibrated by its learned ratio.

    `binding` is the checkpoint's binding, `calibration` its `state.calibration`; a binding
    without calibration leaves the estimator as it is.
    """
    settings = calibration_config(binding.get("calibration"))
    if settings is None:
        return estimator
    learned = Calibration.from_dict(calibration, keep=settings["samples"])
    return CalibratedEstimator(estimator, learned)
