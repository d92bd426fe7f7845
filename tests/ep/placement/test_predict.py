"""The prediction's shortcuts give exactly what the plain computation gives.

:func:`predict_placement` takes shortcuts where it can prove the answer is the same; each
is undone here (the ``plain`` fixture: the computation each replaced, put back on the
class) and the prediction compared, record for record (every field, the IR node and
function each stands for, the order), with its Memcpy estimate, the nodes ORT removes and
the cost to the last digit, on the benchmark decoder (as written, and lowered to the
opsets whose schema bodies ORT inlines) and on the test models:

- ORT's inference (:class:`~.load_shapes.LoadShapes`) walks the last ORT order computed
  or the scope's node list, filtered, where it is a topological order
  (:meth:`~.edits.ScopeEdits.inference_order`);
  plainly, ORT's order of the walked nodes, computed afresh at each walk. That the
  inference's shapes are the same in any topological order is checked on its own, with
  random orders (and a walk that is not one, which gives other shapes).
- Common-subexpression elimination keeps the memoized ORT order through the merges
  :meth:`~.edits.ScopeEdits.merge_keeps_order` allows (the order without the merged
  node); plainly, every merge makes it stale. Also checked against ORT's order computed
  afresh after the merges on random DAGs with equal nodes.
- Constant sharing keeps each initializer's key across rounds
  (:attr:`~.edits.ScopeEdits.sharing_keys`); plainly, it is computed in every round.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path

import onnx
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.ep import KernelTable, predict_placement
from onnxscript_ep_passes.ep.cost import placement_cost
from onnxscript_ep_passes.ep.dims import DimSizes
from onnxscript_ep_passes.ep.memo import clear_caches
from onnxscript_ep_passes.ep.names import normalize_domain
from onnxscript_ep_passes.ep.placement import PlacementPrediction, edits
from onnxscript_ep_passes.ep.placement.common_subexpressions import (
    eliminate_common_subexpressions,
)
from onnxscript_ep_passes.ep.placement.edits import (
    ScopeEdits,
    ort_topological_order,
    topological_order,
)
from onnxscript_ep_passes.ep.placement.flatten import Flattener
from onnxscript_ep_passes.ep.placement.graph import FlatNode, FlatScope, FlatValue
from onnxscript_ep_passes.ep.placement.load_shapes import LoadShapes
from onnxscript_ep_passes.ep.placement.results import RemovedNode
from onnxscript_ep_passes.ep.table_choice import get_table
from onnxscript_ep_passes.lowering.lower_opset import run_lowering
from tests.ep import models
from tests.harness import benchmark_decoder


def _never(self: ScopeEdits, node: FlatNode, first: FlatNode) -> bool:
    return False


class _Forgetful(dict[FlatValue, Hashable | None]):
    """A memo that keeps nothing: each key is computed afresh."""

    def __setitem__(self, key: FlatValue, value: Hashable | None) -> None:
        pass


_INIT = ScopeEdits.__init__


def _forgetful_init(self: ScopeEdits, scope: FlatScope, removed: list[RemovedNode]) -> None:
    _INIT(self, scope, removed)
    self.sharing_keys = _Forgetful()


def _plain_inference_order(self: ScopeEdits) -> list[FlatNode]:
    """ORT's order of the nodes the inference walks, computed afresh (what it was)."""
    nodes = [n for n in self.scope.nodes if not n.inlined_by_ort and not n.inserted]
    return ort_topological_order(nodes)


@pytest.fixture
def plain() -> Iterator[Callable[[], None]]:
    """A function that puts back the plain computations (module docstring) until the
    test ends."""
    patch = pytest.MonkeyPatch()

    def undo_shortcuts() -> None:
        patch.setattr(ScopeEdits, "inference_order", _plain_inference_order)
        patch.setattr(ScopeEdits, "merge_keeps_order", _never)
        patch.setattr(ScopeEdits, "__init__", _forgetful_init)

    yield undo_shortcuts
    patch.undo()


Outcome = tuple[PlacementPrediction, dict[str, object], list[tuple[object, ...]]]


def _outcome(model: ir.Model, table: KernelTable) -> Outcome:
    clear_caches()  # no memo carries one run's answers into the other
    table = dataclasses.replace(table)
    prediction = predict_placement(model, table)
    identities = [(id(r.node), id(r.function), r.scope, r.nhwc) for r in prediction.nodes]
    return prediction, placement_cost(prediction, model, DimSizes()).to_dict(), identities


def _assert_same_as_plain(
    model: ir.Model, plain: Callable[[], None], table: KernelTable | None = None
) -> None:
    table = table if table is not None else get_table("cuda", "1.24")
    fast = _outcome(model, table)
    plain()
    slow = _outcome(model, table)
    (prediction, cost, identities), (expected, expected_cost, expected_ids) = fast, slow
    assert prediction.nodes == expected.nodes  # every compared field, in order
    assert prediction.transfers == expected.transfers
    assert prediction.removed == expected.removed
    assert prediction == expected
    assert identities == expected_ids
    assert cost == expected_cost  # exact floats


@pytest.fixture(scope="module")
def decoder_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("decoder") / "decoder.onnx"
    benchmark_decoder(path, 1200, 400_000)
    return path


@pytest.mark.parametrize("opset", [24, 22, 18])
def test_the_decoder_is_predicted_as_plainly(
    decoder_path: Path, opset: int, plain: Callable[[], None]
) -> None:
    model = ir.load(decoder_path)
    if opset < 24:
        run_lowering(model, opset)  # in memory; ORT inlines schema bodies at 22 and below
    _assert_same_as_plain(model, plain)


def test_the_lowered_decoder_walks_a_hint(
    decoder_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shortcut is taken on the decoder lowered to 22 (the test above compares it)."""
    model = ir.load(decoder_path)
    run_lowering(model, 22)
    taken: list[bool] = []
    original = topological_order

    def spy(nodes: list[FlatNode], hint: list[FlatNode]) -> list[FlatNode] | None:
        found = original(nodes, hint)
        taken.append(found is not None)
        return found

    monkeypatch.setattr("onnxscript_ep_passes.ep.placement.edits.topological_order", spy)
    predict_placement(model, get_table("cuda", "1.24"))
    assert any(taken)


_TEST_MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "chain": lambda: models.chain_model(21),
    "cnn": lambda: models.cnn_model(21),
    "if": lambda: models.if_model(21),
    "function": lambda: models.function_model(21, 21),
    "shared_input": lambda: models.shared_input_model(21),
    "loop_and_nested_functions": lambda: models.loop_and_nested_functions_model(21),
}


@pytest.mark.parametrize("name", list(_TEST_MODELS))
@pytest.mark.parametrize(("ep", "version"), [("cuda", "1.24"), ("webgpu", "1.32.0")])
def test_the_test_models_are_predicted_as_plainly(
    name: str, ep: str, version: str, plain: Callable[[], None]
) -> None:
    model = ir.serde.deserialize_model(_TEST_MODELS[name]())
    _assert_same_as_plain(model, plain, get_table(ep, version))


def _random_scope(
    rng: random.Random, count: int, *, repeat: float = 0.0, fewest_inputs: int = 0
) -> FlatScope:
    """A DAG of Adds (IR nodes of their own) whose node list is shuffled (not in
    topological order); with ``repeat``, about that share of them read the same inputs as
    an earlier one (equal to it)."""
    scope = FlatScope("random", opset=21)
    values = [scope.new_value(f"in{i}", "input", "tensor(float)") for i in range(3)]
    nodes: list[FlatNode] = []
    for i in range(count):
        if nodes and rng.random() < repeat:
            inputs = list(rng.choice(nodes).inputs)  # equal to an earlier node
        else:
            width = rng.randint(fewest_inputs, fewest_inputs + 3)
            inputs = [rng.choice(values) for _ in range(width)]
        node, out = _add(f"n{i}", [v for v in inputs if v is not None], scope="random")
        values.append(out)
        nodes.append(node)
    rng.shuffle(nodes)
    scope.nodes = nodes
    return scope


def _is_topological(order: list[FlatNode], nodes: list[FlatNode]) -> bool:
    place = {n: i for i, n in enumerate(order)}
    return sorted(map(id, order)) == sorted(map(id, nodes)) and all(
        place[v.producer] < place[n]
        for n in order
        for v in n.inputs
        if v is not None and v.producer in place
    )


@pytest.mark.parametrize("seed", range(30))
def test_a_hint_is_taken_only_where_it_is_a_topological_order(seed: int) -> None:
    rng = random.Random(seed)
    scope = _random_scope(rng, rng.randint(1, 40))
    nodes = [n for n in scope.nodes if rng.random() < 0.8]
    hint = ort_topological_order(scope.nodes)
    if rng.random() < 0.5:  # a shuffled hint is rarely a topological order
        rng.shuffle(hint)
    if rng.random() < 0.2 and hint:
        hint.pop(rng.randrange(len(hint)))  # a node missing from the hint
    found = topological_order(nodes, hint)
    members = set(nodes)
    filtered = [n for n in hint if n in members]
    if _is_topological(filtered, nodes):
        assert found is not None and [id(n) for n in found] == [id(n) for n in filtered]
    else:
        assert found is None


def _flat_scope(model: ir.Model) -> FlatScope:
    flattener = Flattener(model, get_table("cuda", "1.24"))
    opsets = {normalize_domain(k): v for k, v in model.opset_imports.items()}
    return flattener.build_graph(model.graph, opsets, "graph 'main'", None)


def _random_topological(nodes: list[FlatNode], rng: random.Random) -> list[FlatNode]:
    """A topological order of ``nodes`` drawn at random (each after its producers)."""
    members = set(nodes)
    waiting = {
        n: {v.producer for v in n.inputs if v is not None and v.producer in members} for n in nodes
    }
    ready = [n for n, producers in waiting.items() if not producers]
    order: list[FlatNode] = []
    while ready:
        node = ready.pop(rng.randrange(len(ready)))
        order.append(node)
        for out in node.outputs:
            for consumer, _ in out.consumers if out is not None else ():
                pending = waiting.get(consumer)
                if pending is not None and node in pending:
                    pending.discard(node)
                    if not pending:
                        ready.append(consumer)
    assert len(order) == len(nodes)
    return order


def _inferred(model: ir.Model, walk: Callable[[list[FlatNode]], list[FlatNode]]) -> list[object]:
    """Each value's shape after ORT's inference at load walked in ``walk``'s order."""
    scope = _flat_scope(model)
    nodes = [n for n in scope.nodes if not n.inlined_by_ort and not n.inserted]
    shapes = LoadShapes.of(scope, lambda: walk(nodes))
    assert shapes is not None
    return [(v.shape, shapes.dims.get(v)) for v in scope.values]


def test_the_inference_gives_the_same_shapes_in_any_topological_order(
    decoder_path: Path,
) -> None:
    model = ir.load(decoder_path)
    run_lowering(model, 22)  # lowered nodes have no shapes: the inference learns them
    expected = _inferred(model, ort_topological_order)
    rng = random.Random(0)
    for _ in range(3):
        assert _inferred(model, lambda nodes: _random_topological(nodes, rng)) == expected
    # A walk that is not topological learns less: the comparison can fail.
    assert _inferred(model, lambda nodes: ort_topological_order(nodes)[::-1]) != expected


def test_merges_keep_the_order_they_are_allowed_to(monkeypatch: pytest.MonkeyPatch) -> None:
    walks: list[int] = []
    walk = edits._ort_walk

    def counted(nodes: list[FlatNode]) -> tuple[object, ...]:
        walks.append(len(nodes))
        return walk(nodes)

    monkeypatch.setattr(edits, "_ort_walk", counted)
    kept = refused = 0
    for seed in range(300):
        rng = random.Random(seed)
        scope = _random_scope(rng, rng.randint(2, 60), repeat=0.4, fewest_inputs=1)
        state = ScopeEdits(scope, [])
        for _ in range(3):  # rounds: merged consumers make equal nodes of their own
            state.order()
            walks.clear()
            if not eliminate_common_subexpressions(state):
                break
            memoized = [id(n) for n in state.order()]
            kept += not walks
            refused += bool(walks)
            live = [n for n in scope.nodes if n not in state.gone]
            assert memoized == [id(n) for n in ort_topological_order(live)], seed
            state.finish()
    assert kept > 10 and refused > 10  # the memo was kept through merges, and dropped


def _add(name: str, inputs: list[FlatValue], scope: str = "s") -> tuple[FlatNode, FlatValue]:
    ir_node = ir.Node("", "Add", inputs=[])
    node = FlatNode(name, "Add", "", 14, list(inputs), [], scope, node=ir_node)
    for slot, value in enumerate(inputs):
        value.consumers.append((node, slot))
    out = FlatValue(f"{name}_out", "node", "tensor(float)", producer=node)
    node.outputs.append(out)
    return node, out


def test_a_merge_whose_kept_node_a_consumer_reaches_first_drops_the_memo() -> None:
    """C reads P1 and M; P1 reads X and F; F and M are equal. ORT walks C, P1, X, F (so
    F is listed after C was reached), M: X F P1 M C. Once M is merged into F, C's
    producers are P1 and F, and F, listed after P1, is walked first: F X P1 C, not the
    memo without M: the merge must not keep it."""
    scope = FlatScope("s", opset=21)
    in0, in1 = (scope.new_value(n, "input", "tensor(float)") for n in ("in0", "in1"))
    f, f_out = _add("F", [in0])
    m, m_out = _add("M", [in0])
    x, x_out = _add("X", [in1])
    p1, p1_out = _add("P1", [x_out, f_out])
    c, _ = _add("C", [p1_out, m_out])
    scope.nodes = [m, p1, f, x, c]
    state = ScopeEdits(scope, [])
    assert [n.name for n in state.order()] == ["X", "F", "P1", "M", "C"]
    assert not state.merge_keeps_order(m, f)
    assert eliminate_common_subexpressions(state)
    assert [n.name for n in state.order()] == ["F", "X", "P1", "C"]  # afresh
    live = [n for n in scope.nodes if n not in state.gone]
    assert [n.name for n in ort_topological_order(live)] == ["F", "X", "P1", "C"]


def test_a_merge_into_a_node_without_consumers_drops_the_memo() -> None:
    """F has no consumers (ORT walks it from the end, first), M feeds C with X: F X M C.
    Once merged, F is walked from C, after X (listed after F): X F C, not F X C."""
    scope = FlatScope("s", opset=21)
    in0, in1 = (scope.new_value(n, "input", "tensor(float)") for n in ("in0", "in1"))
    f, _ = _add("F", [in0])
    m, m_out = _add("M", [in0])
    x, x_out = _add("X", [in1])
    c, _ = _add("C", [m_out, x_out])
    scope.nodes = [m, c, f, x]
    state = ScopeEdits(scope, [])
    assert [n.name for n in state.order()] == ["F", "X", "M", "C"]
    assert not state.merge_keeps_order(m, f)
    assert eliminate_common_subexpressions(state)
    assert [n.name for n in state.order()] == ["X", "F", "C"]


def test_a_merge_that_keeps_the_order_keeps_the_memo() -> None:
    """F is listed before C is reached and has a consumer of its own: the memo stands."""
    scope = FlatScope("s", opset=21)
    in0, in1 = (scope.new_value(n, "input", "tensor(float)") for n in ("in0", "in1"))
    f, f_out = _add("F", [in0])
    m, m_out = _add("M", [in0])
    x, x_out = _add("X", [in1])
    b, _ = _add("B", [f_out])
    c, _ = _add("C", [m_out, x_out])
    scope.nodes = [f, m, x, c, b]
    state = ScopeEdits(scope, [])
    assert [n.name for n in state.order()] == ["F", "B", "X", "M", "C"]
    assert state.merge_keeps_order(m, f)
    assert eliminate_common_subexpressions(state)
    memo = state.order()
    live = [n for n in scope.nodes if n not in state.gone]
    assert [n.name for n in memo] == ["F", "B", "X", "C"]
    assert [n.name for n in ort_topological_order(live)] == ["F", "B", "X", "C"]
