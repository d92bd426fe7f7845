"""Cases for the 21 -> 20 adapters (run by test_registry_cases.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto

from tests.harness import AdapterCase, make_model, tensor_info

F = TensorProto.FLOAT
F16 = TensorProto.FLOAT16
I8 = TensorProto.INT8
U8 = TensorProto.UINT8


_vi = tensor_info


def _np(elem: int) -> np.dtype:
    return onnx.helper.tensor_dtype_to_np_dtype(elem)


def _params(shape: tuple[int, ...], zp_type: int | None, rng_seed: int = 1):
    """A positive scale and (optionally) a zero point of ``shape``."""
    rng = np.random.default_rng(rng_seed)
    scale = rng.uniform(0.01, 0.5, size=shape).astype(np.float32)
    inits = [onnx.numpy_helper.from_array(scale, "scale_f")]
    if zp_type is not None:
        low = 0 if zp_type in (U8, TensorProto.UINT16) else -5
        zp = rng.integers(low, low + 10, size=shape).astype(_np(zp_type))
        inits.append(onnx.numpy_helper.from_array(zp, "zp"))
    return inits


def _dq(
    x_type: int,
    scale_shape: tuple[int, ...],
    *,
    zp: bool = True,
    scale_type: int = F,
    block_size: int | None = None,
    axis: int = 1,
    x_shape: tuple[int, ...] = (2, 5, 4),
) -> onnx.ModelProto:
    inits = _params(scale_shape, x_type if zp else None)
    attrs: dict[str, object] = {"axis": axis}
    if block_size is not None:
        attrs["block_size"] = block_size
    nodes = [
        oh.make_node("Cast", ["xi"], ["x"], to=x_type),
        oh.make_node("Cast", ["scale_f"], ["scale"], to=scale_type),
        oh.make_node(
            "DequantizeLinear",
            ["x", "scale", "zp"] if zp else ["x", "scale"],
            ["yq"],
            name="dq",
            **attrs,
        ),
        oh.make_node("Cast", ["yq"], ["y"], to=F),
    ]
    return make_model(
        nodes,
        [_vi("xi", TensorProto.INT32, list(x_shape))],
        [_vi("y", F, list(x_shape))],
        21,
        initializers=inits,
    )


def _dq_feeds(low: int, high: int, shape: tuple[int, ...] = (2, 5, 4)):  # type: ignore[no-untyped-def]
    def feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {"xi": rng.integers(low, high, size=shape).astype(np.int32)}

    return feeds


def _q(
    out_type: int,
    scale_shape: tuple[int, ...],
    *,
    zp: bool = True,
    x_type: int = F,
    block_size: int | None = None,
    output_dtype: int | None = None,
    axis: int = 1,
    x_shape: tuple[int, ...] = (2, 5, 4),
) -> onnx.ModelProto:
    inits = _params(scale_shape, out_type if zp else None, rng_seed=2)
    attrs: dict[str, object] = {"axis": axis}
    if block_size is not None:
        attrs["block_size"] = block_size
    if output_dtype is not None:
        attrs["output_dtype"] = output_dtype
    nodes = [
        oh.make_node("Cast", ["xf"], ["x"], to=x_type),
        oh.make_node("Cast", ["scale_f"], ["scale"], to=x_type),
        oh.make_node(
            "QuantizeLinear",
            ["x", "scale", "zp"] if zp else ["x", "scale"],
            ["y"],
            name="q",
            **attrs,
        ),
    ]
    return make_model(
        nodes,
        [_vi("xf", F, list(x_shape))],
        [_vi("y", out_type, list(x_shape))],
        21,
        initializers=inits,
    )


def _q_feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.uniform(-40, 40, size=(2, 5, 4)).astype(np.float32)
    x[0, 0, :] = [0.0, -0.0, 1e30, -np.inf]
    x[1, 1, :2] = [np.nan, np.inf]
    return {"xf": x}


def _group_norm(elem: int, stash_type: int | None, num_groups: int = 2) -> onnx.ModelProto:
    attrs: dict[str, object] = {"num_groups": num_groups}
    if stash_type is not None:
        attrs["stash_type"] = stash_type
    nodes = [
        oh.make_node("Cast", ["x"], ["xc"], to=elem),
        oh.make_node("Cast", ["s"], ["sc"], to=elem),
        oh.make_node("Cast", ["b"], ["bc"], to=elem),
        oh.make_node("GroupNormalization", ["xc", "sc", "bc"], ["yc"], name="gn", **attrs),
        oh.make_node("Cast", ["yc"], ["y"], to=F),
    ]
    return make_model(
        nodes,
        [_vi("x", F, [2, 4, 3, 2]), _vi("s", F, [4]), _vi("b", F, [4])],
        [_vi("y", F, [2, 4, 3, 2])],
        21,
    )


def _qlinear_matmul(scale_type: int, operand: int = U8) -> onnx.ModelProto:
    inits = [
        onnx.numpy_helper.from_array(np.array(0.02, np.float32), "sa"),
        onnx.numpy_helper.from_array(np.array(0.03, np.float32), "sb"),
        onnx.numpy_helper.from_array(np.array(0.05, np.float32), "sy"),
    ]
    nodes = [oh.make_node("Cast", [n], [n + "c"], to=scale_type) for n in ("sa", "sb", "sy")]
    if operand in (U8, I8):
        for name, value in (("za", 3), ("zb", 1), ("zy", 2)):
            inits.append(onnx.numpy_helper.from_array(np.array(value, _np(operand)), name))
        inputs = [_vi("a", operand, [2, 3]), _vi("b", operand, [3, 4])]
    else:
        for name in ("za", "zb", "zy"):
            nodes.append(oh.make_node("Cast", ["zero"], [name], to=operand))
        inits.append(onnx.numpy_helper.from_array(np.array(0.0, np.float32), "zero"))
        inputs = [_vi("a", operand, [2, 3]), _vi("b", operand, [3, 4])]
    nodes.append(
        oh.make_node(
            "QLinearMatMul",
            ["a", "sac", "za", "b", "sbc", "zb", "syc", "zy"],
            ["y"],
            name="qmm",
        )
    )
    return make_model(nodes, inputs, [_vi("y", operand, [2, 4])], 21, initializers=inits)


def _qmm_feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "a": rng.integers(0, 255, size=(2, 3)).astype(np.uint8),
        "b": rng.integers(0, 255, size=(3, 4)).astype(np.uint8),
    }


CASES: list[AdapterCase] = [
    AdapterCase(
        "DequantizeLinear",
        21,
        "per_axis_int8",
        lambda: _dq(I8, (5,)),
        feeds=_dq_feeds(-128, 128),
    ),
    AdapterCase(
        "DequantizeLinear",
        21,
        "block_size_0_uint8",
        lambda: _dq(U8, (), block_size=0),
        feeds=_dq_feeds(0, 256),
    ),
    AdapterCase(
        "DequantizeLinear",
        21,
        "int16_per_axis",
        lambda: _dq(TensorProto.INT16, (5,)),
        feeds=_dq_feeds(-32768, 32768),
    ),
    AdapterCase(
        "DequantizeLinear",
        21,
        "uint16_per_tensor_fp16_scale",
        lambda: _dq(TensorProto.UINT16, (), scale_type=F16),
        feeds=_dq_feeds(0, 65536),
    ),
    AdapterCase(
        "DequantizeLinear",
        21,
        "blocked_uint8_partial_block",
        lambda: _dq(U8, (2, 3, 4), block_size=2),
        feeds=_dq_feeds(0, 256),
    ),
    AdapterCase(
        "DequantizeLinear",
        21,
        "blocked_int8_last_axis_fp16_scale_to_18",
        lambda: _dq(I8, (2, 5, 2), block_size=2, axis=-1, scale_type=F16),
        feeds=_dq_feeds(-128, 128),
        target=18,
    ),
    AdapterCase(
        "DequantizeLinear",
        21,
        "blocked_no_zero_point",
        lambda: _dq(I8, (1, 5, 4), zp=False, block_size=3, axis=0),
        feeds=_dq_feeds(-128, 128),
    ),
    AdapterCase(
        "DequantizeLinear",
        21,
        "int4_refused",
        lambda: _dq(TensorProto.INT4, (5,)),
        refuse=r"node 'dq' \(DequantizeLinear-21.*INT4",
    ),
    AdapterCase(
        "QuantizeLinear",
        21,
        "per_axis_int8",
        lambda: _q(I8, (5,)),
        feeds=_q_feeds,
    ),
    AdapterCase(
        "QuantizeLinear",
        21,
        "output_dtype_uint8_no_zero_point",
        lambda: _q(U8, (), zp=False, output_dtype=U8),
        feeds=_q_feeds,
    ),
    AdapterCase(
        "QuantizeLinear",
        21,
        "output_dtype_int8_no_zero_point",
        lambda: _q(I8, (5,), zp=False, output_dtype=I8),
        feeds=_q_feeds,
    ),
    AdapterCase(
        "QuantizeLinear",
        21,
        "output_dtype_with_zero_point_to_18",
        lambda: _q(I8, (), output_dtype=I8),
        feeds=_q_feeds,
        target=18,
    ),
    AdapterCase(
        "QuantizeLinear",
        21,
        "blocked_int8",
        lambda: _q(I8, (2, 3, 4), block_size=2),
        feeds=_q_feeds,
    ),
    AdapterCase(
        "QuantizeLinear",
        21,
        "blocked_uint8_fp16_last_axis",
        lambda: _q(U8, (2, 5, 2), block_size=3, x_type=F16, axis=2),
        feeds=_q_feeds,
    ),
    AdapterCase(
        "QuantizeLinear",
        21,
        "blocked_no_zero_point_to_18",
        lambda: _q(U8, (1, 5, 4), zp=False, block_size=2, axis=0),
        feeds=_q_feeds,
        target=18,
    ),
    AdapterCase(
        "QuantizeLinear",
        21,
        "int16_refused",
        lambda: _q(TensorProto.INT16, (5,)),
        refuse=r"node 'q' \(QuantizeLinear-21.*INT16, which QuantizeLinear-19 does not allow",
    ),
    AdapterCase(
        "QuantizeLinear",
        21,
        "blocked_uint4_refused",
        lambda: _q(TensorProto.UINT4, (2, 3, 4), block_size=2),
        refuse=r"node 'q' \(QuantizeLinear-21.*blocked quantization to UINT4",
    ),
    AdapterCase("GroupNormalization", 21, "float", lambda: _group_norm(F, None), atol=1e-5),
    AdapterCase(
        "GroupNormalization",
        21,
        "fp16_stash_float_to_18",
        lambda: _group_norm(F16, 1, num_groups=4),
        target=18,
        rtol=1e-3,
        atol=1e-3,
    ),
    AdapterCase(
        "GroupNormalization",
        21,
        "double_stash_double",
        lambda: _group_norm(TensorProto.DOUBLE, 11, num_groups=1),
        atol=1e-6,
    ),
    AdapterCase("QLinearMatMul", 21, "float_scales", lambda: _qlinear_matmul(F), feeds=_qmm_feeds),
    AdapterCase("QLinearMatMul", 21, "fp16_scales", lambda: _qlinear_matmul(F16), feeds=_qmm_feeds),
    AdapterCase(
        "QLinearMatMul",
        21,
        "float8_refused",
        lambda: _qlinear_matmul(F, TensorProto.FLOAT8E4M3FN),
        refuse=r"node 'qmm' \(QLinearMatMul-21.*FLOAT8E4M3FN, which QLinearMatMul-10",
    ),
]
