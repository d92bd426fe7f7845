"""Cases for the 24 -> 23 adapters (Cast, CastLike, Swish, Attention, TensorScatter, TopK,
SplitToSequence) and for ops whose 24 -> 23 step is derived or empty (Reshape, RMSNormalization).

Run by test_registry_cases.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto

from tests.harness import AdapterCase, make_model, random_feeds


def _cast_model(to: int, round_mode: str | None, op: str = "Cast") -> onnx.ModelProto:
    attrs: dict[str, object] = {}
    if round_mode is not None:
        attrs["round_mode"] = round_mode
    if op == "Cast":
        node = oh.make_node("Cast", ["x"], ["y"], name="cast", to=to, **attrs)
        inputs = [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    else:
        node = oh.make_node("CastLike", ["x", "like"], ["y"], name="cast", **attrs)
        inputs = [
            oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            oh.make_tensor_value_info("like", to, [1]),
        ]
    return make_model([node], inputs, [oh.make_tensor_value_info("y", to, [2, 3])], 24)


def _swish_model(alpha: float | None) -> onnx.ModelProto:
    attrs = {} if alpha is None else {"alpha": alpha}
    node = oh.make_node("Swish", ["x"], ["y"], name="swish", **attrs)
    return make_model(
        [node],
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
        24,
    )


CASES: list[AdapterCase] = []
for _op in ("Cast", "CastLike"):
    CASES += [
        AdapterCase(_op, 24, "to_fp16", lambda op=_op: _cast_model(TensorProto.FLOAT16, None, op)),
        AdapterCase(_op, 24, "to_int32", lambda op=_op: _cast_model(TensorProto.INT32, None, op)),
        AdapterCase(
            _op,
            24,
            "round_mode_ignored",
            lambda op=_op: _cast_model(TensorProto.FLOAT16, "down", op),
        ),
        AdapterCase(
            _op,
            24,
            "to_float8e8m0_refused",
            lambda op=_op: _cast_model(TensorProto.FLOAT8E8M0, "up", op),
            refuse=r"node 'cast' \("
            + _op
            + r"-24.*FLOAT8E8M0, which "
            + _op
            + "-23 does not allow",
        ),
    ]
CASES += [
    AdapterCase("Swish", 24, "default_alpha", lambda: _swish_model(None)),
    AdapterCase("Swish", 24, "alpha_0.5", lambda: _swish_model(0.5)),
    AdapterCase("Swish", 24, "to_opset_18", lambda: _swish_model(1.7), target=18),
]


# -- Attention-24 -------------------------------------------------------------------------

_F = TensorProto.FLOAT


def _info(name: str, elem: int, shape: Sequence[int | str | None] | None) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, elem, shape)


def _attention_model(
    q: Sequence[int | str],
    kv: Sequence[int | str],
    *,
    mask: tuple[int, Sequence[int | str]] | None = None,
    past: Sequence[int | str] | None = None,
    nonpad: Sequence[int | str] | None = None,
    empty_nonpad: bool = False,
    elem: int = _F,
    outputs: int = 1,
    **attrs: Any,
) -> onnx.ModelProto:
    """One Attention-24 node; ``outputs`` = 1 (Y), 3 (+ present key/value) or 4 (+ qk)."""
    names = ["q", "k", "v"]
    infos = [_info("q", elem, q), _info("k", elem, kv), _info("v", elem, kv)]
    names.append("mask" if mask is not None else "")
    if mask is not None:
        infos.append(_info("mask", mask[0], mask[1]))
    names += ["past_k", "past_v"] if past is not None else ["", ""]
    if past is not None:
        infos += [_info("past_k", elem, past), _info("past_v", elem, past)]
    if nonpad is not None:
        names.append("nonpad")
        infos.append(_info("nonpad", TensorProto.INT64, nonpad))
    elif empty_nonpad:
        names.append("")
    while names[-1] == "":
        names.pop()
    out_names = ["y", "present_k", "present_v", "qk"][:outputs]
    if outputs == 2:
        out_names = ["y", "", "", "qk"]
    node = oh.make_node("Attention", names, out_names, name="attention", **attrs)
    ranks = {"y": len(q), "present_k": 4, "present_v": 4, "qk": 4}
    outs = [_info(n, elem, [None] * ranks[n]) for n in out_names if n]
    return make_model([node], infos, outs, 24)


def _attention_feeds(
    nonpad: list[int] | None = None, mask_float_neg_inf: bool = False
) -> Callable[[onnx.ModelProto, np.random.Generator], dict[str, np.ndarray]]:
    """Random feeds for every input, with the given ``nonpad`` values."""

    def feeds(model: onnx.ModelProto, rng: np.random.Generator) -> dict[str, np.ndarray]:
        result = random_feeds(model, rng)
        if nonpad is not None:
            result["nonpad"] = np.array(nonpad, dtype=np.int64)
        if mask_float_neg_inf and "mask" in result:
            mask = result["mask"]
            mask[rng.random(mask.shape) < 0.25] = -np.inf
        return result

    return feeds


def _attention_case(
    name: str,
    model: Callable[[], onnx.ModelProto],
    nonpad: list[int] | None = None,
    neg_inf: bool = False,
    **kwargs: Any,
) -> AdapterCase:
    make_feeds = _attention_feeds(nonpad, neg_inf)
    return AdapterCase(
        "Attention",
        24,
        name,
        model,
        feeds=lambda rng: make_feeds(model(), rng),
        rtol=kwargs.pop("rtol", 1e-5),
        atol=kwargs.pop("atol", 1e-5),
        **kwargs,
    )


_B = TensorProto.BOOL
_Q4, _KV4 = [3, 2, 4, 8], [3, 2, 6, 8]  # batch 3, 2 heads, q 4, kv 6, head 8
CASES += [
    _attention_case("4d_plain", lambda: _attention_model(_Q4, _KV4)),
    _attention_case(
        "4d_full_float_mask_causal",
        lambda: _attention_model(_Q4, _KV4, mask=(_F, [4, 6]), is_causal=1),
        neg_inf=True,
    ),
    _attention_case(
        "empty_nonpad_input_bool_mask",
        lambda: _attention_model(_Q4, _KV4, mask=(_B, [3, 1, 4, 6]), empty_nonpad=True),
    ),
    _attention_case(
        "past_kv_causal_float_mask",
        lambda: _attention_model(
            _Q4, _KV4, mask=(_F, [4, 9]), past=[3, 2, 3, 8], outputs=3, is_causal=1
        ),
        neg_inf=True,
    ),
    _attention_case(
        "dynamic_shapes_mask_checked_by_pad",
        lambda: _attention_model(
            ["b", 2, "s", 8], ["b", 2, "t", 8], mask=(_F, ["s", "m"]), is_causal=1
        ),
    ),
    _attention_case(
        "nonpad_4d",
        lambda: _attention_model(_Q4, _KV4, nonpad=[3]),
        nonpad=[6, 2, 4],
    ),
    _attention_case(
        "nonpad_4d_causal_fully_padded_rows",
        lambda: _attention_model(_Q4, _KV4, nonpad=[3], is_causal=1),
        nonpad=[6, 2, 0],
    ),
    _attention_case(
        "nonpad_4d_causal_float_mask_4d_qk_mode1",
        lambda: _attention_model(
            _Q4,
            _KV4,
            mask=(_F, [3, 2, 4, 6]),
            nonpad=[3],
            outputs=2,
            is_causal=1,
            qk_matmul_output_mode=1,
            softcap=3.0,
        ),
        nonpad=[5, 4, 6],
        neg_inf=True,
    ),
    _attention_case(
        "nonpad_float_mask_heads_q_kv_qk_mode3",
        lambda: _attention_model(
            _Q4, _KV4, mask=(_F, [2, 4, 6]), nonpad=[3], outputs=2, qk_matmul_output_mode=3
        ),
        nonpad=[1, 0, 6],
        neg_inf=True,
    ),
    _attention_case(
        "nonpad_bool_mask_causal_softcap_scale",
        lambda: _attention_model(
            _Q4,
            _KV4,
            mask=(_B, [3, 1, 4, 6]),
            nonpad=[3],
            is_causal=1,
            softcap=2.5,
            scale=0.3,
        ),
        nonpad=[6, 3, 5],
    ),
    _attention_case(
        "nonpad_3d_gqa_causal_bool_mask",
        lambda: _attention_model(
            [3, 4, 16],
            [3, 6, 8],
            mask=(_B, [4, 6]),
            nonpad=[3],
            is_causal=1,
            q_num_heads=4,
            kv_num_heads=2,
        ),
        nonpad=[6, 5, 2],
    ),
    _attention_case(
        "nonpad_3d_mqa_float_mask",
        lambda: _attention_model(
            [3, 4, 16],
            [3, 6, 4],
            mask=(_F, [3, 4, 4, 6]),
            nonpad=[3],
            q_num_heads=4,
            kv_num_heads=1,
        ),
        nonpad=[6, 5, 2],
        neg_inf=True,
    ),
    _attention_case(
        "nonpad_dynamic_shapes_causal",
        lambda: _attention_model(
            ["b", 2, "s", 8],
            ["b", 2, "t", 8],
            mask=(_B, ["s", "t"]),
            nonpad=["b"],
            is_causal=1,
        ),
        nonpad=[2, 1],
    ),
    _attention_case(
        "nonpad_float16_causal_mask",
        lambda: _attention_model(
            _Q4,
            _KV4,
            mask=(TensorProto.FLOAT16, [4, 6]),
            nonpad=[3],
            elem=TensorProto.FLOAT16,
            is_causal=1,
        ),
        nonpad=[6, 4, 3],
        rtol=1e-3,
        atol=1e-3,
    ),
    _attention_case(
        "nonpad_with_past_refused",
        lambda: _attention_model(_Q4, _KV4, past=[3, 2, 3, 8], nonpad=[3]),
        refuse=r"node 'attention' \(Attention-24.*nonpad_kv_seqlen.*past_key",
    ),
    _attention_case(
        "nonpad_int_mask_refused",
        lambda: _attention_model(_Q4, _KV4, mask=(TensorProto.INT32, [4, 6]), nonpad=[3]),
        refuse=r"node 'attention' \(Attention-24.*attn_mask 'mask' is INT32",
    ),
]


# -- TensorScatter-24 ---------------------------------------------------------------------


def _scatter_model(
    cache: Sequence[int | str],
    update: Sequence[int | str],
    *,
    write: bool,
    ranked: bool = True,
    elem: int = _F,
    **attrs: Any,
) -> onnx.ModelProto:
    """One TensorScatter-24 node; with ``ranked=False`` its inputs come through Identity
    nodes whose outputs carry no shape, so the adapter cannot see their rank."""
    nodes = []
    names = ["cache", "update"] + (["write"] if write else [])
    if not ranked:
        nodes += [oh.make_node("Identity", [n], [f"{n}_unranked"]) for n in names[:2]]
        names[:2] = [f"{n}_unranked" for n in names[:2]]
    infos = [_info("cache", elem, cache), _info("update", elem, update)]
    if write:
        infos.append(_info("write", TensorProto.INT64, list(cache[:1])))
    nodes.append(oh.make_node("TensorScatter", names, ["present"], name="scatter", **attrs))
    return make_model(nodes, infos, [_info("present", elem, cache)], 24)


def _scatter_feeds(
    cache: tuple[int, ...], update: tuple[int, ...], write: list[int] | None, elem: int = _F
) -> Callable[[np.random.Generator], dict[str, np.ndarray]]:
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)

    def feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
        result = {
            "cache": rng.integers(-100, 100, size=cache).astype(dtype),
            "update": rng.integers(100, 200, size=update).astype(dtype),
        }
        if write is not None:
            result["write"] = np.array(write, dtype=np.int64)
        return result

    return feeds


def _scatter_case(
    name: str,
    cache: tuple[int, ...],
    update: tuple[int, ...],
    write: list[int] | None,
    *,
    ranked: bool = True,
    elem: int = _F,
    **attrs: Any,
) -> AdapterCase:
    return AdapterCase(
        "TensorScatter",
        24,
        name,
        lambda: _scatter_model(
            list(cache), list(update), write=write is not None, ranked=ranked, elem=elem, **attrs
        ),
        feeds=_scatter_feeds(cache, update, write, elem),
    )


CASES += [
    _scatter_case("linear_default_axis", (2, 3, 6, 4), (2, 3, 2, 4), None),
    _scatter_case("linear_write_indices", (3, 2, 6, 4), (3, 2, 3, 4), [0, 3, 2]),
    _scatter_case("linear_full_cache", (2, 2, 5, 3), (2, 2, 5, 3), [0, 0]),
    _scatter_case("circular_wraps", (3, 2, 6, 4), (3, 2, 3, 4), [4, 5, 13], mode="circular"),
    _scatter_case("circular_no_write_indices", (2, 6, 4), (2, 4, 4), None, mode="circular"),
    _scatter_case("axis_1_linear", (2, 6, 3, 4), (2, 2, 3, 4), [1, 4], axis=1),
    _scatter_case("axis_1_circular_3d", (2, 5, 3), (2, 4, 3), [3, 9], axis=1, mode="circular"),
    _scatter_case("axis_minus_1_linear", (2, 3, 7), (2, 3, 3), [4, 0], axis=-1),
    _scatter_case("axis_minus_1_circular", (2, 3, 7), (2, 3, 3), [6, 2], axis=-1, mode="circular"),
    _scatter_case(
        "axis_2_of_5d_int64",
        (2, 2, 5, 2, 3),
        (2, 2, 2, 2, 3),
        [3, 4],
        axis=2,
        elem=TensorProto.INT64,
        mode="circular",
    ),
    _scatter_case(
        "rank_unknown_circular",
        (2, 3, 6, 4),
        (2, 3, 3, 4),
        [5, 1],
        ranked=False,
        mode="circular",
    ),
    _scatter_case("rank_unknown_axis_1", (2, 6, 4), (2, 2, 4), [2, 4], ranked=False, axis=1),
    _scatter_case(
        "rank_unknown_axis_minus_1",
        (2, 3, 6),
        (2, 3, 2),
        [2, 5],
        ranked=False,
        axis=-1,
        mode="circular",
    ),
    AdapterCase(
        "TensorScatter",
        24,
        "float8_refused",
        lambda: _scatter_model([2, 6, 4], [2, 2, 4], write=False, elem=TensorProto.FLOAT8E4M3FN),
        refuse=r"node 'scatter' \(TensorScatter-24.*FLOAT8E4M3FN, which ScatterElements-18",
    ),
    AdapterCase(
        "TensorScatter",
        24,
        "axis_0_refused",
        lambda: _scatter_model([6, 4], [2, 4], write=False, axis=-2),
        refuse=r"node 'scatter' \(TensorScatter-24.*axis=-2 is the batch axis",
    ),
]


# -- TopK-24 and SplitToSequence-24 (bfloat16) ---------------------------------------------


def _topk_model(elem: int, shape: list[int], **attrs: Any) -> onnx.ModelProto:
    """float32 x -> (Cast to ``elem``) -> TopK -> (Cast values to float32)."""
    nodes = []
    data = "x"
    if elem != _F:
        nodes.append(oh.make_node("Cast", ["x"], ["x_cast"], to=elem))
        data = "x_cast"
    values = "values" if elem == _F else "values_cast"
    nodes.append(oh.make_node("TopK", [data, "k"], [values, "indices"], name="topk", **attrs))
    if elem != _F:
        nodes.append(oh.make_node("Cast", ["values_cast"], ["values"], to=_F))
    out_shape: Sequence[int | str | None] = [None] * len(shape)
    return make_model(
        nodes,
        [_info("x", _F, shape), oh.make_tensor_value_info("k", TensorProto.INT64, [1])],
        [_info("values", _F, out_shape), _info("indices", TensorProto.INT64, out_shape)],
        24,
    )


def _topk_feeds(shape: tuple[int, ...], k: int) -> Callable[[np.random.Generator], Any]:
    def feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
        # Few distinct values (ties), signed zeros, infinities and values that bfloat16
        # rounds together.
        pool = np.array([0.0, -0.0, 1.0, -1.5, 2.0, np.inf, -np.inf, 1.001, 1.002, 3e38])
        x = rng.choice(pool, size=shape).astype(np.float32)
        return {"x": x, "k": np.array([k], dtype=np.int64)}

    return feeds


def _split_model(elem: int) -> onnx.ModelProto:
    nodes = []
    data = "x"
    if elem != _F:
        nodes.append(oh.make_node("Cast", ["x"], ["x_cast"], to=elem))
        data = "x_cast"
    nodes.append(oh.make_node("SplitToSequence", [data], ["parts"], name="split", axis=1))
    parts = oh.make_tensor_sequence_value_info("parts", elem, None)
    return make_model(nodes, [_info("x", _F, [2, 3, 4])], [parts], 24)


CASES += [
    AdapterCase(
        "TopK", 24, "float_kept", lambda: _topk_model(_F, [3, 7]), feeds=_topk_feeds((3, 7), 4)
    ),
    AdapterCase(
        "TopK",
        24,
        "bf16_largest_sorted",
        lambda: _topk_model(TensorProto.BFLOAT16, [3, 7]),
        feeds=_topk_feeds((3, 7), 5),
    ),
    AdapterCase(
        "TopK",
        24,
        "bf16_smallest_axis0",
        lambda: _topk_model(TensorProto.BFLOAT16, [6, 4], axis=0, largest=0),
        feeds=_topk_feeds((6, 4), 3),
    ),
    AdapterCase("SplitToSequence", 24, "float_kept", lambda: _split_model(_F)),
    AdapterCase(
        "SplitToSequence",
        24,
        "bf16_refused",
        lambda: _split_model(TensorProto.BFLOAT16),
        refuse=r"node 'split' \(SplitToSequence-24.*BFLOAT16.*seq\(tensor\(bfloat16\)\)",
    ),
]


# -- Unchanged (RMSNormalization) and derived (Reshape) steps ------------------------------


def _rms_model() -> onnx.ModelProto:
    node = oh.make_node(
        "RMSNormalization", ["x", "scale"], ["y"], name="rms", axis=-1, epsilon=1e-5
    )
    return make_model(
        [node],
        [_info("x", _F, [2, 3, 8]), _info("scale", _F, [8])],
        [_info("y", _F, [2, 3, 8])],
        24,
    )


def _reshape_model(elem: int) -> onnx.ModelProto:
    node = oh.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")
    shape = onnx.numpy_helper.from_array(np.array([3, 4], dtype=np.int64), "shape")
    return make_model(
        [node], [_info("x", elem, [2, 6])], [_info("y", elem, [3, 4])], 24, initializers=[shape]
    )


CASES += [
    AdapterCase("RMSNormalization", 24, "unchanged_since_23", _rms_model),
    AdapterCase("Reshape", 24, "float_derived_rule", lambda: _reshape_model(_F)),
    AdapterCase(
        "Reshape",
        24,
        "float8e8m0_refused",
        lambda: _reshape_model(TensorProto.FLOAT8E8M0),
        refuse=r"node 'reshape' \(Reshape-24.*input 'x' is FLOAT8E8M0, which Reshape-23 "
        r"does not allow",
    ),
]
