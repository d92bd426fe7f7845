"""Editing one flat scope as ORT's basic optimizations do, and reading its constants.

Shared by :mod:`.basic_optimizations` and :mod:`.basic_fusions`. Rules:

- A removed node leaves its inputs' consumer lists and is recorded (a
  :class:`~onnxscript_ep_passes.ep.placement.results.RemovedNode`) with the rule that
  removed it; the scope's node list is filtered once per round (:meth:`ScopeEdits.finish`).
- Nodes of schema bodies ORT inlines while partitioning, and nodes ORT inserts, are never
  edited (:meth:`ScopeEdits.optimizable`).
- :func:`ort_topological_order` is the order ORT's graph viewer gives the nodes (a
  depth-first walk back from the nodes nothing reads, inputs taken in node order),
  which decides, e.g., which of two equal nodes common-subexpression elimination keeps;
  a node's index is its place in the scope (ORT appends the nodes of functions it
  inlines at the end; here they stand where their call was).
- Shapes are the model's own (the IR value's shape), or ORT's where its inference knows
  what the model does not say (:mod:`.load_shapes`); a constant's data is an
  initializer's or a ``Constant``'s attribute, or what folding computed where
  :mod:`.load_shapes` runs (:func:`constant_tensor`, which constant sharing reads, gives
  only the former).
"""

from __future__ import annotations

__all__ = [
    "ScopeEdits",
    "constant_array",
    "constant_tensor",
    "element_count",
    "has_subgraph",
    "ort_topological_order",
    "static_shape",
]

from collections.abc import Hashable

import numpy as np
import onnx_ir as ir

from onnxscript_ep_passes.ep.placement.graph import FlatNode, FlatScope, FlatValue
from onnxscript_ep_passes.ep.placement.results import RemovedNode


class ScopeEdits:
    """One scope being optimized: rewiring, removal and the record of what was removed."""

    def __init__(self, scope: FlatScope, removed: list[RemovedNode]) -> None:
        self.scope = scope
        self.removed = removed
        self.gone: set[FlatNode] = set()
        # Common-subexpression elimination's attribute key per IR node, read once per
        # prediction and kept across rounds (the model is not edited while predicted).
        self.cse_attributes: dict[ir.Node, Hashable | None] = {}

    def optimizable(self, node: FlatNode) -> bool:
        return node not in self.gone and not node.inlined_by_ort and not node.inserted

    def remove(self, node: FlatNode, rule: str) -> None:
        """Drop ``node`` from the scope (its outputs must have been rewired or folded)."""
        self.gone.add(node)
        for slot, value in enumerate(node.inputs):
            if value is not None:
                value.consumers.remove((node, slot))
        self.removed.append(
            RemovedNode(node.name, node.op_type, node.domain, rule, node.scope, node.node)
        )

    def replace(self, old: FlatValue, new: FlatValue) -> None:
        """Every consumer of ``old`` reads ``new`` instead."""
        for consumer, slot in old.consumers:
            consumer.inputs[slot] = new
            new.consumers.append((consumer, slot))
        old.consumers.clear()

    def finish(self) -> None:
        if self.gone:
            self.scope.nodes = [n for n in self.scope.nodes if n not in self.gone]


def has_subgraph(node: FlatNode) -> bool:
    ir_node = node.node
    if ir_node is None or node.inlined_by_ort:
        return False
    return any(
        isinstance(a, ir.Attr) and a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
        for a in ir_node.attributes.values()
    )


def static_shape(value: FlatValue) -> list[int] | None:
    """The value's shape when every dimension is a number: from ORT's inference where the
    model's types do not say it (:mod:`.load_shapes`), else from the model's types."""
    if value.shape is not None:
        return list(value.shape)
    ir_value = value.ir_value
    shape = ir_value.shape if ir_value is not None else None
    if shape is None:
        tensor = constant_tensor(value)  # a Constant's output the model gives no type
        return None if tensor is None else [int(d) for d in tensor.shape.numpy()]
    dims = [d for d in shape if isinstance(d, int)]
    return dims if len(dims) == len(shape) else None


def element_count(value: FlatValue) -> int | None:
    dims = static_shape(value)
    if dims is None:
        return None
    count = 1
    for d in dims:
        count *= d
    return count


def constant_tensor(value: FlatValue) -> ir.TensorProtocol | None:
    """The data of a constant initializer or of a ``Constant``'s output (None if unknown;
    values computed by folding are unknown)."""
    ir_value = value.ir_value
    if ir_value is None or value.kind != "initializer":
        return None
    if ir_value.const_value is not None:
        return ir_value.const_value
    producer = ir_value.producer()
    if producer is None or producer.op_type != "Constant" or producer.domain not in ("", "ai.onnx"):
        return None
    for name, attr in producer.attributes.items():
        if not isinstance(attr, ir.Attr) or attr.is_ref():
            return None
        if name == "value" and attr.type == ir.AttributeType.TENSOR:
            # attr.value, not attr.as_tensor(): its isinstance check against the
            # TensorProtocol runtime protocol costs more than the rest of the lookup.
            tensor: ir.TensorProtocol = attr.value
            return tensor
        if name in ("value_int", "value_ints"):
            return ir.tensor(np.asarray(attr.value, dtype=np.int64))
        if name in ("value_float", "value_floats"):
            return ir.tensor(np.asarray(attr.value, dtype=np.float32))
    return None


def constant_array(value: FlatValue) -> np.ndarray | None:
    """A constant's data, computed by folding included (:mod:`.load_shapes`)."""
    if value.data is not None:
        return value.data
    tensor = constant_tensor(value)
    if tensor is None:
        return None
    try:
        return tensor.numpy()
    except Exception:  # unreadable data
        return None


def ort_topological_order(nodes: list[FlatNode]) -> list[FlatNode]:
    """``nodes`` in the order ORT's ``GraphViewer`` lists them (module docstring): from
    each node without consumers, last first, a depth-first walk to its producers, each
    node listed once all its producers are; producers are stacked in index order, so the
    last is walked first."""
    index = {node: i for i, node in enumerate(nodes)}
    leaves = [n for n in nodes if not any(o is not None and o.consumers for o in n.outputs)]
    stack: list[tuple[FlatNode, bool]] = [(n, False) for n in leaves]
    visited: set[FlatNode] = set()
    order: list[FlatNode] = []
    while stack:
        node, leaving = stack.pop()
        if leaving:
            order.append(node)
            continue
        if node in visited:
            continue
        visited.add(node)
        stack.append((node, True))
        producers = sorted(
            {
                v.producer
                for v in node.inputs
                if v is not None and v.producer is not None and v.producer in index
            },
            key=index.__getitem__,
        )
        stack.extend((p, False) for p in producers)
    return order
