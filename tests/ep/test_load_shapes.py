"""ORT's shape inference at load and while folding, checked against ORT on its CPU EP.

The models write no ``value_info`` (as TorchScript exports do not), so every shape the
basic optimizations read is one ORT infers; each is predicted at ``ORT_ENABLE_BASIC`` and
the removed nodes compared, by name, with those ORT's optimized model lacks
(tests/ep/test_basic_optimizations.py's ``_check``).
"""

from __future__ import annotations

import onnx
import onnx.helper as oh
import onnx.shape_inference
from onnx import TensorProto

from tests.ep.test_basic_optimizations import _check, _i64

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def _untyped_model(
    nodes: list[onnx.NodeProto], x_shape: list[int | str], initializers: list[onnx.TensorProto]
) -> onnx.ModelProto:
    """Inputs ``x`` (float, ``x_shape``) and ``w`` (float, 64); outputs ``out`` and
    ``dims``; no shape for anything else."""
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", F, x_shape), oh.make_tensor_value_info("w", F, [64])],
        [oh.make_tensor_value_info("out", F, None), oh.make_tensor_value_info("dims", F, None)],
        initializers,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    model.ir_version = 10
    assert not model.graph.value_info
    return model


def _removed(model: onnx.ModelProto) -> set[str]:
    return {r.name for r in _check(model).removed}


def test_a_shape_of_a_value_the_model_leaves_untyped_folds() -> None:
    """``Reshape`` to a constant shape: ORT infers its output, so the ``Shape`` of it and
    the ``Cast`` reading that fold (the graph output becomes a constant)."""
    model = _untyped_model(
        [
            oh.make_node("Reshape", ["w", "target"], ["y"], name="reshape"),
            oh.make_node("Relu", ["y"], ["out"], name="relu"),
            oh.make_node("Shape", ["y"], ["s"], name="shape"),
            oh.make_node("Cast", ["s"], ["dims"], name="cast", to=F),
        ],
        [2, 3],
        [_i64("target", [16, 4])],
    )
    assert _removed(model) == {"shape", "cast"}  # the output becomes an initializer


def test_folding_infers_each_later_node_again() -> None:
    """The ``Reshape``'s shape is computed by a chain ORT folds (``ConstantOfShape``,
    ``Mul``, ``Concat``); once folded, ORT infers the ``Reshape`` again in the same pass, so
    the ``Shape`` after it folds too."""
    model = _untyped_model(
        [
            oh.make_node(
                "ConstantOfShape",
                ["one"],
                ["ones"],
                name="ones",
                value=oh.make_tensor("v", I64, [1], [1]),
            ),
            oh.make_node("Mul", ["ones", "sixteen"], ["first"], name="mul"),
            oh.make_node("Concat", ["first", "minus_one"], ["target"], name="concat", axis=0),
            oh.make_node("Reshape", ["w", "target"], ["y"], name="reshape"),
            oh.make_node("Relu", ["y"], ["out"], name="relu"),
            oh.make_node("Shape", ["y"], ["s"], name="shape"),
            oh.make_node("Cast", ["s"], ["c"], name="cast", to=F),
            oh.make_node("Relu", ["c"], ["dims"], name="relu_dims"),
        ],
        [2, 3],
        [
            _i64("one", [1]),
            oh.make_tensor("sixteen", I64, [], [16]),
            _i64("minus_one", [-1]),
        ],
    )
    assert _removed(model) >= {"ones", "mul", "concat", "shape", "cast", "relu_dims"}


def test_orts_inference_propagates_no_data() -> None:
    """A ``Reshape`` whose shape is arithmetic on a dynamic input's static dimension:
    ONNX's inference with data propagation knows its output ([16, 4]); ORT's does not,
    so it keeps the ``Shape`` of it (and the prediction does too)."""
    nodes = [
        oh.make_node("Shape", ["x"], ["sx"], name="shape_x"),
        oh.make_node("Gather", ["sx", "two"], ["d"], name="gather", axis=0),
        oh.make_node("Mul", ["d", "two"], ["e"], name="mul"),
        oh.make_node("Unsqueeze", ["e", "axis0"], ["e1"], name="unsqueeze"),
        oh.make_node("Concat", ["e1", "minus_one"], ["target"], name="concat", axis=0),
        oh.make_node("Reshape", ["w", "target"], ["y"], name="reshape"),
        oh.make_node("Relu", ["y"], ["out"], name="relu"),
        oh.make_node("Shape", ["y"], ["s"], name="shape"),
        oh.make_node("Cast", ["s"], ["dims"], name="cast", to=F),
    ]
    model = _untyped_model(
        nodes,
        ["N", 4, 8],
        [oh.make_tensor("two", I64, [], [2]), _i64("axis0", [0]), _i64("minus_one", [-1])],
    )
    with_data = onnx.shape_inference.infer_shapes(model, data_prop=True)
    y = next(v for v in with_data.graph.value_info if v.name == "y")
    assert [d.dim_value for d in y.type.tensor_type.shape.dim] == [16, 4]
    assert "shape" not in _removed(model)
