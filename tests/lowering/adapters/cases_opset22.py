"""Cases for the 22 -> 21 adapters (run by test_registry_cases.py).

ONNX Runtime's Python API cannot feed or return bfloat16, so bfloat16 models take
float32 inputs and outputs and Cast inside.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto

from tests.harness import AdapterCase, make_model, tensor_info

F = TensorProto.FLOAT
BF16 = TensorProto.BFLOAT16


_vi = tensor_info


def _unary(
    op: str,
    elem: int,
    shape: list[int],
    out_shape: list[int] | int,
    *,
    extra_inputs: list[onnx.ValueInfoProto] | None = None,
    extra_names: list[str] | None = None,
    second_output: tuple[str, int] | None = None,
    **attrs: object,
) -> onnx.ModelProto:
    """``x (float) -> Cast(elem) -> op -> Cast(float) -> y`` (plus an optional 2nd output)."""
    outputs = ["yc"]
    graph_outputs = [_vi("y", F, out_shape)]
    if second_output is not None:
        outputs.append(second_output[0])
        graph_outputs.append(_vi(second_output[0], second_output[1], len(shape)))
    nodes = [
        oh.make_node("Cast", ["x"], ["xc"], to=elem),
        oh.make_node(op, ["xc", *(extra_names or [])], outputs, name="node", **attrs),
        oh.make_node("Cast", ["yc"], ["y"], to=F),
    ]
    return make_model(nodes, [_vi("x", F, shape), *(extra_inputs or [])], graph_outputs, 22)


def _round_feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = np.array(
        [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 127.5, 300.0, -0.0, np.inf, np.nan, 3.4],
        np.float32,
    ).reshape(3, 4)
    return {"x": x}


def _threshold_feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
    # Around alpha = 0.3125 (a bfloat16): its neighbours in bfloat16 and in float32.
    up = float(np.array(0.3126, np.float32).astype(ml_dtypes.bfloat16))
    x = np.array(
        [0.3125, 0.3126, 0.3124, up, -1.0, 0.31, np.nan, 5.0, 0.0, -np.inf, 0.3, 0.32],
        np.float32,
    ).reshape(3, 4)
    return {"x": x}


def _eyelike(in_type: int, dtype: int | None) -> onnx.ModelProto:
    attrs = {} if dtype is None else {"dtype": dtype}
    out_type = dtype if dtype is not None else in_type
    nodes = [
        oh.make_node("Cast", ["x"], ["xc"], to=in_type),
        oh.make_node("EyeLike", ["xc"], ["yc"], name="node", k=1, **attrs),
        oh.make_node("Cast", ["yc"], ["y"], to=F),
    ]
    del out_type
    return make_model(nodes, [_vi("x", F, [3, 4])], [_vi("y", F, [3, 4])], 22)


def _dropout(ratio_type: int, data_type: int = BF16) -> onnx.ModelProto:
    nodes = [
        oh.make_node("Cast", ["x"], ["xc"], to=data_type),
        oh.make_node("Cast", ["r"], ["rc"], to=ratio_type),
        oh.make_node("Dropout", ["xc", "rc"], ["yc", "mask"], name="node"),
        oh.make_node("Cast", ["yc"], ["y"], to=F),
    ]
    return make_model(
        nodes,
        [_vi("x", F, [2, 3])],
        [_vi("y", F, [2, 3]), _vi("mask", TensorProto.BOOL, [2, 3])],
        22,
        initializers=[onnx.numpy_helper.from_array(np.array(0.25, np.float32), "r")],
    )


def _maxunpool(elem: int) -> onnx.ModelProto:
    nodes = [
        oh.make_node("Cast", ["x"], ["xc"], to=elem),
        oh.make_node("MaxPool", ["xc"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
        oh.make_node(
            "MaxUnpool", ["p", "i"], ["yc"], name="node", kernel_shape=[2, 2], strides=[2, 2]
        ),
        oh.make_node("Cast", ["yc"], ["y"], to=F),
    ]
    return make_model(nodes, [_vi("x", F, [1, 2, 4, 4])], [_vi("y", F, [1, 2, 4, 4])], 22)


def _pool(op: str, shape: list[int | str], out_shape: list[int | str], **attrs: object):
    """``x -> op -> y`` in float32, the output shape declared (the checker compares it)."""
    node = oh.make_node(op, ["x"], ["y"], name="node", **attrs)
    return make_model([node], [_vi("x", F, shape)], [_vi("y", F, out_shape)], 22)


# ONNX's own ceil-mode cases: the last window starts in the right padding and opset 22
# drops it; ceil_mode=0 gives the same windows at the older schema.
_CEIL_PAD = {"ceil_mode": 1, "kernel_shape": [3, 3], "strides": [3, 3], "pads": [1, 1, 1, 1]}
_CEIL_STRIDE = {"ceil_mode": 1, "kernel_shape": [1, 1], "strides": [2, 2]}
# Axis 0 drops a window (needs floor), axis 1 keeps its extra ceil window: no ceil_mode fits.
_CEIL_MIXED = {"ceil_mode": 1, "kernel_shape": [1, 2], "strides": [2, 2]}

_POOL = {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [1, 0, 1, 0], "dilations": [1, 1]}

CASES: list[AdapterCase] = [
    AdapterCase("MaxPool", 22, "float", lambda: _unary("MaxPool", F, [1, 2, 5, 6], 4, **_POOL)),
    AdapterCase(
        "MaxPool",
        22,
        "bf16_with_indices",
        lambda: _unary(
            "MaxPool", BF16, [1, 2, 5, 6], 4, second_output=("idx", TensorProto.INT64), **_POOL
        ),
    ),
    AdapterCase(
        "MaxPool",
        22,
        "bf16_ceil_to_18",
        lambda: _unary(
            "MaxPool", BF16, [1, 1, 5, 5], 4, kernel_shape=[2, 2], ceil_mode=1, strides=[2, 2]
        ),
        target=18,
    ),
    AdapterCase(
        "MaxPool",
        22,
        "ceil_last_window_in_padding_to_18",
        lambda: _pool("MaxPool", [1, 1, 2, 2], [1, 1, 1, 1], **_CEIL_STRIDE),
        target=18,
    ),
    AdapterCase(
        "MaxPool",
        22,
        "ceil_window_kept",
        lambda: _pool(
            "MaxPool", [1, 1, 5, 5], [1, 1, 3, 3], **_CEIL_MIXED | {"kernel_shape": [2, 2]}
        ),
    ),
    AdapterCase(
        "MaxPool",
        22,
        "ceil_mixed_axes_refused",
        lambda: _pool("MaxPool", [1, 1, 2, 5], [1, 1, 1, 3], **_CEIL_MIXED),
        refuse=r"node 'node' \(MaxPool-22.*ceil_mode=1.*no ceil_mode of MaxPool-12 .*"
        r"axis 0: 1 \(ceil 2, floor 1\); axis 1: 3 \(ceil 3, floor 2\)",
    ),
    AdapterCase(
        "MaxPool",
        22,
        "ceil_dynamic_size_refused",
        lambda: _pool("MaxPool", [1, 1, "h", "w"], [1, 1, "oh", "ow"], **_CEIL_STRIDE),
        refuse=r"MaxPool-22.*spatial axis 0 has no static size: a window may start in the right",
    ),
    AdapterCase(
        "MaxPool",
        22,
        "ceil_dynamic_size_no_window_in_padding",
        lambda: _pool(
            "MaxPool", [1, 1, "h", "w"], [1, 1, "oh", "ow"], ceil_mode=1, kernel_shape=[3, 3]
        ),
        feeds=lambda rng: {"x": rng.standard_normal((1, 1, 7, 6)).astype(np.float32)},
    ),
    AdapterCase(
        "AveragePool",
        22,
        "ceil_last_window_starts_on_pad_to_18",
        lambda: _pool("AveragePool", [1, 3, 2, 2], [1, 3, 1, 1], count_include_pad=1, **_CEIL_PAD),
        target=18,
    ),
    AdapterCase(
        "AveragePool",
        22,
        "bf16_refused",
        lambda: _unary("AveragePool", BF16, [1, 1, 4, 4], 4, kernel_shape=[2, 2]),
        refuse=r"node 'node' \(AveragePool-22.*BFLOAT16, which AveragePool-19 does not allow",
    ),
    AdapterCase(
        "LpPool",
        22,
        "ceil_last_window_starts_on_pad",
        lambda: _pool("LpPool", [1, 3, 2, 2], [1, 3, 1, 1], p=2, **_CEIL_PAD),
    ),
    AdapterCase(
        "GlobalMaxPool", 22, "bf16", lambda: _unary("GlobalMaxPool", BF16, [2, 3, 4, 5], 4)
    ),
    AdapterCase(
        "GlobalMaxPool",
        22,
        "fp16",
        lambda: _unary("GlobalMaxPool", TensorProto.FLOAT16, [2, 3, 4], 3),
    ),
    AdapterCase("MaxUnpool", 22, "bf16", lambda: _maxunpool(BF16)),
    AdapterCase("MaxUnpool", 22, "float", lambda: _maxunpool(F)),
    AdapterCase(
        "Round", 22, "bf16_ties", lambda: _unary("Round", BF16, [3, 4], [3, 4]), feeds=_round_feeds
    ),
    AdapterCase(
        "Round", 22, "float", lambda: _unary("Round", F, [3, 4], [3, 4]), feeds=_round_feeds
    ),
    AdapterCase(
        "ThresholdedRelu",
        22,
        "bf16_alpha_exact",
        lambda: _unary("ThresholdedRelu", BF16, [3, 4], [3, 4], alpha=0.3125),
        feeds=_threshold_feeds,
    ),
    AdapterCase(
        "ThresholdedRelu",
        22,
        "bf16_default_alpha_to_18",
        lambda: _unary("ThresholdedRelu", BF16, [3, 4], [3, 4]),
        target=18,
    ),
    AdapterCase(
        "ThresholdedRelu",
        22,
        "bf16_inexact_alpha_refused",
        lambda: _unary("ThresholdedRelu", BF16, [3, 4], [3, 4], alpha=0.3),
        refuse=r"node 'node' \(ThresholdedRelu-22.*alpha=0.30000001192092896 is not a bfloat16",
    ),
    AdapterCase(
        "ThresholdedRelu",
        22,
        "float_to_18",
        lambda: _unary("ThresholdedRelu", F, [3, 4], [3, 4], alpha=0.3125),
        feeds=_threshold_feeds,
        target=18,
    ),
    AdapterCase("EyeLike", 22, "bf16_in_float_out", lambda: _eyelike(BF16, F)),
    AdapterCase("EyeLike", 22, "float_in_bf16_out", lambda: _eyelike(F, BF16)),
    AdapterCase("EyeLike", 22, "bf16_in_and_out", lambda: _eyelike(BF16, None)),
    AdapterCase("EyeLike", 22, "int32", lambda: _eyelike(TensorProto.INT32, None)),
    AdapterCase("Dropout", 22, "bf16_ratio", lambda: _dropout(BF16)),
    AdapterCase("Dropout", 22, "float_ratio_to_18", lambda: _dropout(F, F), target=18),
    AdapterCase(
        "Dropout",
        22,
        "float8_data_refused",
        lambda: _dropout(F, TensorProto.FLOAT8E4M3FN),
        refuse=r"node 'node' \(Dropout-22.*FLOAT8E4M3FN, which Dropout-13 does not allow",
    ),
    # Arithmetic ops keep the derived refusal for bfloat16 (not hand-written).
    AdapterCase(
        "Elu",
        22,
        "bf16_refused",
        lambda: _unary("Elu", BF16, [3, 4], [3, 4]),
        refuse=r"node 'node' \(Elu-22.*BFLOAT16, which Elu-6 does not allow",
    ),
]
