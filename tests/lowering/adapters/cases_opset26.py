"""Cases for the 26 -> 25 adapters (BitCast, CumProd).

Run by test_registry_cases.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto

from tests.harness import AdapterCase, Feeds, make_model

_NP = {
    TensorProto.INT8: np.int8,
    TensorProto.UINT8: np.uint8,
    TensorProto.INT16: np.int16,
    TensorProto.UINT16: np.uint16,
    TensorProto.INT32: np.int32,
    TensorProto.UINT32: np.uint32,
    TensorProto.INT64: np.int64,
    TensorProto.UINT64: np.uint64,
}


def _bitcast_model(source: int, to: int, shape: Sequence[int] = (2, 6)) -> onnx.ModelProto:
    node = oh.make_node("BitCast", ["x"], ["y"], name="bitcast", to=to)
    return make_model(
        [node],
        [oh.make_tensor_value_info("x", source, list(shape))],
        [oh.make_tensor_value_info("y", to, list(shape))],
        26,
    )


def _int_extremes(source: int):
    """Every corner of the integer range (min, -1, 0, max, ...) plus random values."""

    def feeds(rng: np.random.Generator) -> Feeds:
        dtype = np.dtype(_NP[source])
        info = np.iinfo(dtype)
        corners = [info.min, info.min + 1, 0, 1, info.max - 1, info.max]
        if info.min < 0:
            corners += [-1, -2]
        else:
            half = (int(info.max) + 1) // 2
            corners += [half - 1, half]
        random = rng.integers(info.min, info.max, size=12 - len(corners), dtype=dtype)
        values = np.concatenate([np.array(corners, dtype=dtype), random])
        return {"x": values.reshape(2, 6)}

    return feeds


def _int4_model(signed_to_unsigned: bool) -> onnx.ModelProto:
    """int8 feed -> Cast to (u)int4 -> BitCast -> Cast to (u)int8 (no int4 numpy feeds)."""
    if signed_to_unsigned:
        src, dst, wide_in, wide_out = (
            TensorProto.INT4,
            TensorProto.UINT4,
            TensorProto.INT8,
            TensorProto.UINT8,
        )
    else:
        src, dst, wide_in, wide_out = (
            TensorProto.UINT4,
            TensorProto.INT4,
            TensorProto.UINT8,
            TensorProto.INT8,
        )
    nodes = [
        oh.make_node("Cast", ["x"], ["x4"], to=src),
        oh.make_node("BitCast", ["x4"], ["y4"], name="bitcast", to=dst),
        oh.make_node("Cast", ["y4"], ["y"], to=wide_out),
    ]
    return make_model(
        nodes,
        [oh.make_tensor_value_info("x", wide_in, [16])],
        [oh.make_tensor_value_info("y", wide_out, [16])],
        26,
    )


def _int4_feeds(signed: bool):
    def feeds(rng: np.random.Generator) -> Feeds:
        values = np.arange(-8, 8) if signed else np.arange(0, 16)
        return {"x": values.astype(np.int8 if signed else np.uint8)}

    return feeds


def _cumprod_model(
    dtype: int = TensorProto.FLOAT,
    shape: Sequence[int] = (3, 4, 5),
    axis: int = 0,
    *,
    axis_as_input: bool = False,
    via: int | None = None,
    **attrs: int,
) -> onnx.ModelProto:
    """CumProd over ``axis``; with ``via``, the feed and result are Cast to/from ``via``."""
    nodes = []
    initializers = []
    inputs = [oh.make_tensor_value_info("x", dtype, list(shape))]
    if axis_as_input:
        inputs.append(oh.make_tensor_value_info("axis", TensorProto.INT64, []))
    else:
        initializers.append(onnx.numpy_helper.from_array(np.array(axis, np.int64), "axis"))
    x, y = "x", "y"
    if via is not None:
        nodes.append(oh.make_node("Cast", ["x"], ["xv"], to=via))
        x, y = "xv", "yv"
    nodes.append(oh.make_node("CumProd", [x, "axis"], [y], name="cumprod", **attrs))
    if via is not None:
        nodes.append(oh.make_node("Cast", ["yv"], ["y"], to=dtype))
    return make_model(
        nodes,
        inputs,
        [oh.make_tensor_value_info("y", dtype, list(shape))],
        26,
        initializers=initializers,
    )


def _cumprod_specials(rng: np.random.Generator) -> Feeds:
    """Values near 1 (long products stay finite) plus NaN, +-inf, +-0 and 1e30 overflows."""
    x = rng.uniform(0.5, 1.5, size=(3, 4, 5)).astype(np.float32)
    x *= np.where(rng.random(x.shape) < 0.3, -1, 1).astype(np.float32)
    x[0, 0, 0] = np.nan
    x[1, 1, 1] = np.inf
    x[2, 2, 2] = -np.inf
    x[0, 3, 4] = -0.0
    x[1, 2, 3] = 0.0
    x[:, 3, 0] = 1e30
    return {"x": x}


def _int_overflow(dtype: type):
    def feeds(rng: np.random.Generator) -> Feeds:
        return {"x": rng.integers(-200, 200, size=(3, 4, 5)).astype(dtype)}

    return feeds


CASES: list[AdapterCase] = [
    AdapterCase(
        "BitCast", 26, "same_type", lambda: _bitcast_model(TensorProto.FLOAT, TensorProto.FLOAT)
    ),
    AdapterCase(
        "BitCast",
        26,
        "bool_to_uint8",
        lambda: _bitcast_model(TensorProto.BOOL, TensorProto.UINT8),
    ),
    AdapterCase(
        "BitCast",
        26,
        "bool_to_int8",
        lambda: _bitcast_model(TensorProto.BOOL, TensorProto.INT8),
    ),
]
for _bits in (8, 16, 32, 64):
    _s = {8: TensorProto.INT8, 16: TensorProto.INT16, 32: TensorProto.INT32, 64: TensorProto.INT64}[
        _bits
    ]
    _u = {
        8: TensorProto.UINT8,
        16: TensorProto.UINT16,
        32: TensorProto.UINT32,
        64: TensorProto.UINT64,
    }[_bits]
    CASES += [
        AdapterCase(
            "BitCast",
            26,
            f"int{_bits}_to_uint{_bits}",
            lambda s=_s, u=_u: _bitcast_model(s, u),
            feeds=_int_extremes(_s),
        ),
        AdapterCase(
            "BitCast",
            26,
            f"uint{_bits}_to_int{_bits}",
            lambda s=_s, u=_u: _bitcast_model(u, s),
            feeds=_int_extremes(_u),
        ),
    ]
CASES += [
    AdapterCase(
        "BitCast",
        26,
        "int32_to_uint32_to_opset_18",
        lambda: _bitcast_model(TensorProto.INT32, TensorProto.UINT32),
        feeds=_int_extremes(TensorProto.INT32),
        target=18,
    ),
    AdapterCase(
        "BitCast",
        26,
        "uint64_to_int64_to_opset_18",
        lambda: _bitcast_model(TensorProto.UINT64, TensorProto.INT64),
        feeds=_int_extremes(TensorProto.UINT64),
        target=18,
    ),
    AdapterCase(
        "BitCast",
        26,
        "int4_to_uint4",
        lambda: _int4_model(signed_to_unsigned=True),
        feeds=_int4_feeds(signed=True),
    ),
    AdapterCase(
        "BitCast",
        26,
        "uint4_to_int4",
        lambda: _int4_model(signed_to_unsigned=False),
        feeds=_int4_feeds(signed=False),
    ),
    AdapterCase(
        "BitCast",
        26,
        "float_to_int32_refused",
        lambda: _bitcast_model(TensorProto.FLOAT, TensorProto.INT32),
        refuse=r"node 'bitcast' \(BitCast-26.*FLOAT to INT32.*bit pattern of a floating-point",
    ),
    AdapterCase(
        "BitCast",
        26,
        "uint16_to_float16_refused",
        lambda: _bitcast_model(TensorProto.UINT16, TensorProto.FLOAT16),
        refuse=r"BitCast from UINT16 to FLOAT16",
    ),
    AdapterCase(
        "BitCast",
        26,
        "uint8_to_bool_refused",
        lambda: _bitcast_model(TensorProto.UINT8, TensorProto.BOOL),
        refuse=r"node 'bitcast' \(BitCast-26.*UINT8 to BOOL: a byte other than 0 or 1",
    ),
    AdapterCase("CumProd", 26, "float_axis0", lambda: _cumprod_model(), rtol=0.0, atol=0.0),
    AdapterCase(
        "CumProd",
        26,
        "float_axis1_exclusive",
        lambda: _cumprod_model(axis=1, exclusive=1),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "CumProd",
        26,
        "float_axis_minus1_reverse",
        lambda: _cumprod_model(axis=-1, reverse=1),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "CumProd",
        26,
        "float_axis_minus2_exclusive_reverse",
        lambda: _cumprod_model(axis=-2, exclusive=1, reverse=1),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "CumProd",
        26,
        "float_specials_axis2",
        lambda: _cumprod_model(axis=2),
        feeds=_cumprod_specials,
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "CumProd",
        26,
        "float_specials_axis1_reverse_exclusive",
        lambda: _cumprod_model(axis=1, reverse=1, exclusive=1),
        feeds=_cumprod_specials,
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "CumProd",
        26,
        "double_rank1",
        lambda: _cumprod_model(TensorProto.DOUBLE, shape=(7,)),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "CumProd",
        26,
        "int32_overflow_wraps",
        lambda: _cumprod_model(TensorProto.INT32, axis=2),
        feeds=_int_overflow(np.int32),
    ),
    AdapterCase(
        "CumProd",
        26,
        "int64_exclusive",
        lambda: _cumprod_model(TensorProto.INT64, axis=1, exclusive=1),
    ),
    AdapterCase(
        "CumProd",
        26,
        "uint32_reverse",
        lambda: _cumprod_model(TensorProto.UINT32, axis=0, reverse=1),
        feeds=lambda rng: {"x": rng.integers(0, 300, size=(3, 4, 5)).astype(np.uint32)},
    ),
    # ORT's float16/bfloat16 CumProd kernels keep a float accumulator, where the
    # reference (numpy) rounds after every product, as the rewrite does: onnx.reference
    # gives bit-identical results for these two; ORT differs by float16 rounding.
    AdapterCase(
        "CumProd",
        26,
        "float16",
        lambda: _cumprod_model(TensorProto.FLOAT16, axis=0),
        rtol=2e-3,
        atol=1e-3,
    ),
    AdapterCase(
        "CumProd",
        26,
        "bfloat16_via_cast",
        lambda: _cumprod_model(axis=0, via=TensorProto.BFLOAT16),
        rtol=2e-2,
        atol=1e-2,
    ),
    AdapterCase(
        "CumProd",
        26,
        "to_opset_18",
        lambda: _cumprod_model(axis=1, exclusive=1),
        target=18,
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "CumProd",
        26,
        "axis_not_constant_refused",
        lambda: _cumprod_model(axis_as_input=True),
        refuse=r"node 'cumprod' \(CumProd-26.*non-constant axis",
    ),
]
