"""Checkpoints of an IR model: edit it in place, then put it back as it was.

The EP search tries rewrites (a legalized variant of each candidate opset, each
legalization trial) and keeps few of them. Making each on a copy of the model costs a
clone of every node and value (seconds, and memory, at 100k nodes); a checkpoint records
only what the rewrites change and undoes them. Rules:

1. :func:`checkpoint` records the main graph and every subgraph (If/Loop/Scan bodies, any
   depth): the nodes in order, each node's inputs, each output value's name, type, shape
   and constant; the graph's inputs, outputs and initializers; and the counters the
   graph names new values and nodes with (so names given after a restore are those
   given without the detour).
2. :meth:`Checkpoint.restore` puts all of that back: nodes built since are detached from
   their inputs and removed, nodes removed since are put back in place, inputs and value
   properties are reset. Saved to ONNX, the model is then the same as at the checkpoint,
   byte for byte. The order of a value's uses may differ (it is not part of the model).
3. Model-local functions, opset imports, metadata and node attributes are not recorded:
   the rewrites undone here (expansions, static shape folding, bool widening) leave them
   alone (tests/core/test_checkpoint.py saves real ones and compares). :meth:`Checkpoint.restore`
   raises when it finds functions or opset imports changed, rather than restore half a
   model.
4. A checkpoint is restored at most once (it lets go of what it recorded then), and
   checkpoints nest (restore the inner one first).
5. An :class:`EditLog` is the other way to undo: instead of recording the whole model
   up front (and walking it all again to put it back), the rewrite makes its edits
   through the log (insert a node, replace a value's uses, rename a value, remove a
   node), which records each one as it makes it; :meth:`EditLog.restore` undoes them
   newest first, so its work follows the edits, not the model's size. A graph's node
   order and name authority are recorded when the log first edits it (one pass over
   its nodes). Edits made around the log are undone by a :class:`Checkpoint` taken
   meanwhile and handed to :meth:`EditLog.nest` (undone in turn, newest first). The
   model is then saved byte for byte as before (rule 2), uses included up to their
   order; it raises rather than leave a graph whose nodes it cannot account for. The
   nodes the log inserted are let go: their outputs detached and attributes dropped,
   so they are freed by reference counting (hold none of them past the restore).
"""

from __future__ import annotations

__all__ = ["Checkpoint", "EditLog", "checkpoint"]

import dataclasses
import logging
import operator
from collections.abc import Sequence
from typing import Any

import onnx_ir as ir

from onnxscript_ep_passes.core.collector import paused_collector
from onnxscript_ep_passes.core.onnx_utils import walk

logger = logging.getLogger(__name__)


_ValueState = tuple[ir.Value, str | None, Any, Any, Any]  # value, name, type, shape, const


def _value_state(v: ir.Value) -> _ValueState:
    return (v, v.name, v.type, v.shape, v.const_value)


def _changed(state: _ValueState) -> bool:
    v, name, type_, shape, const = state
    return (
        v.name != name or v.type is not type_ or v.shape is not shape or v.const_value is not const
    )


def _put_back(state: _ValueState) -> None:
    value = state[0]
    value.name, value.type, value.shape, value.const_value = state[1:]


# node, inputs, output states (plain tuples: a checkpoint of 100k nodes takes ~0.1 s)
_NodeState = tuple[ir.Node, Sequence[ir.Value | None], tuple[_ValueState, ...]]


@dataclasses.dataclass(frozen=True)
class _GraphState:
    graph: ir.Graph
    nodes: tuple[_NodeState, ...]
    inputs: tuple[_ValueState, ...]
    outputs: tuple[ir.Value, ...]
    initializers: tuple[tuple[str, _ValueState], ...]
    names: _Names | None

    @classmethod
    def of(cls, graph: ir.Graph) -> _GraphState:
        return cls(
            graph,
            tuple(  # node, inputs, output states (_value_state inlined: a hot loop)
                [
                    (
                        n,
                        n.inputs,
                        tuple([(v, v.name, v.type, v.shape, v.const_value) for v in n.outputs]),
                    )
                    for n in graph
                ]
            ),
            tuple([_value_state(v) for v in graph.inputs]),
            tuple(graph.outputs),
            tuple([(k, _value_state(v)) for k, v in graph.initializers.items()]),
            _Names.of(graph),
        )

    def restore(self) -> None:
        graph = self.graph
        order = [s[0] for s in self.nodes]
        kept = set(order)
        new = [n for n in graph if n not in kept]
        for node in new:  # detach what was built since, so it uses nothing of the model
            for index in range(len(node.inputs)):
                node.replace_input_with(index, None)
        if new:
            graph.remove(new, safe=False)
        # Value names first: a node put back with an unnamed output would be given a new name.
        for _, _, outputs in self.nodes:
            for output in outputs:  # _changed inlined: one per value of the model
                v, name, type_, shape, const = output
                if (
                    v.name != name
                    or v.type is not type_
                    or v.shape is not shape
                    or v.const_value is not const
                ):
                    _put_back(output)
        for graph_input in self.inputs:
            if _changed(graph_input):
                _put_back(graph_input)
        self._put_back_nodes(order)
        for node, inputs, outputs in self.nodes:
            if len(node.outputs) != len(outputs):
                raise RuntimeError(f"node '{node.name}' changed its outputs: cannot restore")
            if node.inputs != inputs:
                if len(node.inputs) != len(inputs):
                    node.resize_inputs(len(inputs))
                for index, source in enumerate(inputs):
                    if node.inputs[index] is not source:
                        node.replace_input_with(index, source)
        if tuple(graph.outputs) != self.outputs:
            graph.outputs.clear()
            graph.outputs.extend(self.outputs)
        current = tuple(graph.initializers.items())
        if len(current) != len(self.initializers) or any(
            k != k2 or v is not s[0] for (k, v), (k2, s) in zip(current, self.initializers)
        ):
            graph.initializers.clear()
            for _, initializer in self.initializers:
                _put_back(initializer)
                graph.initializers.add(initializer[0])
        if self.names is not None:
            self.names.put_back(graph)

    def _put_back_nodes(self, order: list[ir.Node]) -> None:
        graph = self.graph
        if len(graph) == len(order) and all(map(operator.is_, graph, order)):
            return
        previous: ir.Node | None = None
        for node in order:
            if node.graph is not graph:
                if previous is None:
                    first = next(iter(graph), None)
                    if first is None:
                        graph.append(node)
                    else:
                        graph.insert_before(first, node)
                else:
                    graph.insert_after(previous, node)
            previous = node
        if len(graph) != len(order) or not all(map(operator.is_, graph, order)):
            # Nodes were reordered, not only added and removed: rebuild the order.
            graph.remove(list(graph), safe=False)
            graph.extend(order)


@dataclasses.dataclass(frozen=True)
class _Names:
    """The state of the name authority a graph names new values and nodes with (rule 1).

    onnx-ir keeps it private: when it is not there as expected, nothing is recorded and
    names given after a restore may differ (the model does not)."""

    value_counter: int
    node_counter: int
    value_names: set[str]  # copies, handed back at the restore (restored at most once)
    node_names: set[str]

    @classmethod
    def of(cls, graph: ir.Graph) -> _Names | None:
        authority = getattr(graph, "_name_authority", None)
        fields = [
            getattr(authority, f, None)
            for f in ("_value_counter", "_node_counter", "_value_names", "_node_names")
        ]
        if not (isinstance(fields[0], int) and isinstance(fields[1], int)):
            return None
        if not (isinstance(fields[2], set) and isinstance(fields[3], set)):
            return None
        return cls(fields[0], fields[1], set(fields[2]), set(fields[3]))

    def put_back(self, graph: ir.Graph) -> None:
        authority = graph._name_authority
        authority._value_counter = self.value_counter
        authority._node_counter = self.node_counter
        authority._value_names = self.value_names
        authority._node_names = self.node_names


def _graphs(model: ir.Model) -> list[ir.Graph]:
    return [model.graph, *walk(model.graph)[1]]


class Checkpoint:
    """What :func:`checkpoint` recorded of a model (module docstring)."""

    def __init__(self, model: ir.Model) -> None:
        self.model = model
        with paused_collector():  # many small tuples: no collections of the whole heap
            self._graphs = [_GraphState.of(g) for g in _graphs(model)]
        self._functions = dict(model.functions)
        self._function_sizes = {k: len(f) for k, f in model.functions.items()}
        self._opsets = dict(model.opset_imports)
        self._restored = False

    def restore(self) -> None:
        """Put the model back as it was at the checkpoint (module docstring, rule 2)."""
        if self._restored:
            raise RuntimeError("a checkpoint is restored at most once")
        self._restored = True
        model = self.model
        if (
            dict(model.functions) != self._functions
            or {k: len(f) for k, f in model.functions.items()} != self._function_sizes
            or dict(model.opset_imports) != self._opsets
        ):
            raise RuntimeError("the model's functions or opset imports changed: cannot restore")
        # Inner graphs first: a subgraph built since the checkpoint goes with its node.
        for state in reversed(self._graphs):
            state.restore()
        # What was recorded (tuples per node and value) is not needed again (rule 4): freed
        # now, a young-generation collection right after the restore does not scan it.
        self._graphs = []


def checkpoint(model: ir.Model) -> Checkpoint:
    """Record ``model`` so that :meth:`Checkpoint.restore` can put it back (module docstring)."""
    return Checkpoint(model)


_INSERTED, _USES, _RENAMED, _REMOVED, _NESTED = range(5)


class EditLog:
    """Edits made through it, recorded to be undone (module docstring, rule 5)."""

    def __init__(self) -> None:
        self._entries: list[tuple[Any, ...]] = []
        self._graphs: dict[ir.Graph, tuple[list[ir.Node], _Names | None]] = {}
        self._restored = False

    def _touch(self, graph: ir.Graph) -> None:
        if graph not in self._graphs:  # before its first edit: its nodes and names as they are
            self._graphs[graph] = (list(graph), _Names.of(graph))

    def insert_before(self, graph: ir.Graph, anchor: ir.Node, node: ir.Node) -> None:
        """``graph.insert_before(anchor, node)``, ``node`` new (not in a graph)."""
        self._touch(graph)
        graph.insert_before(anchor, node)
        self._entries.append((_INSERTED, graph, node))

    def replace_all_uses_with(self, old: ir.Value, new: ir.Value) -> None:
        """``old.replace_all_uses_with(new)``: ``old`` must not be a graph output."""
        graph = old.graph
        if graph is not None:
            self._touch(graph)
        self._entries.append((_USES, old, new, list(old.uses())))
        old.replace_all_uses_with(new)

    def rename(self, value: ir.Value, name: str | None) -> None:
        """``value.name = name``."""
        graph = value.graph
        if graph is not None:
            self._touch(graph)
        self._entries.append((_RENAMED, value, value.name))
        value.name = name

    def remove(self, graph: ir.Graph, node: ir.Node) -> None:
        """``graph.remove(node, safe=True)``: it must be unused."""
        self._touch(graph)
        inputs = node.inputs
        graph.remove(node, safe=True)
        self._entries.append((_REMOVED, graph, node, inputs))

    def nest(self, mark: Checkpoint) -> None:
        """Undo ``mark`` (taken after the edits logged so far) before them."""
        self._entries.append((_NESTED, mark))

    def restore(self) -> None:
        """Undo every edit, newest first (module docstring, rule 5)."""
        if self._restored:
            raise RuntimeError("an edit log is restored at most once")
        self._restored = True
        for entry in reversed(self._entries):
            kind = entry[0]
            if kind == _NESTED:
                entry[1].restore()
            elif kind == _INSERTED:
                _, graph, node = entry
                for index in range(len(node.inputs)):  # it uses nothing of the model
                    node.replace_input_with(index, None)
                if node.graph is graph:  # not removed again since
                    graph.remove(node, safe=False)
                _let_go(node)
            elif kind == _USES:
                _, old, new, uses = entry
                for user, index in uses:  # in their order: the uses come back in it
                    if user.inputs[index] is new:
                        user.replace_input_with(index, old)
            elif kind == _RENAMED:
                entry[1].name = entry[2]
            else:  # _REMOVED: inputs now, its place in the graph below
                node, inputs = entry[2], entry[3]
                for index, source in enumerate(inputs):
                    if node.inputs[index] is not source:
                        node.replace_input_with(index, source)
        for graph, (order, names) in self._graphs.items():
            _put_back_order(graph, order)
            if names is not None:
                names.put_back(graph)
        self._entries = []
        self._graphs = {}


def _let_go(node: ir.Node) -> None:
    """Break the cycles of a node the log made and took out again (rule 5): its outputs
    point back at it, and so does its attribute container, which holds the attributes
    (a folded constant's tensor); so only the node and its container are left for the
    cyclic collector (3 objects of 15 for a folded constant)."""
    if all(not out.uses() and not out.is_graph_output() for out in node.outputs):
        node.resize_outputs(0)
    node.attributes.data.clear()  # the dict itself: a UserDict's clear() pops one by one


def _put_back_order(graph: ir.Graph, order: list[ir.Node]) -> None:
    """Put back in ``graph`` the nodes of ``order`` removed from it, in place: each run of
    them in one insertion."""
    previous: ir.Node | None = None
    anchor: ir.Node | None = None  # where the current run goes: after it (None: first)
    run: list[ir.Node] = []
    for node in order:
        owner = node.graph
        if owner is None:
            if not run:
                anchor = previous
            run.append(node)
        elif owner is graph:
            if run:
                _insert_run(graph, anchor, run)
                run = []
        else:
            raise RuntimeError(f"node '{node.name}' moved to another graph: cannot restore")
        previous = node
    if run:
        _insert_run(graph, anchor, run)
    if len(graph) != len(order):
        raise RuntimeError(
            f"graph '{graph.name}' has nodes the edit log did not make: cannot restore"
        )


def _insert_run(graph: ir.Graph, anchor: ir.Node | None, run: list[ir.Node]) -> None:
    if anchor is not None:
        graph.insert_after(anchor, run)
        return
    first = next(iter(graph), None)
    if first is None:
        graph.extend(run)
    else:
        graph.insert_before(first, run)
