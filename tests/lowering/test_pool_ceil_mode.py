"""Ceil-mode pools across 22 -> 21: the lowered model has the output size ONNX's
inference gives at 22, on every small 1-D configuration (checked against onnx's own
shape inference at both opsets and ORT's outputs)."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnx.helper as oh
import onnx.shape_inference
import pytest
from onnx import TensorProto

from onnxscript_ep_passes import lower_opset
from tests.harness import make_model, run_model, tensor_info


def _configs() -> list[tuple[int, int, int, int, int]]:
    found = []
    for size, kernel, stride, begin, end in itertools.product(
        range(1, 6), range(1, 4), range(1, 4), range(2), range(2)
    ):
        if begin < kernel and end < kernel and size + begin + end >= kernel:
            found.append((size, kernel, stride, begin, end))
    return found


def _inferred_size(model: onnx.ModelProto) -> int:
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    return inferred.graph.output[0].type.tensor_type.shape.dim[2].dim_value


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_ceil_mode_pools_keep_their_opset22_size(op: str) -> None:
    rng = np.random.default_rng(0)
    floor_used = 0
    for size, kernel, stride, begin, end in _configs():
        attrs = {"kernel_shape": [kernel], "strides": [stride], "pads": [begin, end]}
        node = oh.make_node(op, ["x"], ["y"], name="pool", ceil_mode=1, **attrs)
        x = tensor_info("x", TensorProto.FLOAT, [1, 1, size])
        open_model = make_model([node], [x], [tensor_info("y", TensorProto.FLOAT, 3)], 22)
        new_size = _inferred_size(open_model)
        model = make_model([node], [x], [tensor_info("y", TensorProto.FLOAT, [1, 1, new_size])], 22)
        lowered = lower_opset(model, 21)
        what = f"{op} size={size} kernel={kernel} stride={stride} pads={[begin, end]}"
        onnx.checker.check_model(lowered, full_check=True)
        assert _inferred_size(lowered) == new_size, what
        ceil_mode = next(a.i for a in lowered.graph.node[0].attribute if a.name == "ceil_mode")
        floor_used += ceil_mode == 0
        feeds = {"x": rng.standard_normal((1, 1, size)).astype(np.float32)}
        (expected,), _ = run_model(model, feeds)
        (actual,), _ = run_model(lowered, feeds)
        np.testing.assert_allclose(actual, expected, rtol=1e-6, err_msg=what)
    assert floor_used > 0  # some configurations really drop a window
