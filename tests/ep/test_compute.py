"""Work of nodes and bytes of values from shapes, and shapes inferred where missing."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.ep.compute import (
    STRING_ELEMENT_BYTES,
    UNKNOWN_ELEMENTS,
    ValueSizes,
    element_bits,
)
from onnxscript_ep_passes.ep.dims import DimSizes
from onnxscript_ep_passes.ep.shapes import infer_missing_shapes

FLOAT = onnx.TensorProto.FLOAT
INT64 = onnx.TensorProto.INT64


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto]) -> ir.Model:
    graph = oh.make_graph(nodes, "g", inputs, [oh.make_tensor_value_info("y", FLOAT, None)])
    return ir.from_proto(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)]))


def _node(model: ir.Model, name: str) -> ir.Node:
    return next(n for n in model.graph if n.name == name)


def test_matmul_and_attention_dominate_shape_math() -> None:
    model = _model(
        [
            oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            oh.make_node("Attention", ["q", "k", "v"], ["a"], name="attn"),
            oh.make_node("Shape", ["x"], ["s"], name="shape"),
            oh.make_node(
                "Constant", [], ["axes"], value=onnx.numpy_helper.from_array(np.array([0]))
            ),
            oh.make_node("Unsqueeze", ["s", "axes"], ["u"], name="unsq"),
            oh.make_node("Relu", ["h"], ["y"], name="relu"),
        ],
        [
            oh.make_tensor_value_info("x", FLOAT, ["batch", "sequence_length", 64]),
            oh.make_tensor_value_info("w", FLOAT, [64, 32]),
            oh.make_tensor_value_info("q", FLOAT, ["batch", 4, "sequence_length", 16]),
            oh.make_tensor_value_info("k", FLOAT, ["batch", 4, "sequence_length", 16]),
            oh.make_tensor_value_info("v", FLOAT, ["batch", 4, "sequence_length", 16]),
        ],
    )
    sizes = ValueSizes(
        DimSizes.of({"batch": 1, "sequence_length": 10}), infer_missing_shapes(model)
    )
    mm = sizes.node_work(_node(model, "mm"))
    assert mm.flops == 2 * 10 * 32 * 64  # 2 x output elements x K
    attention = sizes.node_work(_node(model, "attn"))
    # scores and weighted sum: 2 x (4*10*16) x 10 each, softmax 5 x 4*10*10
    assert attention.flops == 2 * 640 * 10 * 2 + 5 * 400
    unsqueeze = sizes.node_work(_node(model, "unsq"))
    assert unsqueeze.flops == 3 and unsqueeze.bytes == 8 * (3 + 1 + 3)
    assert unsqueeze.flops * 100 < mm.flops


def test_missing_shapes_are_inferred_without_touching_the_model() -> None:
    graph = oh.make_graph(
        [
            oh.make_node("Transpose", ["x"], ["t"], name="tr", perm=[1, 0]),
            oh.make_node("Reshape", ["t", "shape"], ["r"], name="rs"),
            oh.make_node("Relu", ["x"], ["y"], name="relu"),
        ],
        "g",
        [oh.make_tensor_value_info("x", FLOAT, ["sequence_length", 8])],
        [oh.make_tensor_value_info("y", FLOAT, None), oh.make_tensor_value_info("r", FLOAT, None)],
        initializer=[onnx.numpy_helper.from_array(np.array([4, -1], np.int64), "shape")],
    )
    model = ir.from_proto(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)]))
    t = _node(model, "tr").outputs[0]
    r = _node(model, "rs").outputs[0]
    inferred = infer_missing_shapes(model)
    assert t.shape is None and r.shape is None  # the model is untouched
    assert inferred[t][1] == ir.Shape([8, "sequence_length"])
    assert inferred[r][1] is not None and inferred[r][1][0] == 4  # constant shape as data
    sizes = ValueSizes(DimSizes.of({"sequence_length": 3}), inferred)
    assert sizes.bytes(t) == 8 * 3 * 4


def test_unknown_values_get_the_documented_guess() -> None:
    value = ir.Value(name="v")
    sizes = ValueSizes()
    assert sizes.elements(value) == UNKNOWN_ELEMENTS
    assert sizes.bytes(value) == 4 * UNKNOWN_ELEMENTS
    assert sizes.elements(None) == 0


@pytest.mark.parametrize("dtype", list(ir.DataType), ids=lambda d: d.name)
def test_every_onnx_element_type_has_a_size(dtype: ir.DataType) -> None:
    """Rule 1 for each type ONNX has (a string tensor once raised 'Bitwidth not available')."""
    value = ir.Value(name="v", type=ir.TensorType(dtype), shape=ir.Shape([3, 8]))
    bits = {ir.DataType.STRING: 8 * STRING_ELEMENT_BYTES, ir.DataType.UNDEFINED: 32}
    expected = bits.get(dtype) or dtype.bitwidth
    assert element_bits(dtype) == expected
    assert ValueSizes().bytes(value) == (24 * expected + 7) // 8
