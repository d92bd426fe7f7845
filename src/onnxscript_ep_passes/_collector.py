"""The cyclic garbage collector during long rewrites of large models.

A model's IR is millions of long-lived objects, and Python's collector scans them again at
every full collection, which its thresholds trigger more often as the heap grows: on a
10k-node decoder, the EP search spent more than half its time in the collector, a share
that grew with the model. Rules:

1. :func:`paused_collector` turns automatic collection off for a block and back on after
   it (only if it was on), whatever happens in the block. The CLI runs each command so.
2. Inside such a block, long work calls :func:`collect_young` at its natural steps (each
   candidate opset of the EP search). It collects the youngest generation only: with
   automatic collection off, that is every object made since the previous call, so
   garbage made in a step (a placement prediction's flat graph, a trial's expansion)
   is freed, while the model, made before, is not scanned again. The total work is
   linear in what the steps allocate.
"""

from __future__ import annotations

__all__ = ["collect_young", "paused_collector"]

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused_collector() -> Iterator[None]:
    """Automatic cyclic garbage collection off inside the block (rule 1)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def collect_young() -> int:
    """Free the cyclic garbage made since the previous call (rule 2); the objects freed."""
    return gc.collect(0)
