"""Small ONNX models for placement tests: one op wrapped in EP-resident Relus, and chains.

Every node is named (placements are compared by name). Wrapping an op as
``X -> Relu -> op -> Relu -> Y`` makes a fallback visible as Memcpy nodes: Relu-14 has a
kernel on every EP tested at every opset >= 14, so the op's inputs and outputs cross the
EP/CPU boundary exactly when the op itself falls back.
"""

from __future__ import annotations

__all__ = [
    "ONE_OP_CASES",
    "OneOpCase",
    "chain_model",
    "cnn_model",
    "function_model",
    "if_model",
    "loop_and_nested_functions_model",
    "one_op_model",
    "shared_input_model",
]

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_F = TensorProto.FLOAT


def _model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    opset: int,
    initializers: Sequence[onnx.TensorProto] = (),
    functions: Sequence[onnx.FunctionProto] = (),
    extra_opsets: Sequence[onnx.OperatorSetIdProto] = (),
    check: bool = True,
) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(initializers))
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), *extra_opsets],
        functions=list(functions),
    )
    if check:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        onnx.checker.check_model(model, full_check=True)
    return model


def _i64(name: str, values: Sequence[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


@dataclasses.dataclass(frozen=True)
class OneOpCase:
    """``op`` applied to the output of a Relu on ``shape``; extra inputs are initializers."""

    op: str
    shape: tuple[int, ...] = (2, 3, 4)
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict)
    initializers: Callable[[], list[onnx.TensorProto]] = list
    out_type: int = _F  # element type of the op's output
    wrap_output: bool = True  # follow the op with a Relu (float outputs only)

    @property
    def label(self) -> str:
        return self.op if "to" not in self.attrs else f"{self.op}_to{self.attrs['to']}"


ONE_OP_CASES: tuple[OneOpCase, ...] = (
    OneOpCase("Reshape", initializers=lambda: [_i64("shape", [4, 6])]),
    OneOpCase("Transpose", attrs={"perm": [2, 0, 1]}),
    OneOpCase("Flatten", attrs={"axis": 1}),
    OneOpCase("Cos"),
    OneOpCase("MaxPool", shape=(1, 3, 8, 8), attrs={"kernel_shape": [2, 2], "strides": [2, 2]}),
    OneOpCase(
        "Conv",
        shape=(1, 3, 8, 8),
        attrs={"pads": [1, 1, 1, 1]},
        initializers=lambda: [
            numpy_helper.from_array(
                np.random.default_rng(0).random((4, 3, 3, 3), dtype=np.float32), "W"
            )
        ],
    ),
    OneOpCase("Squeeze", shape=(1, 3, 4), initializers=lambda: [_i64("axes", [0])]),
    OneOpCase("Unsqueeze", initializers=lambda: [_i64("axes", [0])]),
    OneOpCase(
        "Cast", attrs={"to": TensorProto.FLOAT16}, out_type=TensorProto.FLOAT16, wrap_output=False
    ),
    OneOpCase(
        "Cast", attrs={"to": TensorProto.INT32}, out_type=TensorProto.INT32, wrap_output=False
    ),
    OneOpCase("Softmax", attrs={"axis": -1}),
    OneOpCase("Identity"),
    OneOpCase("Shape", out_type=TensorProto.INT64, wrap_output=False),
    OneOpCase(
        "Slice", initializers=lambda: [_i64("starts", [1]), _i64("ends", [3]), _i64("axes", [2])]
    ),
    OneOpCase("Pad", initializers=lambda: [_i64("pads", [0, 0, 1, 0, 0, 1])]),
    OneOpCase("Gather", attrs={"axis": 1}, initializers=lambda: [_i64("indices", [0, 2])]),
    OneOpCase("Expand", shape=(1, 3, 4), initializers=lambda: [_i64("shape", [2, 3, 4])]),
    OneOpCase("Tile", initializers=lambda: [_i64("repeats", [1, 2, 1])]),
)


def one_op_model(case: OneOpCase, opset: int) -> onnx.ModelProto:
    """``X -> Relu(pre) -> op(op) [-> Relu(post)] -> Y`` at ``opset``."""
    inits = case.initializers()
    op_inputs = ["r", *(t.name for t in inits)]
    if case.op == "Conv":
        op_inputs = ["r", "W"]
    nodes = [
        helper.make_node("Relu", ["X"], ["r"], name="pre"),
        helper.make_node(case.op, op_inputs, ["o"], name="op", **case.attrs),
    ]
    out_name, out_type = "o", case.out_type
    if case.wrap_output:
        nodes.append(helper.make_node("Relu", ["o"], ["Y"], name="post"))
        out_name = "Y"
    x = helper.make_tensor_value_info("X", _F, list(case.shape))
    y = helper.make_tensor_value_info(out_name, out_type, None)
    return _model(nodes, [x], [y], opset, inits)


def chain_model(opset: int) -> onnx.ModelProto:
    """A chain of version-sensitive ops plus an int64 shape computation feeding a Reshape.

    ``X -> Relu -> Transpose -> Reshape(3, 8) -> Unsqueeze -> Squeeze -> Flatten ->
    Cast(f16) -> Cast(f32) -> Softmax -> Cos -> Identity -> Reshape(shape of the first Relu,
    computed as Shape -> Gather -> Unsqueeze -> Concat) -> Relu -> Y``.
    """
    inits = [
        _i64("shape38", [3, 8]),
        _i64("ax0", [0]),
        numpy_helper.from_array(np.array(0, dtype=np.int64), "i0"),
        _i64("m1", [-1]),
    ]
    n = helper.make_node
    nodes = [
        n("Relu", ["X"], ["r"], name="relu_in"),
        n("Transpose", ["r"], ["t"], perm=[1, 0, 2], name="transpose"),
        n("Reshape", ["t", "shape38"], ["rs"], name="reshape"),
        n("Unsqueeze", ["rs", "ax0"], ["u"], name="unsqueeze"),
        n("Squeeze", ["u", "ax0"], ["s"], name="squeeze"),
        n("Flatten", ["s"], ["f"], axis=1, name="flatten"),
        n("Cast", ["f"], ["h"], to=TensorProto.FLOAT16, name="cast_f16"),
        n("Cast", ["h"], ["c"], to=_F, name="cast_f32"),
        n("Softmax", ["c"], ["sm"], axis=-1, name="softmax"),
        n("Cos", ["sm"], ["cs"], name="cos"),
        n("Identity", ["cs"], ["id"], name="identity"),
        n("Shape", ["r"], ["shp"], name="shape"),
        n("Gather", ["shp", "i0"], ["g"], axis=0, name="gather"),
        n("Unsqueeze", ["g", "ax0"], ["gu"], name="unsqueeze_dim"),
        n("Concat", ["gu", "m1"], ["newshape"], axis=0, name="concat"),
        n("Reshape", ["id", "newshape"], ["rs2"], name="reshape_dyn"),
        n("Relu", ["rs2"], ["Y"], name="relu_out"),
    ]
    x = helper.make_tensor_value_info("X", _F, [2, 3, 4])
    y = helper.make_tensor_value_info("Y", _F, None)
    return _model(nodes, [x], [y], opset, inits)


def cnn_model(opset: int) -> onnx.ModelProto:
    """``X -> Conv -> Relu -> MaxPool -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Y``."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.random((8, 3, 3, 3), dtype=np.float32), "W1"),
        numpy_helper.from_array(rng.random(8, dtype=np.float32), "B1"),
        numpy_helper.from_array(rng.random((8, 8, 3, 3), dtype=np.float32), "W2"),
    ]
    n = helper.make_node
    nodes = [
        n("Conv", ["X", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        n("Conv", ["p1", "W2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        n("Relu", ["c2"], ["r2"], name="relu2"),
        n("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        n("Flatten", ["gap"], ["Y"], axis=1, name="flatten"),
    ]
    x = helper.make_tensor_value_info("X", _F, [1, 3, 16, 16])
    y = helper.make_tensor_value_info("Y", _F, None)
    return _model(nodes, [x], [y], opset, inits)


def if_model(opset: int) -> onnx.ModelProto:
    """``Relu -> If(cond)`` whose branches read the Relu output from the outer scope:
    then = Transpose, else = Neg (followed by Relu inside the branch)."""
    n = helper.make_node
    r_info = helper.make_tensor_value_info("b_out", _F, None)
    then_g = helper.make_graph(
        [
            n("Transpose", ["r"], ["t"], perm=[2, 1, 0], name="then_transpose"),
            n("Relu", ["t"], ["b_out"], name="then_relu"),
        ],
        "then_branch",
        [],
        [r_info],
    )
    else_g = helper.make_graph(
        [n("Neg", ["r"], ["ng"], name="else_neg"), n("Relu", ["ng"], ["b_out"], name="else_relu")],
        "else_branch",
        [],
        [helper.make_tensor_value_info("b_out", _F, None)],
    )
    nodes = [
        n("Relu", ["X"], ["r"], name="relu_in"),
        n("If", ["C"], ["Y"], then_branch=then_g, else_branch=else_g, name="if"),
    ]
    x = helper.make_tensor_value_info("X", _F, [2, 3, 4])
    c = helper.make_tensor_value_info("C", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("Y", _F, None)
    graph = helper.make_graph(nodes, "g", [x, c], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def function_model(opset: int, function_opset: int) -> onnx.ModelProto:
    """``X -> Cos -> local::Block -> Sigmoid -> Y`` where ``Block`` is a model-local function
    declared at ``function_opset``: ``Relu -> Transpose -> Relu``."""
    n = helper.make_node
    block = helper.make_function(
        "local",
        "Block",
        ["a"],
        ["b"],
        [
            n("Relu", ["a"], ["fr"], name="relu"),
            n("Transpose", ["fr"], ["ft"], perm=[1, 0, 2], name="transpose"),
            n("Relu", ["ft"], ["b"], name="relu2"),
        ],
        [helper.make_opsetid("", function_opset)],
    )
    nodes = [
        n("Cos", ["X"], ["c"], name="cos"),
        n("Block", ["c"], ["f"], domain="local", name="call"),
        n("Sigmoid", ["f"], ["Y"], name="sigmoid"),
    ]
    x = helper.make_tensor_value_info("X", _F, [2, 3, 4])
    y = helper.make_tensor_value_info("Y", _F, [3, 2, 4])
    return _model(
        nodes,
        [x],
        [y],
        opset,
        functions=[block],
        extra_opsets=[helper.make_opsetid("local", 1)],
        # onnx's checker rejects a function whose ai.onnx opset differs from the model's
        # (ORT accepts it); that mismatch is a case under test.
        check=opset == function_opset,
    )


def shared_input_model(opset: int) -> onnx.ModelProto:
    """A graph input read by an EP node (Relu) and by a node that falls back from opset 22
    (Cos-22 has no WebGPU kernel), and an EP output that is both a graph output and read by
    such a node."""
    n = helper.make_node
    nodes = [
        n("Relu", ["X"], ["R"], name="relu"),
        n("Cos", ["X"], ["c1"], name="cos_in"),
        n("Cos", ["R"], ["c2"], name="cos_out"),
        n("Add", ["c1", "c2"], ["Y"], name="add"),
    ]
    x = helper.make_tensor_value_info("X", _F, [2, 3, 4])
    outs = [
        helper.make_tensor_value_info("Y", _F, [2, 3, 4]),
        helper.make_tensor_value_info("R", _F, [2, 3, 4]),
    ]
    return _model(nodes, [x], outs, opset)


def loop_and_nested_functions_model(opset: int) -> onnx.ModelProto:
    """A Loop whose body reads an outer value, and a function calling a function."""
    n = helper.make_node
    body = helper.make_graph(
        [
            n("Add", ["x_in", "w"], ["x_out"], name="body_add"),
            n("Identity", ["cond_in"], ["cond_out"], name="body_cond"),  # bool: CPU on WebGPU
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x_in", _F, [2]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x_out", _F, [2]),
        ],
    )
    inner = helper.make_function(
        "local",
        "Inner",
        ["a"],
        ["b"],
        [n("Transpose", ["a"], ["b"], perm=[1, 0], name="transpose")],
        [helper.make_opsetid("", opset)],
    )
    outer = helper.make_function(
        "local",
        "Outer",
        ["a"],
        ["b"],
        [
            n("Inner", ["a"], ["m"], domain="local", name="call_inner"),
            n("Relu", ["m"], ["b"], name="relu"),
        ],
        [helper.make_opsetid("", opset), helper.make_opsetid("local", 1)],
    )
    nodes = [
        n("Relu", ["X"], ["w"], name="relu_w"),
        n("Loop", ["M", "", "X"], ["Y"], body=body, name="loop"),
        n("Outer", ["Z"], ["Z2"], domain="local", name="call_outer"),
    ]
    inputs = [
        helper.make_tensor_value_info("X", _F, [2]),
        helper.make_tensor_value_info("M", TensorProto.INT64, []),
        helper.make_tensor_value_info("Z", _F, [2, 3]),
    ]
    outputs = [
        helper.make_tensor_value_info("Y", _F, [2]),
        helper.make_tensor_value_info("Z2", _F, [3, 2]),
    ]
    return _model(
        nodes,
        inputs,
        outputs,
        opset,
        functions=[inner, outer],
        extra_opsets=[helper.make_opsetid("local", 1)],
    )
