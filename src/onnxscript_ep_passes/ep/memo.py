"""Caches for the pure functions placement and pricing call on every node, every call.

The EP search predicts and prices the same model many times, edited a little in place
between calls (lowered one opset, a node expanded and restored). Per-node work that
depends only on a few values (an op's kernel decision, ONNX's per-node inference) is
cached here. Rules:

1. A cache is keyed by *everything* its function reads, as values (op, domain, opset,
   types, shapes, attribute values, constant bytes), never by the identity of a mutable
   object (a node, a value, a shape): an in-place edit changes the key, so a cached
   result can never be stale, and equal keys met in other nodes or models share it.
2. Caches are bounded (:class:`BoundedCache` empties itself when full), so a long
   process does not grow without limit.
3. A key that cannot be built exactly
   (:func:`~onnxscript_ep_passes.core.onnx_utils.attributes_key` on an attribute it cannot spell)
   is ``None``: the caller computes without the cache.
"""

from __future__ import annotations

__all__ = ["BoundedCache", "clear_caches", "shape_key"]

from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

import onnx_ir as ir

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_ALL: list[BoundedCache[Any, Any]] = []


class BoundedCache(Generic[K, V]):
    """A dict of at most ``limit`` entries; it empties itself when full (rule 2)."""

    def __init__(self, limit: int = 1 << 16) -> None:
        self.limit = limit
        self.entries: dict[K, V] = {}
        _ALL.append(self)

    def get(self, key: K) -> V | None:
        return self.entries.get(key)

    def put(self, key: K, value: V) -> V:
        if len(self.entries) >= self.limit:
            self.entries.clear()
        self.entries[key] = value
        return value

    def fetch(self, key: K | None, compute: Callable[[], V]) -> V:
        """The entry of ``key``, computed and kept when missing; ``compute()`` itself
        when ``key`` is None (rule 3). ``compute`` must not return None."""
        if key is None:
            return compute()
        found = self.entries.get(key)
        if found is None:
            found = self.put(key, compute())
        return found

    def __len__(self) -> int:
        return len(self.entries)


def clear_caches() -> None:
    """Empty every :class:`BoundedCache` (tests compare cached and fresh answers)."""
    for cache in _ALL:
        cache.entries.clear()


def shape_key(shape: ir.Shape | None) -> tuple[int | ir.SymbolicDim, ...] | None:
    """The dimensions of ``shape`` as values: a new tuple of ints and symbolic dimensions
    (immutable; one compares and hashes as its name, None when unknown, so
    ``SymbolicDim("N")`` and ``"N"`` make the same key)."""
    if shape is None:
        return None
    return shape.dims
