"""What a prediction and its pricing asked ONNX at the model's opset, recorded to be asked
again at another one.

A placement prediction (:func:`~onnxscript_ep_passes.ep.placement.predict_placement`)
and its price (:func:`~onnxscript_ep_passes.ep.cost.placement_cost`) read the model's
ai.onnx opset in two ways: through the schema each op resolves to (its since_version,
formals, defaults: pure functions of ``(op, opset)`` that a caller can compare between two
opsets), and through calls to ONNX with the opset and a schema, on inputs the prediction
computed as it went:

- the kernel phase's type inference of untyped outputs (:func:`.kernels.infer_types`);
- ORT's inference at load (:class:`.load_shapes.LoadShapes`);
- the cost's inference of missing shapes (:func:`~onnxscript_ep_passes.ep.shapes.infer_missing_shapes`);
- the building of a schema body ORT may inline (:mod:`.schema_bodies`): the body the
  node's schema, at its version, gives for its types (its nodes are placed in turn);
- the reference evaluation of folded nodes (:meth:`.load_shapes.LoadShapes.evaluate`).

While :func:`recording` is active, each of the first four notes every distinct call, by
its memo key (cache hits included), with what it needs to be made again with another
opset and schema (:class:`Call`); evaluations are only counted, and a call without a key
(attributes that cannot be spelled) marks the record incomplete. Nothing is recorded
otherwise (the hooks cost one global read).
"""

from __future__ import annotations

__all__ = ["Call", "OpsetReads", "active", "recording"]

import contextlib
import dataclasses
from collections.abc import Callable, Hashable, Iterator
from typing import Any


@dataclasses.dataclass(frozen=True)
class Call:
    """One call to ONNX at the recorded opset.

    Attributes:
        op_type, domain: The node's op (domain ``""`` for ai.onnx).
        result: What the call answered.
        again: The same call at another ``(opset, schema, since_version)``; its answer.
        ops: For a schema body, the ai.onnx ops of its nodes (they are placed too).
    """

    op_type: str
    domain: str
    result: Any
    again: Callable[[int, Any, int], Any] = dataclasses.field(compare=False, repr=False)
    ops: frozenset[str] = frozenset()  # a schema body's ai.onnx ops, placed in turn


@dataclasses.dataclass
class OpsetReads:
    """The calls one prediction and its pricing made (module docstring), by kind and key."""

    calls: dict[tuple[str, Hashable], Call] = dataclasses.field(default_factory=dict)
    evaluated: int = 0  # reference evaluations of folded nodes
    complete: bool = True  # False: a call had no key, and is not recorded

    def note(self, kind: str, key: Hashable | None, call: Callable[[], Call]) -> None:
        """Record the call ``call`` builds under ``(kind, key)``, once."""
        if key is None:
            self.complete = False
            return
        if (kind, key) not in self.calls:
            self.calls[(kind, key)] = call()


_ACTIVE: OpsetReads | None = None


def active() -> OpsetReads | None:
    """The record being made, or None."""
    return _ACTIVE


@contextlib.contextmanager
def recording() -> Iterator[OpsetReads]:
    """Record the calls made meanwhile (not nested: an inner record replaces the outer
    one until it ends)."""
    global _ACTIVE
    outer, reads = _ACTIVE, OpsetReads()
    _ACTIVE = reads
    try:
        yield reads
    finally:
        _ACTIVE = outer
