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
3. Inside :func:`frozen_heap`, the objects that exist when it starts, and those alive at
   each :func:`freeze_young` call, are moved out of the collector's reach
   (``gc.freeze``) until the block ends (``gc.unfreeze``): a young-generation collection
   would otherwise scan once, and keep, the model and its working copy (millions of
   objects at 40k nodes). It changes nothing when objects were frozen before it started
   (another owner's), and garbage among the frozen objects waits for the block's end.
4. ``paused_collector(process_end=True)`` is for a block after which the process ends
   (the command line run as the program): what exists when the block ends, the model's
   garbage included, is frozen instead of being scanned by the first collection after
   it (with collection paused, every object the block made is still in the youngest
   generation: on a 40k-node decoder lowered to opset 22, that scan took 2 s). The
   memory goes back with the process.
"""

from __future__ import annotations

__all__ = ["collect_young", "freeze_young", "frozen_heap", "paused_collector"]

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused_collector(*, process_end: bool = False) -> Iterator[None]:
    """Automatic cyclic garbage collection off inside the block (rule 1); with
    ``process_end``, what is left at its end frozen, never collected (rule 4)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if process_end:
            gc.freeze()
        if enabled:
            gc.enable()


def collect_young() -> int:
    """Free the cyclic garbage made since the previous call (rule 2); the objects freed."""
    return gc.collect(0)


_frozen = [False]  # inside frozen_heap, and it froze


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """What exists now is out of every collection's reach inside the block (rule 3)."""
    if _frozen[0] or gc.get_freeze_count():  # frozen already (ours or another owner's)
        yield
        return
    gc.freeze()
    _frozen[0] = True
    try:
        yield
    finally:
        _frozen[0] = False
        gc.unfreeze()


def freeze_young() -> None:
    """Inside :func:`frozen_heap`, move what is alive now out of the collector's reach too
    (rule 3); elsewhere, nothing."""
    if _frozen[0]:
        gc.freeze()
