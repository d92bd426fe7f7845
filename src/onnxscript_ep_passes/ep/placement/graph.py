"""The flat graph placement works on: one scope per ORT graph, functions already inlined.

Rules:

- A :class:`FlatScope` is one graph ORT places separately: the main graph, or one
  If/Loop/Scan body. Nodes of model-local functions and of schema function bodies ORT
  inlines are flattened into the scope of their call.
- A :class:`FlatValue` is ``"input"`` (a graph input), ``"initializer"`` (an initializer or
  a ``Constant``'s output: never placed, copied at session start), ``"node"`` (a node's
  output) or ``"outer"`` (a value a subgraph reads from an enclosing graph).
- A :class:`FlatNode` keeps the model's IR node it stands for (``node``), the model-local
  function holding it (``function``), the values of that function's attribute parameters
  at its call (``call_attributes``) and whether it comes from a schema body ORT inlines
  (``inlined_by_ort``); the phases fill in its placement.
- Flat values and nodes compare and hash by identity.
- A value's :class:`Consumers` are the ``(node, input slot)`` pairs that read it, in the
  order they came: an ordered set, so that dropping one costs the same however many
  there are (a value that common-subexpression elimination shares across a decoder's
  blocks has one per block: as a list, removing them was quadratic in the blocks, 0.36 s
  of a 7 s prediction of the 40k-node decoder at opset 22).
"""

from __future__ import annotations

__all__ = ["Consumers", "FlatNode", "FlatScope", "FlatValue", "ValueKind"]

import dataclasses
from collections.abc import Mapping
from typing import Literal

import numpy as np
import onnx_ir as ir

from onnxscript_ep_passes.ep.placement.results import ReasonCode

ValueKind = Literal["input", "initializer", "node", "outer"]


class Consumers(dict[tuple["FlatNode", int], None]):
    """The ``(node, slot)`` pairs reading a value, in the order they came (module rules);
    each pair is there at most once (``node.inputs[slot]`` is that value)."""

    __slots__ = ()

    def append(self, use: tuple[FlatNode, int]) -> None:
        """Add ``use`` last."""
        self[use] = None

    def remove(self, use: tuple[FlatNode, int]) -> None:
        """Drop ``use`` (KeyError when it is not there)."""
        del self[use]

    def first(self) -> tuple[FlatNode, int]:
        """The earliest use (StopIteration when there is none)."""
        return next(iter(self))


@dataclasses.dataclass(eq=False, slots=True)
class FlatValue:
    name: str
    kind: ValueKind
    dtype: str | None = None
    size: int | None = None  # element count of an initializer
    producer: FlatNode | None = None
    producer_slot: int = 0
    consumers: Consumers = dataclasses.field(default_factory=Consumers)
    is_output: bool = False
    ir_value: ir.Value | None = None  # the IR value whose data this is
    shape: tuple[int, ...] | None = None  # static to ORT, not to the model (.load_shapes)
    data: np.ndarray | None = None  # computed by folding (.load_shapes)


@dataclasses.dataclass(eq=False, slots=True)
class FlatNode:
    name: str
    op_type: str
    domain: str
    since_version: int | None
    inputs: list[FlatValue | None]
    outputs: list[FlatValue | None]
    scope: str
    on_ep: bool = False
    reason: str = ""
    reason_code: ReasonCode = "kernel"
    shape_computation: bool = False
    inserted: bool = False
    nhwc: bool = False
    node: ir.Node | None = None
    function: ir.Function | None = None
    inlined_by_ort: bool = False
    # The values of the innermost model-local function's attribute parameters at this
    # node's call (what a ``ref_attr_name`` attribute of ``node`` reads); None outside one.
    call_attributes: Mapping[str, ir.Attr] | None = None


@dataclasses.dataclass(eq=False, slots=True)
class FlatScope:
    name: str
    nodes: list[FlatNode] = dataclasses.field(default_factory=list)
    values: list[FlatValue] = dataclasses.field(default_factory=list)
    opset: int = 0

    def new_value(
        self,
        name: str,
        kind: ValueKind,
        dtype: str | None,
        size: int | None = None,
        ir_value: ir.Value | None = None,
    ) -> FlatValue:
        """A new value of this scope."""
        value = FlatValue(name=name, kind=kind, dtype=dtype, size=size, ir_value=ir_value)
        self.values.append(value)
        return value
