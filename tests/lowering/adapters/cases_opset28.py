"""Cases for the 28 -> 27 adapters.

SwiGLU, DepthToSpace, SpaceToDepth, Mod, Celu, BitShift and the bfloat16 rewrites of
Compress, OneHot, ReverseSequence and Unique. Run by test_registry_cases.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto

from tests.harness import AdapterCase, Feeds, make_model

_FLOAT, _F16, _BF16, _DOUBLE = (
    TensorProto.FLOAT,
    TensorProto.FLOAT16,
    TensorProto.BFLOAT16,
    TensorProto.DOUBLE,
)


def _unary(
    op: str,
    dtype: int,
    shape: Sequence[int],
    out_shape: Sequence[int] | None = None,
    **attrs: object,
) -> onnx.ModelProto:
    node = oh.make_node(op, ["x"], ["y"], name=op.lower(), **attrs)
    return make_model(
        [node],
        [oh.make_tensor_value_info("x", dtype, list(shape))],
        [oh.make_tensor_value_info("y", dtype, list(out_shape or shape))],
        28,
    )


def _swiglu_model(dtype: int = _FLOAT, **attrs: float) -> onnx.ModelProto:
    node = oh.make_node("SwiGLU", ["a", "b"], ["y"], name="swiglu", **attrs)
    return make_model(
        [node],
        [
            oh.make_tensor_value_info("a", dtype, [2, 3, 4]),
            oh.make_tensor_value_info("b", dtype, [2, 3, 4]),
        ],
        [oh.make_tensor_value_info("y", dtype, [2, 3, 4])],
        28,
    )


def _binary(
    op: str,
    dtype: int,
    shapes: tuple[Sequence[int], Sequence[int], Sequence[int]],
    *,
    via: int | None = None,
    constant_b: np.ndarray | None = None,
    reciprocal: bool = False,
    **attrs: object,
) -> onnx.ModelProto:
    """``op(a, b)``; with ``via``, a and b are Cast to ``via`` and the result back.

    With ``reciprocal``, a second output ``1 / y`` makes the sign of a zero result
    visible (as -inf or +inf) to the comparison.
    """
    a_shape, b_shape, y_shape = shapes
    nodes = []
    inputs = [oh.make_tensor_value_info("a", dtype, list(a_shape))]
    initializers = []
    if constant_b is None:
        inputs.append(oh.make_tensor_value_info("b", dtype, list(b_shape)))
    else:
        initializers.append(onnx.numpy_helper.from_array(constant_b, "b"))
    a, b, y = "a", "b", "y"
    if via is not None:
        nodes += [
            oh.make_node("Cast", ["a"], ["a_v"], to=via),
            oh.make_node("Cast", ["b"], ["b_v"], to=via),
        ]
        a, b, y = "a_v", "b_v", "y_v"
    nodes.append(oh.make_node(op, [a, b], [y], name=op.lower(), **attrs))
    if via is not None:
        nodes.append(oh.make_node("Cast", ["y_v"], ["y"], to=dtype))
    outputs = [oh.make_tensor_value_info("y", dtype, list(y_shape))]
    if reciprocal:
        one = onnx.numpy_helper.from_array(
            np.array(1, dtype=onnx.helper.tensor_dtype_to_np_dtype(dtype)), "one"
        )
        initializers.append(one)
        nodes.append(oh.make_node("Div", ["one", "y"], ["inv_y"]))
        outputs.append(oh.make_tensor_value_info("inv_y", dtype, list(y_shape)))
    return make_model(nodes, inputs, outputs, 28, initializers=initializers)


def _mod_float_feeds(dtype: type):
    """Every sign combination, zeros of both signs, infinities, NaN, exact multiples."""

    def feeds(rng: np.random.Generator) -> Feeds:
        special = [0.0, -0.0, 1.0, -1.0, 5.5, -5.5, np.inf, -np.inf, np.nan, 6.0, -6.0, 1e-30]
        a = np.array(special, dtype=np.float64)[:, None] * np.ones((1, len(special)))
        b = np.array(special, dtype=np.float64)[None, :] * np.ones((len(special), 1))
        extra_a = rng.uniform(-100, 100, size=(4, len(special)))
        extra_b = rng.uniform(-7, 7, size=(4, len(special)))
        a = np.concatenate([a, extra_a]).astype(dtype)
        b = np.concatenate([b, extra_b]).astype(dtype)
        return {"a": a, "b": b}

    return feeds


_MOD_SHAPE = (16, 12)
_MOD_SHAPES = (_MOD_SHAPE, _MOD_SHAPE, _MOD_SHAPE)


def _int_mod_feeds(dtype: type):
    def feeds(rng: np.random.Generator) -> Feeds:
        info = np.iinfo(dtype)
        a = rng.integers(max(info.min, -1000), min(info.max, 1000), size=(6, 8)).astype(dtype)
        b = rng.integers(max(info.min, -9), min(info.max, 9), size=(6, 8)).astype(dtype)
        b[b == 0] = 3
        a[0, :4] = [info.min, info.max, 0, info.min + 1]
        return {"a": a, "b": b}

    return feeds


def _shift_feeds(dtype: type, amounts: Sequence[int]):
    """X covers min, max, -1, 0, 1 and randoms; Y covers every amount in ``amounts``."""

    def feeds(rng: np.random.Generator) -> Feeds:
        info = np.iinfo(dtype)
        corners = [info.min, info.max, 0, 1]
        if info.min < 0:
            corners += [-1, -2, info.min + 1]
        x = np.concatenate(
            [np.array(corners, dtype=dtype), rng.integers(info.min, info.max, size=5, dtype=dtype)]
        )
        x = np.broadcast_to(x[:, None], (x.size, len(amounts))).astype(dtype)
        y = np.broadcast_to(np.array(amounts)[None, :], x.shape).astype(dtype)
        return {"a": np.ascontiguousarray(x), "b": np.ascontiguousarray(y)}

    return feeds


def _shift_case(dtype: int, np_dtype: type, direction: str, target: int | None = None):
    bits = np.iinfo(np_dtype).bits
    amounts = [0, 1, 3, bits - 1, bits, bits + 3]
    if np.iinfo(np_dtype).min < 0:
        amounts += [-1, -bits]
    rows = 5 + (7 if np.iinfo(np_dtype).min < 0 else 4)
    shape = (rows, len(amounts))
    suffix = "" if target is None else f"_to_opset_{target}"
    return AdapterCase(
        "BitShift",
        28,
        f"{np.dtype(np_dtype).name}_{direction.lower()}{suffix}",
        lambda: _binary("BitShift", dtype, (shape, shape, shape), direction=direction),
        feeds=_shift_feeds(np_dtype, amounts),
        target=target,
    )


def _celu_bfloat16(alpha: float) -> onnx.ModelProto:
    """Celu on bfloat16 between Casts from and to float (ORT feeds no bfloat16)."""
    nodes = [
        oh.make_node("Cast", ["x"], ["x_bf"], to=_BF16),
        oh.make_node("Celu", ["x_bf"], ["y_bf"], name="celu", alpha=alpha),
        oh.make_node("Cast", ["y_bf"], ["y"], to=_FLOAT),
    ]
    x = oh.make_tensor_value_info("x", _FLOAT, [2, 3, 4])
    return make_model(nodes, [x], [oh.make_tensor_value_info("y", _FLOAT, [2, 3, 4])], 28)


def _compress_model(axis: int | None, bfloat16: bool = True) -> onnx.ModelProto:
    attrs = {} if axis is None else {"axis": axis}
    if bfloat16:
        nodes = [
            oh.make_node("Cast", ["x"], ["x_bf"], to=_BF16),
            oh.make_node("Compress", ["x_bf", "cond"], ["y_bf"], name="compress", **attrs),
            oh.make_node("Cast", ["y_bf"], ["y"], to=_FLOAT),
        ]
    else:
        nodes = [oh.make_node("Compress", ["x", "cond"], ["y"], name="compress", **attrs)]
    return make_model(
        nodes,
        [
            oh.make_tensor_value_info("x", _FLOAT, [3, 4]),
            oh.make_tensor_value_info("cond", TensorProto.BOOL, [3]),
        ],
        [oh.make_tensor_value_info("y", _FLOAT, [None] if axis is None else [None, None])],
        28,
    )


def _compress_feeds(rng: np.random.Generator) -> Feeds:
    return {
        "x": rng.standard_normal((3, 4)).astype(np.float32),
        "cond": np.array([True, False, True]),
    }


def _onehot_model(dtype: int, axis: int = -1) -> onnx.ModelProto:
    nodes = []
    values = "values"
    if dtype == _BF16:
        nodes.append(oh.make_node("Cast", ["values"], ["values_bf"], to=_BF16))
        values = "values_bf"
    out = "y_bf" if dtype == _BF16 else "y"
    nodes.append(
        oh.make_node("OneHot", ["indices", "depth", values], [out], name="onehot", axis=axis)
    )
    if dtype == _BF16:
        nodes.append(oh.make_node("Cast", ["y_bf"], ["y"], to=_FLOAT))
    feed_type = _FLOAT if dtype == _BF16 else dtype
    return make_model(
        nodes,
        [
            oh.make_tensor_value_info("indices", TensorProto.INT64, [2, 3]),
            oh.make_tensor_value_info("values", feed_type, [2]),
        ],
        [oh.make_tensor_value_info("y", feed_type, [None, None, None])],
        28,
        initializers=[onnx.numpy_helper.from_array(np.array(4, np.int64), "depth")],
    )


def _onehot_feeds(rng: np.random.Generator) -> Feeds:
    return {
        "indices": np.array([[0, 3, -1], [5, -4, 2]], dtype=np.int64),
        "values": np.array([-0.0, 2.5], dtype=np.float32),
    }


def _reverse_sequence_model(time_axis: int, rank: int = 3) -> onnx.ModelProto:
    batch_axis = 1 - time_axis
    shape = [4, 3, 2, 2][:rank] if time_axis == 0 else [3, 4, 2, 2][:rank]
    nodes = [
        oh.make_node("Cast", ["x"], ["x_bf"], to=_BF16),
        oh.make_node(
            "ReverseSequence",
            ["x_bf", "lens"],
            ["y_bf"],
            name="reverse",
            time_axis=time_axis,
            batch_axis=batch_axis,
        ),
        oh.make_node("Cast", ["y_bf"], ["y"], to=_FLOAT),
    ]
    return make_model(
        nodes,
        [
            oh.make_tensor_value_info("x", _FLOAT, shape),
            oh.make_tensor_value_info("lens", TensorProto.INT64, [3]),
        ],
        [oh.make_tensor_value_info("y", _FLOAT, shape)],
        28,
    )


def _reverse_feeds(shape: Sequence[int]):
    def feeds(rng: np.random.Generator) -> Feeds:
        return {
            "x": rng.standard_normal(shape).astype(np.float32),
            "lens": np.array([4, 1, 3], dtype=np.int64),
        }

    return feeds


def _unique_model(axis: int | None, sorted_: int | None) -> onnx.ModelProto:
    attrs: dict[str, int] = {}
    if axis is not None:
        attrs["axis"] = axis
    if sorted_ is not None:
        attrs["sorted"] = sorted_
    nodes = [
        oh.make_node("Cast", ["x"], ["x_bf"], to=_BF16),
        oh.make_node(
            "Unique",
            ["x_bf"],
            ["y_bf", "indices", "inverse", "counts"],
            name="unique",
            **attrs,
        ),
        oh.make_node("Cast", ["y_bf"], ["y"], to=_FLOAT),
    ]
    return make_model(
        nodes,
        [oh.make_tensor_value_info("x", _FLOAT, [4, 3])],
        [
            oh.make_tensor_value_info("y", _FLOAT, [None] if axis is None else [None, 3]),
            oh.make_tensor_value_info("indices", TensorProto.INT64, [None]),
            oh.make_tensor_value_info("inverse", TensorProto.INT64, [None]),
            oh.make_tensor_value_info("counts", TensorProto.INT64, [None]),
        ],
        28,
    )


def _unique_feeds(rng: np.random.Generator) -> Feeds:
    x = np.array(
        [[1.5, -2.0, 1.5], [0.0, 3.25, -2.0], [1.5, -2.0, 1.5], [7.0, 0.0, -1.0]],
        dtype=np.float32,
    )
    return {"x": x}


CASES: list[AdapterCase] = [
    AdapterCase("SwiGLU", 28, "default_alpha", lambda: _swiglu_model()),
    AdapterCase("SwiGLU", 28, "alpha_1.702", lambda: _swiglu_model(alpha=1.702)),
    AdapterCase(
        "SwiGLU", 28, "float16_to_opset_18", lambda: _swiglu_model(_F16), target=18, rtol=1e-3
    ),
    AdapterCase(
        "DepthToSpace",
        28,
        "dcr",
        lambda: _unary("DepthToSpace", _FLOAT, [1, 8, 2, 3], [1, 2, 4, 6], blocksize=2),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "DepthToSpace",
        28,
        "crd",
        lambda: _unary("DepthToSpace", _FLOAT, [1, 8, 2, 3], [1, 2, 4, 6], blocksize=2, mode="CRD"),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "SpaceToDepth",
        28,
        "default_mode",
        lambda: _unary("SpaceToDepth", _FLOAT, [2, 3, 4, 6], [2, 12, 2, 3], blocksize=2),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "SpaceToDepth",
        28,
        "dcr_dropped",
        lambda: _unary(
            "SpaceToDepth", _FLOAT, [2, 3, 4, 6], [2, 12, 2, 3], blocksize=2, mode="DCR"
        ),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "SpaceToDepth",
        28,
        "crd_expanded",
        lambda: _unary(
            "SpaceToDepth", _FLOAT, [2, 3, 4, 6], [2, 12, 2, 3], blocksize=2, mode="CRD"
        ),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "SpaceToDepth",
        28,
        "crd_blocksize3_int64_to_opset_18",
        lambda: _unary(
            "SpaceToDepth",
            TensorProto.INT64,
            [1, 2, 6, 3],
            [1, 18, 2, 1],
            blocksize=3,
            mode="CRD",
        ),
        target=18,
    ),
    AdapterCase(
        "Mod",
        28,
        "int32_floor_unchanged",
        lambda: _binary("Mod", TensorProto.INT32, ((6, 8), (6, 8), (6, 8))),
        feeds=_int_mod_feeds(np.int32),
    ),
    AdapterCase(
        "Mod",
        28,
        "float_fmod1_unchanged",
        lambda: _binary("Mod", _FLOAT, _MOD_SHAPES, fmod=1, reciprocal=True),
        feeds=_mod_float_feeds(np.float32),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "Mod",
        28,
        "float_floor_mod",
        lambda: _binary("Mod", _FLOAT, _MOD_SHAPES, reciprocal=True),
        feeds=_mod_float_feeds(np.float32),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "Mod",
        28,
        "double_floor_mod_to_opset_18",
        lambda: _binary("Mod", _DOUBLE, _MOD_SHAPES, fmod=0, reciprocal=True),
        feeds=_mod_float_feeds(np.float64),
        target=18,
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "Mod",
        28,
        "float16_floor_mod",
        lambda: _binary("Mod", _F16, _MOD_SHAPES, reciprocal=True),
        feeds=_mod_float_feeds(np.float16),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "Mod",
        28,
        "bfloat16_floor_mod",
        lambda: _binary("Mod", _FLOAT, _MOD_SHAPES, via=_BF16, reciprocal=True),
        feeds=_mod_float_feeds(np.float32),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "Mod",
        28,
        "float_floor_mod_broadcast",
        lambda: _binary("Mod", _FLOAT, ((3, 4), (4,), (3, 4)), reciprocal=True),
        feeds=lambda rng: {
            "a": rng.uniform(-10, 10, size=(3, 4)).astype(np.float32),
            "b": np.array([3.0, -3.0, 0.5, -np.inf], dtype=np.float32),
        },
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "Mod",
        28,
        "int64_fmod1_truncated",
        lambda: _binary("Mod", TensorProto.INT64, ((6, 8), (6, 8), (6, 8)), fmod=1),
        feeds=_int_mod_feeds(np.int64),
    ),
    AdapterCase(
        "Mod",
        28,
        "int8_fmod1_truncated",
        lambda: _binary("Mod", TensorProto.INT8, ((6, 8), (6, 8), (6, 8)), fmod=1),
        feeds=_int_mod_feeds(np.int8),
    ),
    AdapterCase(
        "Mod",
        28,
        "uint32_fmod1_dropped",
        lambda: _binary("Mod", TensorProto.UINT32, ((6, 8), (6, 8), (6, 8)), fmod=1),
        feeds=lambda rng: {
            "a": rng.integers(0, 1000, size=(6, 8)).astype(np.uint32),
            "b": rng.integers(1, 9, size=(6, 8)).astype(np.uint32),
        },
    ),
    AdapterCase("Celu", 28, "float", lambda: _unary("Celu", _FLOAT, [2, 3, 4], alpha=0.5)),
    AdapterCase("Celu", 28, "double", lambda: _unary("Celu", _DOUBLE, [2, 3, 4], alpha=1.5)),
    AdapterCase("Celu", 28, "float16", lambda: _unary("Celu", _F16, [2, 3, 4], alpha=2.0)),
    AdapterCase("Celu", 28, "bfloat16", lambda: _celu_bfloat16(2.0)),
    AdapterCase("Celu", 28, "bfloat16_to_opset_18", lambda: _celu_bfloat16(1.0), target=18),
    AdapterCase(
        "BitShift",
        28,
        "uint32_constant_amounts_kept",
        lambda: _binary(
            "BitShift",
            TensorProto.UINT32,
            ((2, 3), (3,), (2, 3)),
            constant_b=np.array([0, 5, 31], np.uint32),
            direction="LEFT",
        ),
    ),
    AdapterCase(
        "BitShift",
        28,
        "int16_constant_amounts_right",
        lambda: _binary(
            "BitShift",
            TensorProto.INT16,
            ((2, 4), (4,), (2, 4)),
            constant_b=np.array([0, 1, 7, 15], np.int16),
            direction="RIGHT",
        ),
        feeds=lambda rng: {"a": np.array([[-32768, -1, 5, 32767], [-300, 77, -2, 0]], np.int16)},
    ),
    AdapterCase(
        "BitShift",
        28,
        "int64_constant_amounts_left_to_opset_18",
        lambda: _binary(
            "BitShift",
            TensorProto.INT64,
            ((2, 4), (4,), (2, 4)),
            constant_b=np.array([0, 1, 33, 63], np.int64),
            direction="LEFT",
        ),
        feeds=lambda rng: {"a": np.array([[-(2**63), -1, 5, 2**63 - 1], [-300, 77, -2, 1]])},
        target=18,
    ),
    _shift_case(TensorProto.UINT8, np.uint8, "LEFT"),
    _shift_case(TensorProto.UINT64, np.uint64, "RIGHT"),
    _shift_case(TensorProto.INT8, np.int8, "LEFT"),
    _shift_case(TensorProto.INT8, np.int8, "RIGHT"),
    _shift_case(TensorProto.INT16, np.int16, "RIGHT"),
    _shift_case(TensorProto.INT32, np.int32, "LEFT"),
    _shift_case(TensorProto.INT32, np.int32, "RIGHT"),
    _shift_case(TensorProto.INT64, np.int64, "LEFT"),
    _shift_case(TensorProto.INT64, np.int64, "RIGHT"),
    _shift_case(TensorProto.INT32, np.int32, "RIGHT", target=18),
    _shift_case(TensorProto.INT64, np.int64, "LEFT", target=18),
    AdapterCase(
        "Compress",
        28,
        "float_unchanged",
        lambda: _compress_model(1, bfloat16=False),
        feeds=_compress_feeds,
    ),
    AdapterCase(
        "Compress", 28, "bfloat16_axis0", lambda: _compress_model(0), feeds=_compress_feeds
    ),
    AdapterCase(
        "Compress", 28, "bfloat16_axis_minus1", lambda: _compress_model(-1), feeds=_compress_feeds
    ),
    AdapterCase(
        "Compress",
        28,
        "bfloat16_flattened_to_opset_18",
        lambda: _compress_model(None),
        feeds=_compress_feeds,
        target=18,
    ),
    AdapterCase(
        "OneHot", 28, "float_unchanged", lambda: _onehot_model(_FLOAT), feeds=_onehot_feeds
    ),
    AdapterCase("OneHot", 28, "bfloat16_values", lambda: _onehot_model(_BF16), feeds=_onehot_feeds),
    AdapterCase(
        "OneHot",
        28,
        "bfloat16_axis0_to_opset_18",
        lambda: _onehot_model(_BF16, axis=0),
        feeds=_onehot_feeds,
        target=18,
    ),
    AdapterCase(
        "ReverseSequence",
        28,
        "bfloat16_time_axis0",
        lambda: _reverse_sequence_model(0),
        feeds=_reverse_feeds([4, 3, 2]),
    ),
    AdapterCase(
        "ReverseSequence",
        28,
        "bfloat16_time_axis1_rank2",
        lambda: _reverse_sequence_model(1, rank=2),
        feeds=_reverse_feeds([3, 4]),
    ),
    AdapterCase(
        "ReverseSequence",
        28,
        "bfloat16_time_axis1_rank4_to_opset_18",
        lambda: _reverse_sequence_model(1, rank=4),
        feeds=_reverse_feeds([3, 4, 2, 2]),
        target=18,
    ),
    AdapterCase(
        "Unique", 28, "bfloat16_flat_sorted", lambda: _unique_model(None, None), feeds=_unique_feeds
    ),
    AdapterCase(
        "Unique", 28, "bfloat16_flat_unsorted", lambda: _unique_model(None, 0), feeds=_unique_feeds
    ),
    AdapterCase(
        "Unique",
        28,
        "bfloat16_axis0_to_opset_18",
        lambda: _unique_model(0, 1),
        feeds=_unique_feeds,
        target=18,
    ),
]
