"""Static shape folding: sizes are checked before anything is computed, results are reused,
edits can be logged and undone.

The folding itself (what folds, what stays) is checked in ``test_legalize.py``; this
module checks the guards of :mod:`onnxscript_ep_passes.passes.static_shapes` rule 2, and
rule 4.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.core.checkpoint import EditLog
from onnxscript_ep_passes.passes import fold_static_shapes

INT64 = onnx.TensorProto.INT64
FLOAT = onnx.TensorProto.FLOAT


def _one_node_model(
    op: str, inputs: dict[str, np.ndarray], out_shape: list[int] | None
) -> ir.Model:
    """``op`` over Constant inputs (named as in ``inputs``), feeding a graph output."""
    nodes = [
        oh.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(array))
        for name, array in inputs.items()
    ]
    nodes.append(oh.make_node(op, list(inputs), ["y"]))
    nodes.append(oh.make_node("Identity", ["y"], ["out"]))
    graph = oh.make_graph(
        nodes,
        "g",
        [],
        [oh.make_tensor_value_info("out", FLOAT, None)],
        value_info=[oh.make_tensor_value_info("y", FLOAT, out_shape)],
    )
    return ir.from_proto(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)]))


def _fold(model: ir.Model, op: str) -> int:
    return fold_static_shapes([n for n in model.graph if n.op_type == op], 24)


@pytest.mark.parametrize("declared", [None, [20_000, 1_000]])
def test_a_large_constant_of_shape_is_not_computed(declared: list[int] | None) -> None:
    # 20M float32 elements (80 MB) if it were evaluated: the size check comes first,
    # whether the output's shape is declared or only follows from the shape input.
    model = _one_node_model("ConstantOfShape", {"shape": np.array([20_000, 1_000])}, declared)
    tracemalloc.start()
    try:
        assert _fold(model, "ConstantOfShape") == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8_000_000, peak
    assert [n.op_type for n in model.graph] == ["Constant", "ConstantOfShape", "Identity"]


def test_a_huge_constant_of_shape_is_left_alone() -> None:
    model = _one_node_model("ConstantOfShape", {"shape": np.array([1 << 40, 1 << 40])}, None)
    assert _fold(model, "ConstantOfShape") == 0
    assert [n.op_type for n in model.graph] == ["Constant", "ConstantOfShape", "Identity"]


@pytest.mark.parametrize(
    ("op", "inputs"),
    [
        ("Expand", {"x": np.ones((1, 4), np.float32), "shape": np.array([5_000, 1_000, 1])}),
        ("Tile", {"x": np.ones((2, 2), np.float32), "repeats": np.array([5_000, 1_000])}),
        (
            "Range",
            {
                "start": np.array(0, np.float32),
                "limit": np.array(2e7, np.float32),
                "delta": np.array(1, np.float32),
            },
        ),
    ],
)
def test_ops_sized_by_their_inputs_are_checked_first(
    op: str, inputs: dict[str, np.ndarray]
) -> None:
    # Each would be 20M float32 elements (80 MB) if it were evaluated.
    model = _one_node_model(op, inputs, None)
    tracemalloc.start()
    try:
        assert _fold(model, op) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8_000_000, peak


def test_a_small_constant_of_shape_still_folds() -> None:
    model = _one_node_model("ConstantOfShape", {"shape": np.array([2, 3])}, [2, 3])
    assert _fold(model, "ConstantOfShape") == 1
    y = next(n for n in model.graph if n.op_type == "Identity").inputs[0]
    assert y is not None and y.name == "y"
    assert ir.convenience.get_const_tensor(y).numpy().tolist() == [[0.0] * 3] * 2


def test_repeated_shape_math_folds_to_equal_independent_constants() -> None:
    # The same node folded twice (two models; the second is served from the memo):
    # equal values, separate arrays.
    tensors = []
    for _ in range(2):
        model = _one_node_model("ConstantOfShape", {"shape": np.array([2, 2])}, [2, 2])
        assert _fold(model, "ConstantOfShape") == 1
        y = next(n for n in model.graph if n.op_type == "Identity").inputs[0]
        assert y is not None
        tensors.append(ir.convenience.get_const_tensor(y).numpy())
    assert tensors[0].tolist() == tensors[1].tolist()
    assert not np.shares_memory(tensors[0], tensors[1])


def test_folding_through_an_edit_log_is_the_same_and_is_undone() -> None:
    """Rule 4: the same edits; restoring the log gives the model back, byte for byte."""
    nodes = [
        oh.make_node("Shape", ["x"], ["s"]),
        oh.make_node("Constant", [], ["one"], value=onnx.numpy_helper.from_array(np.int64(1))),
        oh.make_node("Add", ["s", "one"], ["t"]),
        oh.make_node("Identity", ["s"], ["out_s"]),
        oh.make_node("Cast", ["t"], ["out_t"], to=FLOAT),
        oh.make_node("Identity", ["s"], ["out_s2"]),
    ]
    outputs = [
        oh.make_tensor_value_info(name, dtype, None)
        for name, dtype in (("out_s", INT64), ("out_t", FLOAT), ("out_s2", INT64))
    ]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", FLOAT, [2, 3])], outputs)
    proto = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)])
    model, twin = ir.from_proto(proto), ir.from_proto(proto)
    saved = [ir.serde.serialize_model(m).SerializeToString() for m in (model, twin)]
    log = EditLog()
    folded = [
        fold_static_shapes([n for n in m.graph if n.op_type in ("Shape", "Add")], 24, log=given)
        for m, given in ((model, log), (twin, None))
    ]
    assert folded == [2, 2]
    after = ir.serde.serialize_model(model).SerializeToString()
    assert after == ir.serde.serialize_model(twin).SerializeToString() != saved[0]
    made = [n for n in model.graph if n.op_type == "Constant" and n.name.endswith("folded_0")]
    assert len(made) == 2
    log.restore()
    assert ir.serde.serialize_model(model).SerializeToString() == saved[0]
    assert all(n.graph is None and not n.outputs and not n.attributes for n in made)
