"""Cases for the 23 -> 22 adapters (run by test_registry_cases.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto

from tests.harness import AdapterCase, make_model, tensor_info

F = TensorProto.FLOAT
F16 = TensorProto.FLOAT16
BF16 = TensorProto.BFLOAT16
I8 = TensorProto.INT8
U8 = TensorProto.UINT8


_vi = tensor_info


def _attention(
    q: list[int],
    k: list[int],
    v: list[int],
    *,
    mask: tuple[int, list[int]] | None = None,
    past: tuple[list[int], list[int]] | None = None,
    outputs: int = 1,
    **attrs: object,
) -> onnx.ModelProto:
    inputs = [_vi("Q", F, q), _vi("K", F, k), _vi("V", F, v)]
    names = ["Q", "K", "V"]
    if mask is not None:
        inputs.append(_vi("mask", mask[0], mask[1]))
        names.append("mask")
    if past is not None:
        if mask is None:
            names.append("")
        inputs += [_vi("past_key", F, past[0]), _vi("past_value", F, past[1])]
        names += ["past_key", "past_value"]
    out_names = ["Y", "present_key", "present_value", "qk"][:outputs]
    node = oh.make_node("Attention", names, out_names, name="attn", **attrs)
    return make_model([node], inputs, [_vi(n, F, len(q) if n == "Y" else 4) for n in out_names], 23)


def _attention_fp16() -> onnx.ModelProto:
    nodes = [oh.make_node("Cast", [n], [n + "h"], to=F16) for n in ("Q", "K", "V")]
    nodes.append(oh.make_node("Attention", ["Qh", "Kh", "Vh"], ["Yh"], name="attn", is_causal=1))
    nodes.append(oh.make_node("Cast", ["Yh"], ["Y"], to=F))
    return make_model(
        nodes,
        [_vi("Q", F, [1, 2, 4, 8]), _vi("K", F, [1, 2, 4, 8]), _vi("V", F, [1, 2, 4, 8])],
        [_vi("Y", F, [1, 2, 4, 8])],
        23,
    )


def _bool_mask_feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
    mask = rng.random((4, 6)) > 0.3
    mask[:, 0] = True
    return {
        "Q": rng.standard_normal((2, 3, 4, 8)).astype(np.float32),
        "K": rng.standard_normal((2, 3, 6, 8)).astype(np.float32),
        "V": rng.standard_normal((2, 3, 6, 8)).astype(np.float32),
        "mask": mask,
    }


def _rms_norm(shape: list[int], elem: int = F, **attrs: object) -> onnx.ModelProto:
    axis = int(attrs.get("axis", -1))  # type: ignore[call-overload]
    scale_shape = shape[axis:]
    nodes = [
        oh.make_node("Cast", ["x"], ["xc"], to=elem),
        oh.make_node("Cast", ["s"], ["sc"], to=elem),
        oh.make_node("RMSNormalization", ["xc", "sc"], ["yc"], name="rms", **attrs),
        oh.make_node("Cast", ["yc"], ["y"], to=F),
    ]
    return make_model(
        nodes, [_vi("x", F, shape), _vi("s", F, scale_shape)], [_vi("y", F, shape)], 23
    )


def _rotary(
    x_shape: list[int], *, position_ids: bool = True, cache_len: int = 10, **attrs: object
) -> onnx.ModelProto:
    batch, seq = x_shape[0], x_shape[-2] if len(x_shape) == 4 else x_shape[1]
    head = x_shape[-1] if len(x_shape) == 4 else x_shape[-1] // int(attrs["num_heads"])  # type: ignore[call-overload]
    rot = int(attrs.get("rotary_embedding_dim", 0)) or head  # type: ignore[call-overload]
    cache = [cache_len, rot // 2] if position_ids else [batch, seq, rot // 2]
    inputs = [_vi("x", F, x_shape), _vi("cos", F, cache), _vi("sin", F, cache)]
    names = ["x", "cos", "sin"]
    if position_ids:
        inputs.append(_vi("pos", TensorProto.INT64, [batch, seq]))
        names.append("pos")
    node = oh.make_node("RotaryEmbedding", names, ["y"], name="rope", **attrs)
    return make_model([node], inputs, [_vi("y", F, x_shape)], 23)


def _rotary_feeds(x_shape: list[int], cache: list[int], position_ids: bool = True):  # type: ignore[no-untyped-def]
    def feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
        angles = rng.uniform(0, 6.3, size=cache).astype(np.float32)
        out = {
            "x": rng.standard_normal(x_shape).astype(np.float32),
            "cos": np.cos(angles),
            "sin": np.sin(angles),
        }
        if position_ids:
            batch = x_shape[0]
            seq = x_shape[-2] if len(x_shape) == 4 else x_shape[1]
            out["pos"] = rng.integers(0, cache[0], size=(batch, seq)).astype(np.int64)
        return out

    return feeds


def _dq(x_type: int, scale_type: int, output_dtype: int | None) -> onnx.ModelProto:
    attrs = {} if output_dtype is None else {"output_dtype": output_dtype}
    nodes = [
        oh.make_node("Cast", ["xi"], ["x"], to=x_type),
        oh.make_node("Cast", ["scale_f"], ["scale"], to=scale_type),
        oh.make_node("DequantizeLinear", ["x", "scale"], ["yq"], name="dq", **attrs),
        oh.make_node("Cast", ["yq"], ["y"], to=F),
    ]
    return make_model(
        nodes,
        [_vi("xi", TensorProto.INT32, [2, 3])],
        [_vi("y", F, [2, 3])],
        23,
        initializers=[onnx.numpy_helper.from_array(np.array(0.0371, np.float32), "scale_f")],
    )


def _dq_feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"xi": rng.integers(-128, 128, size=(2, 3)).astype(np.int32)}


def _q(
    x_type: int, scale_type: int, out_type: int, precision: int | None = None
) -> onnx.ModelProto:
    attrs = {} if precision is None else {"precision": precision}
    nodes = [
        oh.make_node("Cast", ["xf"], ["x"], to=x_type),
        oh.make_node("Cast", ["scale_f"], ["scale"], to=scale_type),
        oh.make_node("Cast", ["zero"], ["zp"], to=out_type),
        oh.make_node("QuantizeLinear", ["x", "scale", "zp"], ["y"], name="q", **attrs),
    ]
    return make_model(
        nodes,
        [_vi("xf", F, [2, 3])],
        [_vi("y", out_type, [2, 3])],
        23,
        initializers=[
            onnx.numpy_helper.from_array(np.array(0.0371, np.float32), "scale_f"),
            onnx.numpy_helper.from_array(np.array(3.0, np.float32), "zero"),
        ],
    )


def _q_feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"xf": rng.uniform(-6, 6, size=(2, 3)).astype(np.float32)}


_ATOL = {"rtol": 1e-5, "atol": 1e-5}

CASES: list[AdapterCase] = [
    AdapterCase(
        "Attention",
        23,
        "4d",
        lambda: _attention([2, 3, 4, 8], [2, 3, 5, 8], [2, 3, 5, 8]),
        **_ATOL,
    ),
    AdapterCase(
        "Attention",
        23,
        "4d_to_opset_18",
        lambda: _attention([2, 3, 4, 8], [2, 3, 5, 8], [2, 3, 5, 6]),
        target=18,
        **_ATOL,
    ),
    AdapterCase(
        "Attention",
        23,
        "gqa_causal_scale",
        lambda: _attention([1, 4, 5, 8], [1, 2, 5, 8], [1, 2, 5, 8], is_causal=1, scale=0.2),
        target=18,
        **_ATOL,
    ),
    AdapterCase(
        "Attention",
        23,
        "3d_heads_float_mask_past",
        lambda: _attention(
            [2, 4, 12],
            [2, 3, 6],
            [2, 3, 6],
            mask=(F, [4, 5]),
            past=([2, 2, 2, 3], [2, 2, 2, 3]),
            outputs=3,
            q_num_heads=4,
            kv_num_heads=2,
        ),
        **_ATOL,
    ),
    AdapterCase(
        "Attention",
        23,
        "bool_mask_softcap_qk_output",
        lambda: _attention(
            [2, 3, 4, 8],
            [2, 3, 6, 8],
            [2, 3, 6, 8],
            mask=(TensorProto.BOOL, [4, 6]),
            outputs=4,
            softcap=2.0,
            qk_matmul_output_mode=1,
        ),
        feeds=_bool_mask_feeds,
        target=18,
        **_ATOL,
    ),
    AdapterCase(
        "Attention", 23, "fp16_causal_to_18", _attention_fp16, target=18, rtol=2e-3, atol=2e-3
    ),
    AdapterCase("RMSNormalization", 23, "default", lambda: _rms_norm([2, 3, 8]), **_ATOL),
    AdapterCase(
        "RMSNormalization",
        23,
        "axis_1_epsilon_to_18",
        lambda: _rms_norm([2, 3, 4], axis=1, epsilon=0.1),
        target=18,
        **_ATOL,
    ),
    AdapterCase(
        "RMSNormalization",
        23,
        "fp16_stash_float",
        lambda: _rms_norm([2, 5, 8], elem=F16, stash_type=1),
        target=18,
        rtol=1e-3,
        atol=1e-3,
    ),
    AdapterCase(
        "RotaryEmbedding",
        23,
        "4d_position_ids",
        lambda: _rotary([2, 3, 4, 8]),
        feeds=_rotary_feeds([2, 3, 4, 8], [10, 4]),
        **_ATOL,
    ),
    AdapterCase(
        "RotaryEmbedding",
        23,
        "3d_interleaved_partial_to_18",
        lambda: _rotary([2, 4, 24], num_heads=3, interleaved=1, rotary_embedding_dim=4),
        feeds=_rotary_feeds([2, 4, 24], [10, 2]),
        target=18,
        **_ATOL,
    ),
    AdapterCase(
        "RotaryEmbedding",
        23,
        "no_position_ids",
        lambda: _rotary([2, 3, 4, 8], position_ids=False),
        feeds=_rotary_feeds([2, 3, 4, 8], [2, 4, 4], position_ids=False),
        **_ATOL,
    ),
    AdapterCase(
        "DequantizeLinear", 23, "no_output_dtype", lambda: _dq(I8, F, None), feeds=_dq_feeds
    ),
    AdapterCase(
        "DequantizeLinear", 23, "output_dtype_same", lambda: _dq(U8, F16, F16), feeds=_dq_feeds
    ),
    AdapterCase(
        "DequantizeLinear",
        23,
        "fp16_scale_float_output_to_18",
        lambda: _dq(I8, F16, F),
        feeds=_dq_feeds,
        target=18,
    ),
    AdapterCase(
        "DequantizeLinear",
        23,
        "narrowing_output_refused",
        lambda: _dq(I8, F, F16),
        refuse=r"node 'dq' \(DequantizeLinear-23.*output_dtype FLOAT16 differs from the FLOAT",
    ),
    AdapterCase(
        "DequantizeLinear",
        23,
        "float4_refused",
        lambda: _dq(TensorProto.FLOAT4E2M1, F, None),
        refuse=r"node 'dq' \(DequantizeLinear-23.*FLOAT4E2M1",
    ),
    AdapterCase("QuantizeLinear", 23, "same_types", lambda: _q(F, F, I8), feeds=_q_feeds),
    AdapterCase(
        "QuantizeLinear",
        23,
        "fp16_x_float_scale_to_18",
        lambda: _q(F16, F, U8),
        feeds=_q_feeds,
        target=18,
    ),
    AdapterCase(
        "QuantizeLinear",
        23,
        "precision_float",
        lambda: _q(BF16, F16, I8, precision=F),
        feeds=_q_feeds,
    ),
    AdapterCase(
        "QuantizeLinear",
        23,
        "narrowing_refused",
        lambda: _q(F, F16, I8),
        refuse=r"node 'q' \(QuantizeLinear-23.*input FLOAT and y_scale FLOAT16 divided at FLOAT16",
    ),
    AdapterCase(
        "QuantizeLinear",
        23,
        "float4_refused",
        lambda: _q(F, F, TensorProto.FLOAT4E2M1),
        refuse=r"node 'q' \(QuantizeLinear-23.*FLOAT4E2M1",
    ),
]
