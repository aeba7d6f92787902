"""Prompt-cache doubles: how many of a request's prompt tokens a provider's cache would serve.

A prompt is a sequence of parts: the request's tool schemas (JSON), then each message as sent
(JSON), in order. Parts are counted with the given token counter once each (a prefix's tokens
are the sum of its whole parts plus the count of the part it ends inside), and compared whole
where they are equal, character by character only inside the first part that differs. Nothing is
ever evicted, so the figures are the ceiling the requests allow, not what a provider guarantees.

`OpenAIPrefixCache` (OpenAI's prompt caching guide): the cached part of a request is the
longest prefix it shares with any earlier request, counted in whole blocks of 128 tokens from
1,024 (a shorter shared prefix is not cached).

`DeepSeekUnitCache` (DeepSeek's "Context Caching" guide, api-docs.deepseek.com/guides/kv_cache,
English and Chinese pages read 2026-12-07): a request hits the cache only by matching a whole
"cache prefix unit"; the cached part is the longest unit that is a prefix of the request. Units
are persisted

- at the end of each request's input and at the end of its model output (two per request);
- where the system detects a prefix common to several requests: the guide's example 2 (`A + B`,
  then `A + C` misses, then `A + D` hits `A`) has the unit available to the requests after the
  one that revealed it, never to that one;
- at fixed token intervals inside long inputs and outputs (`interval`).

What the guide does not say, and this double assumes: the interval (an argument; the guide gives
no number), that interval units are counted from the start of the prompt and cut at the
character where the count is reached in proportion to the part's length, that the output's unit
is the prompt followed by the reply as the client sends it back in later requests (the caller
passes that part), that the tool schemas come first, and that there is no least length.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["BLOCK", "MINIMUM", "DeepSeekUnitCache", "OpenAIPrefixCache", "Served"]

# OpenAI: cached prefixes are whole blocks of 128 tokens, from 1,024.
BLOCK = 128
MINIMUM = 1_024

_ROOT = 0


@dataclass(frozen=True)
class Served:
    """One request's prompt tokens and the part of them served from the cache."""

    prompt: int
    cached: int


def _shared(a: str, b: str) -> int:
    """Return the length of the longest common prefix of two strings."""
    return len(os.path.commonprefix([a, b]))  # noqa: RUF071 - strings, not paths


class _Prompts:
    """The prompts seen so far, keyed by their leading parts, and the tokens of each part."""

    def __init__(self, count: Callable[[str], int]):
        self._count = count
        self._counts: dict[str, int] = {}
        # Key of k leading parts -> the parts that followed them in an earlier prompt.
        self.followers: dict[int, set[str]] = {}

    def count(self, text: str) -> int:
        if text not in self._counts:
            self._counts[text] = self._count(text) if text else 0
        return self._counts[text]

    @staticmethod
    def keys(parts: Sequence[str]) -> list[int]:
        """Return the key of each run of leading parts: `keys[k]` names `parts[:k]`."""
        keys = [_ROOT]
        for part in parts:
            keys.append(hash((keys[-1], part)))
        return keys

    def tokens(self, parts: Sequence[str], whole: int, partial: str = "") -> int:
        """Return the tokens of `parts[:whole]` followed by `partial`."""
        return sum(self.count(part) for part in parts[:whole]) + self.count(partial)

    def shared(self, parts: Sequence[str], keys: Sequence[int]) -> tuple[int, str]:
        """Return the longest prefix shared with an earlier prompt: (whole parts, then the start
        of the next part)."""
        whole = 0
        while whole < len(parts) and keys[whole + 1] in self.followers:
            whole += 1
        if whole == 0 and _ROOT not in self.followers:
            return 0, ""
        if whole == len(parts):
            return whole, ""
        chars = max(
            (_shared(parts[whole], seen) for seen in self.followers[keys[whole]]), default=0
        )
        return whole, parts[whole][:chars]

    def remember(self, parts: Sequence[str], keys: Sequence[int]) -> None:
        for index, part in enumerate(parts):
            self.followers.setdefault(keys[index], set()).add(part)
        self.followers.setdefault(keys[len(parts)], set())


class OpenAIPrefixCache:
    """OpenAI's rule: the longest prefix shared with an earlier request, in 128-token blocks
    from 1,024."""

    def __init__(self, count: Callable[[str], int]):
        self.prompts = _Prompts(count)

    def serve(self, parts: Sequence[str], output: str = "") -> Served:
        """Return the tokens of the prompt `parts` and how many were cached; remember it."""
        keys = self.prompts.keys(parts)
        whole, partial = self.prompts.shared(parts, keys)
        matched = self.prompts.tokens(parts, whole, partial)
        total = self.prompts.tokens(parts, len(parts))
        cached = matched // BLOCK * BLOCK if matched >= MINIMUM else 0
        self.prompts.remember(parts, keys)
        return Served(total, min(cached, total))


class DeepSeekUnitCache:
    """DeepSeek's rule: the longest whole cache prefix unit the request starts with (see the
    module docstring for where units are persisted and what is assumed)."""

    def __init__(self, count: Callable[[str], int], interval: int):
        self.prompts = _Prompts(count)
        self.interval = interval
        # Key of k leading parts -> {start of part k (may be empty): the unit's tokens}.
        self.units: dict[int, dict[str, int]] = {}

    def serve(self, parts: Sequence[str], output: str = "") -> Served:
        """Return the tokens of the prompt `parts` and how many a unit served; then persist the
        units of this request (its input, its `output` as sent back later, the prefix it shares
        with earlier requests, and the interval cuts)."""
        keys = self.prompts.keys(parts)
        total = self.prompts.tokens(parts, len(parts))
        cached = self._hit(parts, keys)
        whole, partial = self.prompts.shared(parts, keys)
        self._persist(keys[whole], partial, self.prompts.tokens(parts, whole, partial))
        self._persist(keys[-1], "", total)
        sequence = [*parts, output] if output else list(parts)
        if output:
            self._persist(hash((keys[-1], output)), "", total + self.prompts.count(output))
        self._persist_intervals(sequence, self.prompts.keys(sequence), after=cached)
        self.prompts.remember(parts, keys)
        return Served(total, cached)

    def _hit(self, parts: Sequence[str], keys: Sequence[int]) -> int:
        best = 0
        for index, key in enumerate(keys):
            for start, tokens in self.units.get(key, {}).items():
                fits = not start or (index < len(parts) and parts[index].startswith(start))
                if fits and tokens > best:
                    best = tokens
        return best

    def _persist(self, key: int, start: str, tokens: int) -> None:
        if tokens > 0:
            self.units.setdefault(key, {})[start] = tokens

    def _persist_intervals(self, parts: Sequence[str], keys: Sequence[int], *, after: int) -> None:
        """Persist a unit every `interval` tokens past `after` (those before it are already
        units: the request shares them with the one that persisted them)."""
        done = 0
        mark = (after // self.interval + 1) * self.interval
        for index, part in enumerate(parts):
            size = self.prompts.count(part)
            while mark < done + size:
                chars = len(part) * (mark - done) // size
                self._persist(keys[index], part[:chars], done + self.prompts.count(part[:chars]))
                mark += self.interval
            done += size
