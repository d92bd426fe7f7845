"""ORT's topological order, its memo on ScopeEdits, and the memo of ORT's inference.

- :func:`ort_topological_order` equals a reference written from its rule (a recursive
  depth-first walk back from the nodes without consumers, last first; each node's
  producers walked last index first; a node listed after all its producers), on random
  DAGs whose node list is not in topological order, also on a subset of their nodes.
- :meth:`ScopeEdits.order` is reused until an edit of the wiring (each kind) or a new
  node list, and always equals the order computed afresh.
- :class:`LoadShapes`' inference memo is keyed on input data: two ``Reshape`` nodes on
  the same input and different constant shapes infer different shapes; equal ones infer
  once.
- :attr:`ScopeEdits.cse_keys` loses the key of each node an edit rewires (its inputs or
  outputs), and only those.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto

from onnxscript_ep_passes.ep import KernelTable
from onnxscript_ep_passes.ep.memo import clear_caches
from onnxscript_ep_passes.ep.names import normalize_domain
from onnxscript_ep_passes.ep.placement import load_shapes
from onnxscript_ep_passes.ep.placement.edits import ScopeEdits, ort_topological_order
from onnxscript_ep_passes.ep.placement.flatten import Flattener
from onnxscript_ep_passes.ep.placement.graph import FlatNode, FlatScope, FlatValue
from onnxscript_ep_passes.ep.placement.load_shapes import LoadShapes
from onnxscript_ep_passes.ep.placement.results import RemovedNode


def _reference_order(nodes: list[FlatNode]) -> list[FlatNode]:
    """The rule of ``ort_topological_order``'s docstring, written as a recursive walk."""
    index = {node: i for i, node in enumerate(nodes)}
    visited: set[FlatNode] = set()
    order: list[FlatNode] = []

    def visit(node: FlatNode) -> None:
        visited.add(node)
        producers = {
            index[v.producer] for v in node.inputs if v is not None and v.producer in index
        }
        for i in sorted(producers, reverse=True):  # the last producer is walked first
            if nodes[i] not in visited:
                visit(nodes[i])
        order.append(node)  # after all its producers

    leaves = [n for n in nodes if not any(o is not None and o.consumers for o in n.outputs)]
    for leaf in reversed(leaves):  # the last node without consumers first
        if leaf not in visited:
            visit(leaf)
    return order


def _random_scope(rng: random.Random, count: int) -> FlatScope:
    """A DAG of ``count`` nodes, listed in a shuffled order: each reads up to three
    earlier values (repeats, graph inputs and missing inputs included); some have two
    outputs, some outputs are read by nothing."""
    scope = FlatScope("random", opset=21)
    values = [scope.new_value(f"x{i}", "input", "tensor(float)") for i in range(3)]
    built: list[FlatNode] = []
    for i in range(count):
        inputs: list[FlatValue | None] = [
            rng.choice(values) if rng.random() > 0.1 else None for _ in range(rng.randint(0, 3))
        ]
        outputs: list[FlatValue | None] = [
            scope.new_value(f"n{i}_{k}", "node", "tensor(float)") for k in range(rng.randint(1, 2))
        ]
        node = FlatNode(f"n{i}", "Add", "", 14, inputs, outputs, scope.name)
        for slot, value in enumerate(inputs):
            if value is not None:
                value.consumers.append((node, slot))
        for slot, value in enumerate(outputs):
            assert value is not None
            value.producer, value.producer_slot = node, slot
        values.extend(o for o in outputs if o is not None)
        built.append(node)
    rng.shuffle(built)
    scope.nodes = built
    return scope


def _same(a: list[FlatNode], b: list[FlatNode]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


@pytest.mark.parametrize("seed", range(20))
def test_the_order_is_orts_rule_on_random_dags(seed: int) -> None:
    rng = random.Random(seed)
    scope = _random_scope(rng, rng.randint(1, 60))
    order = ort_topological_order(scope.nodes)
    assert _same(order, _reference_order(scope.nodes))
    position = {n: i for i, n in enumerate(order)}
    for node in order:  # a topological order: producers first
        for v in node.inputs:
            if v is not None and v.producer is not None:
                assert position[v.producer] < position[node]
    subset = [n for n in scope.nodes if rng.random() < 0.7]  # producers outside: not walked
    assert _same(ort_topological_order(subset), _reference_order(subset))


def _chain_scope() -> tuple[FlatScope, list[FlatNode]]:
    """``x -> a -> b -> c`` plus ``d`` reading ``x``, listed a, b, c, d."""
    scope = FlatScope("chain", opset=21)
    x = scope.new_value("x", "input", "tensor(float)")
    nodes: list[FlatNode] = []
    source = x
    for name in ("a", "b", "c", "d"):
        out = scope.new_value(f"{name}_out", "node", "tensor(float)")
        read = x if name == "d" else source
        node = FlatNode(name, "Relu", "", 14, [read], [out], scope.name)
        read.consumers.append((node, 0))
        out.producer = node
        nodes.append(node)
        source = out
    scope.nodes = list(nodes)
    return scope, nodes


def _fresh(state: ScopeEdits) -> list[FlatNode]:
    return ort_topological_order([n for n in state.scope.nodes if n not in state.gone])


def _edited(state: ScopeEdits, edit: Callable[[], None], before: list[FlatNode]) -> list[FlatNode]:
    """Edit through ``state``: its count goes up and the next order is computed again."""
    edits = state.edits
    edit()
    assert state.edits > edits
    return _recomputed(state, before)


def _recomputed(state: ScopeEdits, before: list[FlatNode]) -> list[FlatNode]:
    now = state.order()
    assert now is not before
    assert _same(now, _fresh(state))
    assert state.order() is now  # kept until the next change
    return now


def test_the_order_memo_is_reused_until_the_wiring_or_the_node_list_changes() -> None:
    scope, (a, b, c, d) = _chain_scope()
    removed: list[RemovedNode] = []
    state = ScopeEdits(scope, removed)
    order = state.order()
    assert state.order() is order  # nothing edited: the memo
    assert _same(order, _fresh(state))
    a_out, b_out, c_out = a.outputs[0], b.outputs[0], c.outputs[0]
    assert a_out is not None and b_out is not None and c_out is not None
    # rewire_input: d reads c's output, so d comes after c
    order = _edited(state, lambda: state.rewire_input(d, 0, c_out), order)
    assert order[-1] is d
    # replace: what reads b's output reads a's (b is left without consumers, still live)
    order = _edited(state, lambda: state.replace(b_out, a_out), order)
    assert b in order
    order = _edited(state, lambda: state.remove(b, "identity_elimination"), order)
    assert b not in order
    # finish keeps the live nodes: the memo stays valid for the new list
    state.finish()
    assert state.order() is order
    assert _same(order, _fresh(state))
    # rewire_output: a new value becomes c's output
    new_out = scope.new_value("c_new", "node", "tensor(float)")
    order = _edited(state, lambda: state.rewire_output(c, 0, new_out), order)
    assert new_out.producer is c
    # fold: a's outputs become initializers without a producer
    order = _edited(state, lambda: state.fold(a, "constant_folding"), order)
    assert a not in order
    assert a_out.kind == "initializer" and a_out.producer is None
    # a new node list, then the same list made longer
    scope.nodes = [n for n in scope.nodes if n is not d]
    order = _recomputed(state, order)
    assert d not in order
    scope.nodes.append(d)
    order = _recomputed(state, order)
    assert d in order
    assert [r.rule for r in removed] == ["identity_elimination", "constant_folding"]


def test_an_edit_drops_the_kept_cse_keys_of_the_nodes_it_rewires() -> None:
    scope, (a, b, c, d) = _chain_scope()
    state = ScopeEdits(scope, [])
    a_out, b_out, c_out = a.outputs[0], b.outputs[0], c.outputs[0]
    assert a_out is not None and b_out is not None and c_out is not None

    def kept_after(edit: Callable[[], None]) -> set[str]:
        state.cse_keys.clear()
        state.cse_keys.update({n: n.name for n in (a, b, c, d)})
        edit()
        return {n.name for n in state.cse_keys}

    assert kept_after(lambda: state.rewire_input(d, 0, c_out)) == {"a", "b", "c"}
    assert kept_after(lambda: state.replace(a_out, c_out)) == {"a", "c", "d"}  # b read a
    new_out = scope.new_value("c_new", "node", "tensor(float)")
    assert kept_after(lambda: state.rewire_output(c, 0, new_out)) == {"a", "b", "d"}
    assert kept_after(lambda: state.remove(b, "identity_elimination")) == {"a", "b", "c", "d"}


def _reshape_scope(targets: list[list[int]]) -> FlatScope:
    """``x`` (float, 2x3x4) reshaped by each constant of ``targets``; no output shapes."""
    initializers = [
        onnx.numpy_helper.from_array(np.array(t, dtype=np.int64), f"t{i}")
        for i, t in enumerate(targets)
    ]
    nodes = [
        oh.make_node("Reshape", ["x", f"t{i}"], [f"y{i}"], name=f"r{i}")
        for i in range(len(targets))
    ]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [oh.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(len(nodes))],
        initializers,
    )
    proto = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)])
    proto.ir_version = 10
    model = ir.serde.deserialize_model(proto)
    table = KernelTable.from_rows("TestEP", "0.0", "test", [("", "Reshape", 1, None, None)])
    flat = Flattener(model, table)
    opsets = {normalize_domain(k): v for k, v in model.opset_imports.items()}
    return flat.build_graph(model.graph, opsets, "main", None)


def _output_shapes(scope: FlatScope) -> list[tuple[int, ...] | None]:
    shapes = LoadShapes.of(scope)
    assert shapes is not None
    return [n.outputs[0].shape if n.outputs[0] is not None else None for n in scope.nodes]


def test_the_inference_memo_is_keyed_on_constant_data(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[str] = []
    run = LoadShapes._run_inference

    def counted(self: LoadShapes, node: FlatNode, ir_node: ir.Node) -> list[object]:
        runs.append(node.name)
        return run(self, node, ir_node)  # type: ignore[return-value]

    monkeypatch.setattr(LoadShapes, "_run_inference", counted)
    clear_caches()
    assert len(load_shapes._INFERRED) == 0
    assert _output_shapes(_reshape_scope([[4, 6], [6, 4], [4, 6]])) == [(4, 6), (6, 4), (4, 6)]
    assert sorted(runs) == ["r1", "r2"]  # r0 equals r2 (ORT's order walks r2 first): once
    # the next prediction reads the memo, and a fresh inference says the same
    assert _output_shapes(_reshape_scope([[6, 4], [24]])) == [(6, 4), (24,)]
    assert sorted(runs[2:]) == ["r1"]
    clear_caches()
    assert len(load_shapes._INFERRED) == 0
    assert _output_shapes(_reshape_scope([[6, 4], [4, 6]])) == [(6, 4), (4, 6)]
    assert sorted(runs[3:]) == ["r0", "r1"]
