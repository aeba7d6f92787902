"""A bounded cache of per-item sizes, so that measuring a grown view measures only the new items.

An item (a message or a tool schema) is found first by its identity, checked against its
top-level values, and then, when the cache was made with content keys, by a hash of its JSON.
Items are treated as immutable once measured: a top-level field that is replaced is noticed, an
in-place change deeper down is not.

`JSON_BYTES` keeps the compact-JSON byte length of items for the whole process. A byte length
depends on the item alone, not on any estimator setting, so every byte-counting estimator shares
it: a new run's estimator measures only what no earlier run in the process measured. A run that
inherits its history from a decrypted projection point (kept by the worker) inherits the same
message objects, so its history is measured by identity, without serialising it again.

A record read anew from the journal carries the byte length of its stored form, which is its
compact JSON (`JournalRecord.size`); a view message projected from it that is exactly the same
JSON (`same_json`: the same keys, and values of the same types with the same text) takes that
length into `JSON_BYTES` (`carry_json_bytes`), so a worker that reads a session's records for the
first time measures its history without serialising what it read. A message projection changed
(call ids rewritten, an excerpt, a note) is measured as before.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "DEFAULT_CACHE_ITEMS",
    "DEFAULT_CACHE_WEIGHT",
    "JSON_BYTES",
    "SizeCache",
    "canonical_json",
    "carry_json_bytes",
    "content_key",
    "json_bytes",
    "same_json",
]

DEFAULT_CACHE_ITEMS = 50_000
# Characters of JSON the identity entries may keep alive between estimates.
DEFAULT_CACHE_WEIGHT = 64_000_000


def canonical_json(item: Any) -> str:
    """Return the compact JSON of `item`, as the request body shows it."""
    return json.dumps(item, ensure_ascii=False, separators=(",", ":"))


def json_bytes(item: Any) -> int:
    """Return the UTF-8 length of the compact JSON of `item`."""
    return len(canonical_json(item).encode())


def content_key(text: str) -> bytes:
    """Return the key under which a size measured from the JSON text `text` is kept."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _top_level(item: Any) -> Any:
    return tuple(item.items()) if isinstance(item, dict) else None


class SizeCache:
    """An LRU of sizes by item identity and, optionally, by a hash of the item's JSON."""

    def __init__(
        self,
        *,
        max_items: int = DEFAULT_CACHE_ITEMS,
        max_weight: int = DEFAULT_CACHE_WEIGHT,
        content_keys: bool = True,
    ):
        self.max_items = max_items
        self.max_weight = max_weight
        self.content_keys = content_keys
        # id(item) -> (item, top-level values, size, weight, content key or None); holding the
        # item keeps its id unique.
        self._by_id: OrderedDict[int, tuple[Any, Any, int, int, bytes | None]] = OrderedDict()
        self._weight = 0
        self._by_content: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._by_id)

    def clear(self) -> None:
        with self._lock:
            self._by_id.clear()
            self._by_content.clear()
            self._weight = 0

    def total(self, items: Iterable[Any], measure: Callable[[Any], int]) -> int:
        """Return the sum of `measure(item)` over `items`, measuring only items not cached."""
        if self.max_items <= 0:
            return sum(measure(item) for item in items)
        total = 0
        misses = []
        with self._lock:
            by_id = self._by_id
            for item in items:
                entry = by_id.get(id(item))
                if entry is not None and entry[0] is item and entry[1] == _top_level(item):
                    by_id.move_to_end(id(item))
                    total += entry[2]
                else:
                    misses.append(item)
        for item in misses:
            total += self._measure(item, measure)
        return total

    def _measure(self, item: Any, measure: Callable[[Any], int]) -> int:
        if not self.content_keys:
            size = measure(item)
            self._remember(item, size, size)
            return size
        text = canonical_json(item)
        key = content_key(text)
        with self._lock:
            size = self._by_content.get(key)
            if size is not None:
                self._by_content.move_to_end(key)
        if size is None:
            size = measure(item)
            with self._lock:
                self._by_content[key] = size
                while len(self._by_content) > self.max_items:
                    self._by_content.popitem(last=False)
        self._remember(item, size, len(text), key)
        return size

    def _remember(self, item: Any, size: int, weight: int, key: bytes | None = None) -> None:
        with self._lock:
            old = self._by_id.pop(id(item), None)
            if old is not None:
                self._weight -= old[3]
            self._by_id[id(item)] = (item, _top_level(item), size, weight, key)
            self._weight += weight
            while self._by_id and (
                len(self._by_id) > self.max_items or self._weight > self.max_weight
            ):
                _, evicted = self._by_id.popitem(last=False)
                self._weight -= evicted[3]

    # -- measuring in batches -------------------------------------------------------------------
    # A caller that measures many items with one call (a tokenizer server) looks each item up,
    # measures the misses together and stores their sizes.

    def lookup(self, item: Any) -> tuple[int | None, bytes | None]:
        """Return the cached size of `item` (None: not cached) and its content key.

        The key is None when the cache has no content keys.
        """
        with self._lock:
            entry = self._by_id.get(id(item))
            if entry is not None and entry[0] is item and entry[1] == _top_level(item):
                self._by_id.move_to_end(id(item))
                return entry[2], entry[4]
        if not self.content_keys:
            return None, None
        text = canonical_json(item)
        key = content_key(text)
        with self._lock:
            size = self._by_content.get(key)
            if size is not None:
                self._by_content.move_to_end(key)
        if size is not None:
            self._remember(item, size, len(text), key)
        return size, key

    def store(self, item: Any, size: int, key: bytes | None = None) -> None:
        """Keep `size` as the size of `item` (by identity, and by content with content keys)."""
        text = canonical_json(item)
        if self.content_keys:
            key = key if key is not None else content_key(text)
            self.store_key(key, size)
        self._remember(item, size, len(text), key)

    def keep(self, item: Any, size: int) -> None:
        """Keep `size` as the size of `item` by identity, measured elsewhere (a size known from
        where the item was read); its weight is the size."""
        if self.max_items > 0:
            self._remember(item, size, size)

    def store_key(self, key: bytes, size: int) -> None:
        """Keep `size` under a content key (a size recorded earlier, read back)."""
        with self._lock:
            self._by_content[key] = size
            self._by_content.move_to_end(key)
            while len(self._by_content) > self.max_items:
                self._by_content.popitem(last=False)


def same_json(a: Any, b: Any) -> bool:
    """Return True when `a` and `b` serialise to the same compact JSON, up to the order of keys.

    Stricter than `==`, which holds between 1, 1.0 and True (three texts) and between 0.0 and
    -0.0: values must have the same types, floats the same text and keys be strings.
    """
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is dict:
        return _same_dict(a, b)
    if kind is list:
        return len(a) == len(b) and all(
            value is other or same_json(value, other) for value, other in zip(a, b, strict=True)
        )
    if kind is float:
        return repr(a) == repr(b)
    return bool(a == b)


def _same_dict(a: dict[Any, Any], b: dict[Any, Any]) -> bool:
    if len(a) != len(b):
        return False
    for key, value in a.items():
        if type(key) is not str or key not in b:
            return False
        other = b[key]
        if value is not other and not same_json(value, other):
            return False
    return True


def carry_json_bytes(item: Any, source: Any, size: int | None) -> None:
    """Keep `size`, the byte length of `source`'s compact JSON as it was read, as the byte length
    of `item` when `item` is the same JSON (see the module docstring); None: nothing known."""
    if size is not None and same_json(item, source):
        JSON_BYTES.keep(item, size)


# The byte length of each item measured in this process (see the module docstring). Serialising is
# what a byte count costs, so a content hash would save nothing: items are found by identity.
JSON_BYTES = SizeCache(content_keys=False)
