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
  inlines at the end; here they stand where their call was). :meth:`ScopeEdits.order`
  memoizes it for the scope's live nodes: reused until the node list changes or the
  wiring is edited, which only :class:`ScopeEdits`' methods do (each counts the edit).
- Merging a node ``M`` into an equal earlier one ``F`` (same input values; ``M``'s
  consumers read ``F``'s outputs, ``M`` goes), ORT's order becomes the memoized one
  without ``M`` where ``F`` was listed before the walk reached each of ``M``'s consumers
  and ``F`` has consumers of its own unless ``M`` had none
  (:meth:`ScopeEdits.merge_keeps_order`): then the walk is the same, step for step, but
  for ``M``'s: ``F``, and so its producers, which are ``M``'s, are listed when a consumer
  of ``M`` reaches it, so where the old walk took ``M`` it listed ``M`` alone, and the
  new one takes nothing; the nodes without consumers are the same but ``M``. Anything
  else invalidates the memo.
- Where any topological order will do (every node after its producers among the nodes
  walked: ORT's inference, :mod:`.load_shapes`), :meth:`ScopeEdits.inference_order`
  gives the last ORT order computed, though edits made it stale, or the scope's node
  list, filtered to the nodes walked, once :func:`topological_order` has checked it is
  one (each node's producers among them before it, all of them there); else ORT's order
  afresh.
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
    "topological_order",
]

from collections.abc import Hashable

import numpy as np
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import tensor_array
from onnxscript_ep_passes.ep.placement.graph import FlatNode, FlatScope, FlatValue
from onnxscript_ep_passes.ep.placement.results import RemovedNode


class ScopeEdits:
    """One scope being optimized: rewiring, removal and the record of what was removed.

    :meth:`order` (ORT's topological order of the live nodes) is computed once and reused
    while the scope's node list is the same list object, of the same length, and the
    wiring is unedited: every method here that edits the wiring (:meth:`remove`,
    :meth:`replace`, :meth:`fold`, :meth:`rewire_input`, :meth:`rewire_output`) bumps
    :attr:`edits`, which makes the memo stale, except a merge that
    :meth:`merge_keeps_order` allows, after which :meth:`merged` keeps it (module
    docstring). Code that edits the wiring (a node's inputs or outputs, a value's
    producer or consumers) must do it through these methods.
    The same methods drop :attr:`cse_keys`' key of each node whose inputs or outputs they
    change."""

    def __init__(self, scope: FlatScope, removed: list[RemovedNode]) -> None:
        self.scope = scope
        self.removed = removed
        self.gone: set[FlatNode] = set()
        # Common-subexpression elimination's attribute key per IR node, read once per
        # prediction and kept across rounds (the model is not edited while predicted).
        self.cse_attributes: dict[ir.Node, Hashable | None] = {}
        # Its whole key per flat node, kept across rounds: every edit here that changes a
        # node's inputs or outputs (replace, rewire_input, rewire_output) drops the key of
        # the node it changes, so a kept key is what the node would be keyed on now.
        self.cse_keys: dict[FlatNode, Hashable | None] = {}
        # Constant sharing's key per initializer, kept across rounds (what it reads does
        # not change once a value is an initializer: basic_optimizations._share_constants).
        self.sharing_keys: dict[FlatValue, Hashable | None] = {}
        self.edits = 0  # bumped by every edit of the wiring (class docstring)
        self._order: list[FlatNode] = []
        self._order_of: tuple[int, list[FlatNode] | None, int] = (0, None, 0)
        # Of the walk that made _order: each node's index, and by index where its walk
        # started and its place (_ort_walk); _order may still list merged nodes (gone).
        self._index: dict[FlatNode, int] = {}
        self._start: list[int] = []
        self._place: list[int] = []
        self._unfiltered = False

    def optimizable(self, node: FlatNode) -> bool:
        return node not in self.gone and not node.inlined_by_ort and not node.inserted

    def order(self) -> list[FlatNode]:
        """:func:`ort_topological_order` of the scope's nodes not removed, memoized (class
        docstring); the caller must not change the list."""
        if not self._order_valid():
            nodes = self.scope.nodes
            walk = _ort_walk([n for n in nodes if n not in self.gone])
            self._order, self._index, self._start, self._place = walk
            self._order_of = (self.edits, nodes, len(nodes))
            self._unfiltered = False
        elif self._unfiltered:  # merges kept it (merge_keeps_order): drop the merged
            self._order = [n for n in self._order if n not in self.gone]
            self._unfiltered = False
        return self._order

    def merge_keeps_order(self, node: FlatNode, first: FlatNode) -> bool:
        """Whether merging ``node`` into ``first`` (its consumers read ``first``'s outputs
        instead, then it is removed), asked before the merge's edits, leaves ORT's order
        that of now without ``node`` (module docstring: the memo then stands, after
        :meth:`merged`). ``first`` must read the same input values as ``node``."""
        if not self._order_valid():
            return False
        index = self._index
        i, f = index.get(node), index.get(first)
        if i is None or f is None:
            return False
        start, place = self._start, self._place
        before = place[f]
        if before >= place[i]:
            return False
        consumed = False
        for out in node.outputs:
            if out is None:
                continue
            for consumer, _ in out.consumers:
                consumed = True
                c = index.get(consumer)
                if c is None or start[c] <= before:
                    return False
        return not consumed or any(o is not None and o.consumers for o in first.outputs)

    def merged(self) -> None:
        """The merge :meth:`merge_keeps_order` allowed is made (its edits and no other
        since): the memoized order stands, the merged node dropped when next read."""
        nodes = self.scope.nodes
        self._order_of = (self.edits, nodes, len(nodes))
        self._unfiltered = True

    def inference_order(self) -> list[FlatNode]:
        """A topological order of the live nodes ORT's inference walks (those neither
        inlined by ORT nor inserted), not necessarily ORT's (module docstring): the last
        :meth:`order` computed, stale or not, or else the scope's node list (a model's
        graph lists its nodes in a topological order), filtered to them, where
        :func:`topological_order` finds it is one; else, where every node is walked,
        :meth:`order` (memoized, for the next caller), or ORT's order of the walked ones."""
        nodes = [n for n in self.scope.nodes if not n.inlined_by_ort and not n.inserted]
        walked_all = len(nodes) == len(self.scope.nodes)
        if walked_all and self._order_valid():
            return self.order()
        for hint in (self._order, self.scope.nodes):
            found = topological_order(nodes, hint) if hint else None
            if found is not None:
                return found
        return self.order() if walked_all else ort_topological_order(nodes)

    def _order_valid(self) -> bool:
        edits, nodes, count = self._order_of
        return nodes is self.scope.nodes and count == len(nodes) and edits == self.edits

    def remove(self, node: FlatNode, rule: str) -> None:
        """Drop ``node`` from the scope (its outputs must have been rewired or folded)."""
        self.edits += 1
        self.gone.add(node)
        for slot, value in enumerate(node.inputs):
            if value is not None:
                value.consumers.remove((node, slot))
        self.removed.append(
            RemovedNode(node.name, node.op_type, node.domain, rule, node.scope, node.node)
        )

    def fold(self, node: FlatNode, rule: str) -> None:
        """Drop ``node``, folded: its outputs become initializers with no producer (the
        edit is counted by :meth:`remove`)."""
        for out in node.outputs:
            if out is not None:
                out.kind = "initializer"
                out.producer = None
                out.size = element_count(out)
        self.remove(node, rule)

    def replace(self, old: FlatValue, new: FlatValue) -> None:
        """Every consumer of ``old`` reads ``new`` instead."""
        self.edits += 1
        keys = self.cse_keys
        for consumer, slot in old.consumers:
            keys.pop(consumer, None)
            consumer.inputs[slot] = new
            new.consumers.append((consumer, slot))
        old.consumers.clear()

    def rewire_input(self, node: FlatNode, slot: int, value: FlatValue) -> None:
        """``node`` reads ``value`` at input ``slot`` instead of what it read there."""
        self.edits += 1
        self.cse_keys.pop(node, None)
        previous = node.inputs[slot]
        if previous is not None:
            previous.consumers.remove((node, slot))
        value.consumers.append((node, slot))
        node.inputs[slot] = value

    def rewire_output(self, node: FlatNode, slot: int, value: FlatValue) -> None:
        """``value`` becomes ``node``'s output ``slot`` (its producer is ``node``)."""
        self.edits += 1
        self.cse_keys.pop(node, None)
        node.outputs[slot] = value
        value.producer, value.producer_slot = node, slot

    def finish(self) -> None:
        """Filter the removed nodes out of the scope's node list: the live nodes stay the
        same, so a memoized :meth:`order` stays valid for the new list."""
        if not self.gone:
            return
        valid = self._order_valid()
        self.scope.nodes = [n for n in self.scope.nodes if n not in self.gone]
        if valid:
            self._order_of = (self.edits, self.scope.nodes, len(self.scope.nodes))


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
        return tensor_array(tensor)
    except Exception:  # unreadable data
        return None


def ort_topological_order(nodes: list[FlatNode]) -> list[FlatNode]:
    """``nodes`` in the order ORT's ``GraphViewer`` lists them (module docstring): from
    each node without consumers, last first, a depth-first walk to its producers, each
    node listed once all its producers are; producers are stacked in index order, so the
    last is walked first. Producers that are not in ``nodes`` are not walked."""
    return _ort_walk(nodes)[0]


def _ort_walk(
    nodes: list[FlatNode],
) -> tuple[list[FlatNode], dict[FlatNode, int], list[int], list[int]]:
    """:func:`ort_topological_order`, with each node's index in ``nodes`` and, by index,
    where its walk starts (how many nodes were listed before it was reached) and its
    place in the order.

    The walk runs on indices (a node ``i`` on the stack is ``i``, its leaving ``~i``) and
    stacks only producers not yet visited (one visited when popped would be skipped)."""
    index = {node: i for i, node in enumerate(nodes)}
    find = index.get
    stack: list[int] = []
    for i, node in enumerate(nodes):
        for out in node.outputs:
            if out is not None and out.consumers:
                break
        else:
            stack.append(i)
    visited = bytearray(len(nodes))
    start = [0] * len(nodes)
    place = [0] * len(nodes)
    order: list[FlatNode] = []
    while stack:
        i = stack.pop()
        if i < 0:
            place[~i] = len(order)
            order.append(nodes[~i])
            continue
        if visited[i]:
            continue
        visited[i] = 1
        start[i] = len(order)
        stack.append(~i)
        producers: list[int] = []
        for value in nodes[i].inputs:
            if value is not None and value.producer is not None:
                j = find(value.producer)
                if j is not None and not visited[j]:
                    producers.append(j)
        if len(producers) > 1:
            producers = sorted(set(producers))
        stack.extend(producers)
    return order, index, start, place


def topological_order(nodes: list[FlatNode], hint: list[FlatNode]) -> list[FlatNode] | None:
    """``hint`` filtered to ``nodes`` where that holds every node of ``nodes`` and lists
    each after its producers among ``nodes`` (a topological order of them, not
    necessarily ORT's); else None. ``hint`` must not list a node twice (an order
    :func:`ort_topological_order` gave does not)."""
    members = set(nodes)
    candidate = [n for n in hint if n in members]
    if len(candidate) != len(nodes):
        return None
    place = {node: i for i, node in enumerate(candidate)}
    find = place.get
    for i, node in enumerate(candidate):
        for value in node.inputs:
            producer = None if value is None else value.producer
            if producer is not None:
                j = find(producer)
                if j is not None and j >= i:
                    return None
    return candidate
