"""Inclusive `[first, last]` ranges of record numbers: how views, snapshots and citations name
runs of records without listing them one by one."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["as_ranges", "union_ranges"]


def as_ranges(seqs: set[int] | list[int]) -> list[list[int]]:
    """Return `seqs` as sorted, inclusive `[first, last]` runs of consecutive numbers."""
    ranges: list[list[int]] = []
    for seq in sorted(seqs):
        if ranges and seq == ranges[-1][1] + 1:
            ranges[-1][1] = seq
        else:
            ranges.append([seq, seq])
    return ranges


def union_ranges(ranges: Iterable[list[int]]) -> list[list[int]]:
    """Return the union of inclusive `[first, last]` ranges as sorted runs (new lists).

    The same as `as_ranges` of every number they hold, without listing the numbers.
    """
    union: list[list[int]] = []
    for first, last in sorted(ranges):
        if union and first <= union[-1][1] + 1:
            union[-1][1] = max(union[-1][1], last)
        else:
            union.append([first, last])
    return union
