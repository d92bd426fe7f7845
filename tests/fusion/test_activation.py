"""fuse_fast_gelu / fuse_bias_gelu: Gelu forms fused only into the same function.

Hand-built graphs of the tanh Gelu written out in both associations (GPT-2's
``(0.5 * x) * gate`` and ``x * (0.5 * gate)``) become one ``FastGelu``, and ORT's CPU EP
gives the same outputs before and after; a form with another constant is another function
and is left alone.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxscript_ep_passes.fusion.activation import fuse_bias_gelu, fuse_fast_gelu
from onnxscript_ep_passes.fusion.evaluate import run_model


def _tanh_gelu(half_first: bool, coefficient: float = 0.044715) -> onnx.ModelProto:
    constants = {
        "three": 3.0,
        "coefficient": coefficient,
        "scale": math.sqrt(2 / math.pi),
        "one": 1.0,
        "half": 0.5,
    }
    nodes = [
        helper.make_node("Pow", ["x", "three"], ["cube"]),
        helper.make_node("Mul", ["cube", "coefficient"], ["scaled_cube"]),
        helper.make_node("Add", ["x", "scaled_cube"], ["inner"]),
        helper.make_node("Mul", ["scale", "inner"], ["arg"]),
        helper.make_node("Tanh", ["arg"], ["tanh"]),
        helper.make_node("Add", ["tanh", "one"], ["gate"]),
    ]
    if half_first:
        nodes += [
            helper.make_node("Mul", ["x", "half"], ["half_x"]),
            helper.make_node("Mul", ["half_x", "gate"], ["y"]),
        ]
    else:
        nodes += [
            helper.make_node("Mul", ["half", "gate"], ["half_gate"]),
            helper.make_node("Mul", ["x", "half_gate"], ["y"]),
        ]
    graph = helper.make_graph(
        nodes,
        "tanh_gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 8])],
        initializer=[
            numpy_helper.from_array(np.array(v, np.float32), n) for n, v in constants.items()
        ],
    )
    opsets = [helper.make_opsetid("", 23), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


@pytest.mark.parametrize("half_first", [True, False], ids=["gpt2_order", "half_last"])
def test_the_written_out_tanh_gelu_becomes_fast_gelu_with_the_same_outputs(
    half_first: bool,
) -> None:
    proto = _tanh_gelu(half_first)
    model = ir.from_proto(proto)
    assert fuse_fast_gelu(model) == 1
    fused = ir.to_proto(model)
    assert [n.op_type for n in fused.graph.node] == ["FastGelu"]
    feeds = {"x": np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32) * 3}
    np.testing.assert_allclose(
        run_model(fused, feeds)[0], run_model(proto, feeds)[0], rtol=1e-5, atol=1e-6
    )


def test_a_tanh_gelu_with_another_constant_is_left_alone() -> None:
    model = ir.from_proto(_tanh_gelu(True, coefficient=0.05))
    assert fuse_fast_gelu(model) == 0
    assert "FastGelu" not in {n.op_type for n in model.graph}


def test_bias_and_exact_gelu_become_bias_gelu() -> None:
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "bias"], ["biased"]),
            helper.make_node("Gelu", ["biased"], ["y"]),
        ],
        "bias_gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 8])],
        initializer=[numpy_helper.from_array(np.linspace(-1, 1, 8, dtype=np.float32), "bias")],
    )
    opsets = [helper.make_opsetid("", 23), helper.make_opsetid("com.microsoft", 1)]
    proto = helper.make_model(graph, opset_imports=opsets)
    model = ir.from_proto(proto)
    assert fuse_bias_gelu(model) == 1
    fused = ir.to_proto(model)
    assert [n.op_type for n in fused.graph.node] == ["BiasGelu"]
    feeds = {"x": np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)}
    np.testing.assert_allclose(
        run_model(fused, feeds)[0], run_model(proto, feeds)[0], rtol=1e-5, atol=1e-6
    )
