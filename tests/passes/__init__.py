"""Tests of :mod:`onnxscript_ep_passes.passes`, and the small model they share."""

from __future__ import annotations

import onnx
import onnx.helper as oh

from onnxscript_ep_passes.ep import KernelTable
from tests.harness import make_model

_GELU_BODY_OPS = (
    *("Add", "Cast", "CastLike", "Concat", "Constant", "ConstantOfShape", "Div", "Flatten"),
    *("Mul", "Neg", "Pow", "Reciprocal", "ReduceMean", "Relu", "Reshape", "Shape", "Size"),
    *("Slice", "Sqrt", "Sub", "Sum", "Tanh"),
)


def gelu_neg_model() -> onnx.ModelProto:
    """Gelu (tanh) then Neg at opset 24, [2, 5] float."""
    float_type = onnx.TensorProto.FLOAT
    return make_model(
        [
            oh.make_node("Gelu", ["x"], ["g"], name="gelu", approximate="tanh"),
            oh.make_node("Neg", ["g"], ["y"], name="neg"),
        ],
        [oh.make_tensor_value_info("x", float_type, [2, 5])],
        [oh.make_tensor_value_info("y", float_type, [2, 5])],
        24,
    )


def no_gelu_table() -> KernelTable:
    """A table with every op of Gelu's function body and not Gelu: every candidate opset
    gets a legalized variant that expands it."""
    return KernelTable.from_rows(
        "TestEP", "0.0", "test", [("", op, 1, 40, None) for op in _GELU_BODY_OPS]
    )
