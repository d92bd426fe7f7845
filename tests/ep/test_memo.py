"""Cached placement and pricing equal a fresh computation, also after in-place edits.

The EP search predicts and prices one model many times, editing it in place between
calls. Each case below warms the caches on a model, edits it in place (lowered one
opset, a node expanded, a type, a shape, an attribute or a constant changed, nodes
removed), then checks the cached answer record for record and the cost to the last digit
against one computed with every cache emptied and a new table object.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.core.onnx_utils import attributes_key
from onnxscript_ep_passes.ep import KernelTable, predict_placement
from onnxscript_ep_passes.ep.cost import PlacementCost, placement_cost
from onnxscript_ep_passes.ep.dims import DimSizes
from onnxscript_ep_passes.ep.memo import BoundedCache, clear_caches, shape_key
from onnxscript_ep_passes.ep.placement import NodePlacement, PlacementPrediction
from onnxscript_ep_passes.ep.table_choice import get_table
from onnxscript_ep_passes.lowering.expansion import expand_node
from onnxscript_ep_passes.lowering.lower_opset import run_lowering
from tests.ep.models import cnn_model

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

Answer = tuple[PlacementPrediction, PlacementCost]


def _answer(model: ir.Model, table: KernelTable, *, fresh: bool) -> Answer:
    if fresh:
        clear_caches()
        table = dataclasses.replace(table)  # a new table: its memo is empty
    prediction = predict_placement(model, table)
    return prediction, placement_cost(prediction, model, DimSizes())


def _check(model: ir.Model, table: KernelTable) -> Answer:
    """The cached answer for ``model``, after checking it equals a fresh one."""
    cached = _answer(model, table, fresh=False)
    fresh = _answer(model, table, fresh=True)
    (prediction, cost), (expected, expected_cost) = cached, fresh
    assert prediction == expected  # every record's compare fields, every transfer
    assert all(a.node is b.node for a, b in zip(prediction.nodes, expected.nodes))
    assert all(a.function is b.function for a, b in zip(prediction.nodes, expected.nodes))
    assert [_value_id(t.ir_value, model) for t in prediction.transfers] == [
        _value_id(t.ir_value, model) for t in expected.transfers
    ]
    assert cost.to_dict() == expected_cost.to_dict()  # exact floats
    return cached


def _value_id(value: ir.Value | None, model: ir.Model) -> object:
    """A model's value itself; a value of a body ORT inlines (built anew by each call) by
    its name, type and shape."""
    if value is None or value.graph is model.graph:
        return value
    return (value.name, value.dtype, value.shape)


def _first(model: ir.Model, op_type: str) -> ir.Node:
    return next(n for n in model.graph if n.op_type == op_type)


@pytest.fixture
def decoder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ir.Model:
    """A 3-block decoder at opset 24 (benchmarks/make_decoder.py)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import make_decoder

    path = tmp_path / "decoder.onnx"
    make_decoder.build(path, 120, 400_000)
    return ir.load(path)


def _remove_sigmoids(model: ir.Model) -> None:
    """Replace each Sigmoid by its input (removes nodes; values rewired)."""
    for node in [n for n in model.graph if n.op_type == "Sigmoid"]:
        ir.convenience.replace_all_uses_with(node.outputs[0], node.inputs[0])
        model.graph.remove(node, safe=True)


def _retype_first_matmul(model: ir.Model) -> None:
    """The first MatMul's output becomes float16 with another shape, the first Sigmoid's
    input int32."""
    out = _first(model, "MatMul").outputs[0]
    out.dtype = ir.DataType.FLOAT16
    out.shape = ir.Shape(["batch", 7, 3])
    _first(model, "Sigmoid").inputs[0].dtype = ir.DataType.INT32  # no CUDA kernel for it


def _cast_to_double(model: ir.Model) -> None:
    """The first Cast now casts to double; its output's type and shape are left to
    inference, which reads the new attribute."""
    node = _first(model, "Cast")
    node.attributes["to"] = ir.AttrInt64("to", ir.DataType.DOUBLE)
    for out in node.outputs:
        out.type = None
        out.shape = None


def _expand_rms(model: ir.Model) -> None:
    expand_node(model, _first(model, "RMSNormalization"))


_EDITS: dict[str, Callable[[ir.Model], None]] = {
    "lower_to_23": lambda m: run_lowering(m, 23) and None,
    "expand_rms_normalization": _expand_rms,
    "retype_and_reshape": _retype_first_matmul,
    "cast_attribute": _cast_to_double,
    "remove_nodes": _remove_sigmoids,
    "lower_to_22": lambda m: run_lowering(m, 22) and None,
}


def test_repeated_calls_equal_fresh_ones_through_in_place_edits(decoder: ir.Model) -> None:
    table = get_table("cuda", "1.24")
    before = _check(decoder, table)
    answers = [before]
    for name, edit in _EDITS.items():
        edit(decoder)
        answers.append(_check(decoder, table))
        assert answers[-1] == _check(decoder, table), name  # and again, all cached
    # Every edit changed the answer: the checks above compared different states.
    costs = [cost.to_dict() for _, cost in answers]
    changed = [a != b for a, b in itertools.pairwise(costs)]
    assert all(changed), dict(zip(_EDITS, changed))


def _expand_model(shape: list[int]) -> ir.Model:
    """X[1, 4] -> Expand(shape) -> Cast(float) -> Relu -> Y; no shape declared past X."""
    graph = oh.make_graph(
        [
            oh.make_node("Expand", ["X", "shape"], ["e"], name="expand"),
            oh.make_node("Cast", ["e"], ["c"], to=onnx.TensorProto.FLOAT, name="cast"),
            oh.make_node("Relu", ["c"], ["Y"], name="relu"),
        ],
        "g",
        [oh.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, 4])],
        [oh.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.array(shape, np.int64), "shape")],
    )
    return ir.from_proto(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)]))


def test_constants_and_attributes_changed_in_place_change_the_answer() -> None:
    table = KernelTable.from_rows(
        "TestEP", "0.0", "test", [("", "Relu", 14, None, {"T": ["tensor(float)"]})]
    )
    model = _expand_model([2, 4])
    prediction, small = _check(model, table)
    # Relu on the EP; the Cast to float of a float is removed before placement (ORT's).
    assert prediction.fallback_nodes[-1].op_type == "Expand"
    assert [r.op_type for r in prediction.removed] == ["Cast"]
    model.graph.initializers["shape"].const_value = ir.tensor(np.array([64, 4], np.int64))
    _, large = _check(model, table)
    assert large.cpu_us > small.cpu_us  # Expand (no kernel: CPU) now writes 32x the bytes
    _first(model, "Cast").attributes["to"] = ir.AttrInt64("to", ir.DataType.DOUBLE)
    prediction, double = _check(model, table)
    assert double.cpu_us > large.cpu_us  # the Cast writes doubles
    assert prediction.fallback_nodes[-1].op_type == "Relu"  # no double Relu kernel


def _attention_25() -> ir.Model:
    """Relu -> Attention-25 (no kernel on any EP, CPU included: ORT inlines its body)."""
    shape = [1, 4, 8, 16]
    graph = oh.make_graph(
        [
            oh.make_node("Relu", ["x"], ["q"], name="relu"),
            oh.make_node("Attention", ["q", "k", "v"], ["y"], name="attn", is_causal=1),
        ],
        "g",
        [oh.make_tensor_value_info(n, onnx.TensorProto.FLOAT, shape) for n in ("x", "k", "v")],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, shape)],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 25)])
    model.ir_version = 11
    return ir.from_proto(model)


def test_a_body_ort_inlines_follows_the_edits_of_its_node() -> None:
    table = KernelTable.from_rows("TestEP", "0.0", "test", [("", "Relu", 14, None, None)])
    model = _attention_25()
    causal, _ = _check(model, table)
    assert any(n.inlined_by_ort for n in causal.nodes)
    _first(model, "Attention").attributes["is_causal"] = ir.AttrInt64("is_causal", 0)
    plain, _ = _check(model, table)
    assert len(plain.nodes) < len(causal.nodes)  # no causal mask in the body


def test_layout_phase_cached_equals_fresh(webgpu_table: KernelTable) -> None:
    model = ir.from_proto(cnn_model(21))
    first = _check(model, webgpu_table)
    assert any(n.nhwc for n in first[0].nodes)  # the NHWC phase ran
    conv = _first(model, "Conv")
    conv.inputs[0].dtype = ir.DataType.FLOAT16  # X: the first Conv's types change
    second = _check(model, webgpu_table)
    assert second != first
    _remove_first_relu(model)
    _check(model, webgpu_table)


def _remove_first_relu(model: ir.Model) -> None:
    relu = _first(model, "Relu")
    ir.convenience.replace_all_uses_with(relu.outputs[0], relu.inputs[0])
    model.graph.remove(relu, safe=True)


def test_records_built_through_slots_equal_constructed_ones(decoder: ir.Model) -> None:
    prediction = predict_placement(decoder, get_table("cuda", "1.24"))
    names = [f.name for f in dataclasses.fields(NodePlacement)]
    for record in prediction.nodes:
        assert not hasattr(record, "__dict__")  # slots: every field, nothing else
        # Each value went to its own field (predict stores each field through its slot).
        assert record.placement in ("ep", "cpu") and isinstance(record.nhwc, bool)
        if record.node is not None and not record.inlined_by_ort:
            assert (record.name, record.op_type) == (record.node.name, record.node.op_type)
        rebuilt = NodePlacement(**{name: getattr(record, name) for name in names})
        assert rebuilt == record and hash(rebuilt) == hash(record) and repr(rebuilt) == repr(record)


def test_attribute_keys_tell_values_apart() -> None:
    def key(value: float) -> object:
        node = ir.node("LeakyRelu", [], attributes={"alpha": value})
        return attributes_key(node)

    assert key(0.0) != key(-0.0)
    assert key(float("nan")) == key(float("nan"))
    assert key(0.5) == key(0.5)


def test_bounded_cache_empties_itself_when_full() -> None:
    cache: BoundedCache[int, int] = BoundedCache(limit=2)
    cache.put(1, 1)
    cache.put(2, 2)
    cache.put(3, 3)
    assert len(cache) == 1 and cache.get(3) == 3 and cache.get(1) is None


def test_shape_keys_are_values_taken_when_made() -> None:
    shape = ir.Shape(["batch", 3, None])
    key = shape_key(shape)
    assert key == shape_key(ir.Shape([ir.SymbolicDim("batch"), 3, ir.SymbolicDim(None)]))
    assert hash(key) == hash(shape_key(ir.Shape(["batch", 3, None])))
    assert key != shape_key(ir.Shape(["seq", 3, None]))  # another name
    assert key != shape_key(ir.Shape([None, 3, None]))  # a name, not an unknown
    assert key != shape_key(ir.Shape(["3", 3, None])) and key != shape_key(ir.Shape(["batch", 3]))
    shape[1] = 4  # edited in place: the key made before is unchanged, a new one differs
    assert key == shape_key(ir.Shape(["batch", 3, None])) != shape_key(shape)
    assert shape_key(None) is None
