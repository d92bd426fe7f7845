"""Cases for the 27 -> 26 adapters (CausalConvWithState, LinearAttention, Range).

Run by test_registry_cases.py.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto

from tests.harness import AdapterCase, Feeds, make_model

_N, _C, _L, _K = 2, 4, 5, 3


def _causal_conv_model(
    *,
    bias: bool = False,
    past: bool = False,
    dtype: int = TensorProto.FLOAT,
    channels: int | str = _C,
    **attrs: str,
) -> onnx.ModelProto:
    inputs = [
        oh.make_tensor_value_info("x", dtype, [_N, channels, _L]),
        oh.make_tensor_value_info("w", dtype, [channels, 1, _K]),
    ]
    names = ["x", "w"]
    if bias:
        inputs.append(oh.make_tensor_value_info("b", dtype, [_C]))
        names.append("b")
    if past:
        if not bias:
            names.append("")
        inputs.append(oh.make_tensor_value_info("past", dtype, [_N, _C, _K - 1]))
        names.append("past")
    node = oh.make_node("CausalConvWithState", names, ["y", "state"], name="causal_conv", **attrs)
    return make_model(
        [node],
        inputs,
        [
            oh.make_tensor_value_info("y", dtype, [_N, channels, _L]),
            oh.make_tensor_value_info("state", dtype, [_N, channels, _K - 1]),
        ],
        27,
    )


def _linear_attention_model(
    rule: str = "gated_delta",
    *,
    steps: int | None = 3,
    q_heads: int = 2,
    kv_heads: int = 2,
    past: bool = True,
    per_key_decay: bool = False,
    dtype: int = TensorProto.FLOAT,
    **attrs: float,
) -> onnx.ModelProto:
    b, d_k, d_v = 2, 4, 3
    t: int | str = "T" if steps is None else steps
    names = ["q", "k", "v", "", "", ""]
    inputs = [
        oh.make_tensor_value_info("q", dtype, [b, t, q_heads * d_k]),
        oh.make_tensor_value_info("k", dtype, [b, t, kv_heads * d_k]),
        oh.make_tensor_value_info("v", dtype, [b, t, kv_heads * d_v]),
    ]
    if past:
        names[3] = "state"
        inputs.append(oh.make_tensor_value_info("state", dtype, [b, kv_heads, d_k, d_v]))
    if rule in ("gated", "gated_delta"):
        names[4] = "decay"
        decay_dim = kv_heads * d_k if per_key_decay else kv_heads
        inputs.append(oh.make_tensor_value_info("decay", dtype, [b, t, decay_dim]))
    if rule in ("delta", "gated_delta"):
        names[5] = "beta"
        inputs.append(oh.make_tensor_value_info("beta", dtype, [b, t, kv_heads]))
    while not names[-1]:
        names.pop()
    node = oh.make_node(
        "LinearAttention",
        names,
        ["y", "new_state"],
        name="linear_attention",
        q_num_heads=q_heads,
        kv_num_heads=kv_heads,
        update_rule=rule,
        **attrs,
    )
    return make_model(
        [node],
        inputs,
        [
            oh.make_tensor_value_info("y", dtype, [b, t, q_heads * d_v]),
            oh.make_tensor_value_info("new_state", dtype, [b, kv_heads, d_k, d_v]),
        ],
        27,
    )


def _linear_attention_feeds(rng: np.random.Generator, model: onnx.ModelProto) -> Feeds:
    """Random q/k/v/state; decay in log space (negative), beta in (0, 1)."""
    feeds: Feeds = {}
    for value in model.graph.input:
        shape = [d.dim_value or 3 for d in value.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        if value.name == "decay":
            data = -rng.uniform(0.05, 1.0, size=shape)
        elif value.name == "beta":
            data = rng.uniform(0.1, 0.9, size=shape)
        else:
            data = rng.standard_normal(shape) * 0.5
        feeds[value.name] = data.astype(dtype)
    return feeds


def _la_case(name: str, target: int | None = None, rtol: float = 1e-5, **kwargs: object):
    def build() -> onnx.ModelProto:
        return _linear_attention_model(**kwargs)  # type: ignore[arg-type]

    return AdapterCase(
        "LinearAttention",
        27,
        name,
        build,
        feeds=lambda rng: _linear_attention_feeds(rng, build()),
        target=target,
        rtol=rtol,
        atol=rtol,
    )


def _range_model(
    dtype: int, *, via: int | None = None, stash_type: int | None = None
) -> onnx.ModelProto:
    """Range over scalar inputs; with ``via``, inputs and output are Cast to/from ``via``."""
    attrs = {} if stash_type is None else {"stash_type": stash_type}
    names = ["start", "limit", "delta"]
    nodes = []
    if via is not None:
        nodes += [oh.make_node("Cast", [n], [f"{n}_v"], to=via) for n in names]
        names = [f"{n}_v" for n in names]
    out = "y" if via is None else "y_v"
    nodes.append(oh.make_node("Range", names, [out], name="range", **attrs))
    if via is not None:
        nodes.append(oh.make_node("Cast", ["y_v"], ["y"], to=dtype))
    return make_model(
        nodes,
        [oh.make_tensor_value_info(n, dtype, []) for n in ("start", "limit", "delta")],
        [oh.make_tensor_value_info("y", dtype, [None])],
        27,
    )


def _range_feeds(start: float, limit: float, delta: float, dtype: type):
    def feeds(rng: np.random.Generator) -> Feeds:
        return {
            "start": np.array(start, dtype=dtype),
            "limit": np.array(limit, dtype=dtype),
            "delta": np.array(delta, dtype=dtype),
        }

    return feeds


_F16, _BF16 = TensorProto.FLOAT16, TensorProto.BFLOAT16

CASES: list[AdapterCase] = [
    AdapterCase("CausalConvWithState", 27, "no_state", lambda: _causal_conv_model()),
    AdapterCase(
        "CausalConvWithState",
        27,
        "bias_past_silu",
        lambda: _causal_conv_model(bias=True, past=True, activation="silu"),
        rtol=1e-5,
        atol=1e-6,
    ),
    AdapterCase(
        "CausalConvWithState",
        27,
        "past_swish_to_opset_18",
        lambda: _causal_conv_model(past=True, activation="swish"),
        target=18,
        rtol=1e-5,
        atol=1e-6,
    ),
    AdapterCase(
        "CausalConvWithState",
        27,
        "float16_bias",
        lambda: _causal_conv_model(bias=True, dtype=_F16),
        rtol=1e-3,
        atol=1e-3,
    ),
    AdapterCase(
        "CausalConvWithState",
        27,
        "dynamic_channels_refused",
        lambda: _causal_conv_model(channels="C"),
        refuse=r"node 'causal_conv' \(CausalConvWithState-27.*channel count is not static",
    ),
    _la_case("gated_delta_prefill_t3"),
    _la_case("gated_delta_decode_t1", steps=1),
    _la_case("linear_no_past", rule="linear", past=False),
    _la_case("gated_per_key_decay_gqa", rule="gated", per_key_decay=True, q_heads=4),
    _la_case("delta_scale_to_opset_18", rule="delta", target=18, scale=0.25),
    _la_case("float16_decode", steps=1, dtype=TensorProto.FLOAT16, rtol=2e-3),
    AdapterCase(
        "LinearAttention",
        27,
        "dynamic_sequence_refused",
        lambda: _linear_attention_model(steps=None),
        refuse=r"node 'linear_attention' \(LinearAttention-27.*unrolled only for a static "
        r"sequence length",
    ),
    AdapterCase(
        "Range",
        27,
        "int64",
        lambda: _range_model(TensorProto.INT64),
        feeds=_range_feeds(-3, 17, 4, np.int64),
    ),
    AdapterCase(
        "Range",
        27,
        "float_stash_type_dropped",
        lambda: _range_model(TensorProto.FLOAT, stash_type=TensorProto.DOUBLE),
        feeds=_range_feeds(0.5, 4.0, 0.25, np.float32),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "Range",
        27,
        "float16_default_stash",
        lambda: _range_model(_F16),
        feeds=_range_feeds(-2.0, 3.0, 0.125, np.float16),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "Range",
        27,
        "float16_large_values",
        lambda: _range_model(_F16),
        feeds=_range_feeds(2000.0, 2100.0, 3.0, np.float16),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "Range",
        27,
        "float16_stash_double",
        lambda: _range_model(_F16, stash_type=TensorProto.DOUBLE),
        feeds=_range_feeds(10.0, -4.0, -1.5, np.float16),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "Range",
        27,
        "float16_stash_double_count_needs_double",
        lambda: _range_model(_F16, stash_type=TensorProto.DOUBLE),
        # limit - start = 2048 + 2**-13 is exact in double (2049 elements) but rounds
        # to 2048 in float.
        feeds=_range_feeds(-(2.0**-13), 2048.0, 1.0, np.float16),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "Range",
        27,
        "bfloat16_via_cast",
        lambda: _range_model(TensorProto.FLOAT, via=_BF16),
        feeds=_range_feeds(-8.0, 8.0, 0.5, np.float32),
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "Range",
        27,
        "float16_to_opset_18",
        lambda: _range_model(_F16),
        feeds=_range_feeds(1.0, 9.0, 2.0, np.float16),
        target=18,
        rtol=0.0,
        atol=0.0,
    ),
    AdapterCase(
        "Range",
        27,
        "float16_stash_float16_refused",
        lambda: _range_model(_F16, stash_type=_F16),
        refuse=r"node 'range' \(Range-27.*FLOAT16 with stash_type=FLOAT16",
    ),
]
