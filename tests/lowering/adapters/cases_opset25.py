"""Cases for the 25 -> 24 adapters (Attention's sliding window).

Run by test_registry_cases.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto

from tests.harness import AdapterCase, Feeds, make_model

_B, _HQ, _HKV, _SQ, _SKV, _D, _PAST = 2, 4, 2, 4, 4, 8, 3


def _attention_model(
    *,
    mask: tuple[int, Sequence[int]] | None = None,
    past: bool = False,
    nonpad: bool = False,
    three_d: bool = False,
    outputs: int = 1,
    float_type: int = TensorProto.FLOAT,
    **attrs: object,
) -> onnx.ModelProto:
    """One Attention-25 node; GQA (4 query heads over 2 kv heads)."""
    if three_d:
        q_shape = [_B, _SQ, _HQ * _D]
        kv_shape = [_B, _SKV, _HKV * _D]
        attrs = {"q_num_heads": _HQ, "kv_num_heads": _HKV, **attrs}
        y_shape = [_B, _SQ, _HQ * _D]
    else:
        q_shape = [_B, _HQ, _SQ, _D]
        kv_shape = [_B, _HKV, _SKV, _D]
        y_shape = [_B, _HQ, _SQ, _D]
    total = _SKV + (_PAST if past else 0)
    inputs = [
        oh.make_tensor_value_info("Q", float_type, q_shape),
        oh.make_tensor_value_info("K", float_type, kv_shape),
        oh.make_tensor_value_info("V", float_type, kv_shape),
    ]
    names = ["Q", "K", "V", "", "", "", ""]
    if mask is not None:
        inputs.append(oh.make_tensor_value_info("attn_mask", mask[0], list(mask[1])))
        names[3] = "attn_mask"
    if past:
        past_shape = [_B, _HKV, _PAST, _D]
        inputs.append(oh.make_tensor_value_info("past_key", float_type, past_shape))
        inputs.append(oh.make_tensor_value_info("past_value", float_type, past_shape))
        names[4], names[5] = "past_key", "past_value"
    if nonpad:
        inputs.append(oh.make_tensor_value_info("nonpad_kv_seqlen", TensorProto.INT64, [_B]))
        names[6] = "nonpad_kv_seqlen"
    while names and not names[-1]:
        names.pop()
    out_names = ["Y", "present_key", "present_value", "qk"][:outputs]
    out_infos = [oh.make_tensor_value_info("Y", float_type, y_shape)]
    if outputs > 1:
        present = [_B, _HKV, total, _D]
        out_infos.append(oh.make_tensor_value_info("present_key", float_type, present))
        out_infos.append(oh.make_tensor_value_info("present_value", float_type, present))
    if outputs > 3:
        out_infos.append(oh.make_tensor_value_info("qk", float_type, [_B, _HQ, _SQ, total]))
    if outputs == 2:
        out_names = ["Y", "", "", "qk"]
        out_infos = [
            out_infos[0],
            oh.make_tensor_value_info("qk", float_type, [_B, _HQ, _SQ, total]),
        ]
    node = oh.make_node("Attention", names, out_names, name="attention", **attrs)
    return make_model([node], inputs, out_infos, 25)


def _nonpad_feeds(lengths: Sequence[int]):
    def feeds(rng: np.random.Generator) -> Feeds:
        return {
            "Q": rng.standard_normal([_B, _HQ, _SQ, _D]).astype(np.float32),
            "K": rng.standard_normal([_B, _HKV, _SKV, _D]).astype(np.float32),
            "V": rng.standard_normal([_B, _HKV, _SKV, _D]).astype(np.float32),
            "nonpad_kv_seqlen": np.array(lengths, dtype=np.int64),
        }

    return feeds


def _float_mask_feeds(shape: Sequence[int], past: bool):
    def feeds(rng: np.random.Generator) -> Feeds:
        result: Feeds = {
            "Q": rng.standard_normal([_B, _HQ, _SQ, _D]).astype(np.float32),
            "K": rng.standard_normal([_B, _HKV, _SKV, _D]).astype(np.float32),
            "V": rng.standard_normal([_B, _HKV, _SKV, _D]).astype(np.float32),
        }
        mask = rng.standard_normal(shape).astype(np.float32)
        mask[rng.random(shape) < 0.2] = -np.inf
        result["attn_mask"] = mask
        if past:
            result["past_key"] = rng.standard_normal([_B, _HKV, _PAST, _D]).astype(np.float32)
            result["past_value"] = rng.standard_normal([_B, _HKV, _PAST, _D]).astype(np.float32)
        return result

    return feeds


_BOOL = TensorProto.BOOL
_FLOAT = TensorProto.FLOAT

CASES: list[AdapterCase] = [
    AdapterCase("Attention", 25, "no_window", lambda: _attention_model()),
    AdapterCase(
        "Attention",
        25,
        "window_attrs_at_default",
        lambda: _attention_model(left_window_size=-1, right_window_size=-1, is_causal=1),
    ),
    AdapterCase("Attention", 25, "left2", lambda: _attention_model(left_window_size=2)),
    AdapterCase("Attention", 25, "right1", lambda: _attention_model(right_window_size=1)),
    AdapterCase(
        "Attention",
        25,
        "left0_right0",
        lambda: _attention_model(left_window_size=0, right_window_size=0),
    ),
    AdapterCase(
        "Attention",
        25,
        "left1_right2",
        lambda: _attention_model(left_window_size=1, right_window_size=2),
    ),
    AdapterCase(
        "Attention",
        25,
        "causal_left1",
        lambda: _attention_model(left_window_size=1, is_causal=1),
    ),
    AdapterCase(
        "Attention",
        25,
        "causal_left2_right1",
        lambda: _attention_model(left_window_size=2, right_window_size=1, is_causal=1),
    ),
    AdapterCase(
        "Attention",
        25,
        "past_left2_causal",
        lambda: _attention_model(past=True, outputs=3, left_window_size=2, is_causal=1),
    ),
    AdapterCase(
        "Attention",
        25,
        "past_left1_right1",
        lambda: _attention_model(past=True, outputs=3, left_window_size=1, right_window_size=1),
    ),
    AdapterCase(
        "Attention",
        25,
        "bool_mask_2d_causal_left1",
        lambda: _attention_model(mask=(_BOOL, [_SQ, _SKV]), left_window_size=1, is_causal=1),
    ),
    AdapterCase(
        "Attention",
        25,
        "bool_mask_4d_right0",
        lambda: _attention_model(mask=(_BOOL, [_B, 1, _SQ, _SKV]), right_window_size=0),
    ),
    AdapterCase(
        "Attention",
        25,
        "bool_mask_short_past_left2",
        lambda: _attention_model(
            mask=(_BOOL, [_SQ, _SKV + 1]), past=True, outputs=3, left_window_size=2
        ),
    ),
    AdapterCase(
        "Attention",
        25,
        "float_mask_past_left1_qk_mode2",
        lambda: _attention_model(
            mask=(_FLOAT, [_B, _HQ, _SQ, _SKV + _PAST]),
            past=True,
            outputs=4,
            left_window_size=1,
            qk_matmul_output_mode=2,
        ),
        feeds=_float_mask_feeds([_B, _HQ, _SQ, _SKV + _PAST], past=True),
    ),
    AdapterCase(
        "Attention",
        25,
        "float_mask_short_causal_left1_qk_mode3",
        lambda: _attention_model(
            mask=(_FLOAT, [1, _SQ, _SKV - 1]),
            outputs=2,
            right_window_size=0,
            left_window_size=1,
            is_causal=1,
            qk_matmul_output_mode=3,
        ),
        feeds=_float_mask_feeds([1, _SQ, _SKV - 1], past=False),
    ),
    AdapterCase(
        "Attention",
        25,
        "fp16_float_mask_left1_right1",
        lambda: _attention_model(
            mask=(TensorProto.FLOAT16, [_SQ, _SKV]),
            float_type=TensorProto.FLOAT16,
            left_window_size=1,
            right_window_size=1,
        ),
        rtol=1e-3,
        atol=1e-3,
    ),
    AdapterCase(
        "Attention",
        25,
        "3d_gqa_softcap_left1",
        lambda: _attention_model(three_d=True, left_window_size=1, softcap=2.0),
    ),
    AdapterCase(
        "Attention",
        25,
        "nonpad_left1_causal",
        lambda: _attention_model(nonpad=True, left_window_size=1, is_causal=1),
        feeds=_nonpad_feeds([4, 3]),
    ),
    AdapterCase(
        "Attention",
        25,
        "nonpad_short_rows_fully_masked",
        lambda: _attention_model(nonpad=True, left_window_size=0, right_window_size=0),
        feeds=_nonpad_feeds([2, 4]),
    ),
    # Further down, through the Attention-24 (nonpad_kv_seqlen) and -23 adapters.
    AdapterCase(
        "Attention",
        25,
        "past_left2_causal_to_opset_23",
        lambda: _attention_model(past=True, outputs=3, left_window_size=2, is_causal=1),
        target=23,
    ),
    AdapterCase(
        "Attention",
        25,
        "nonpad_left1_causal_to_opset_23",
        lambda: _attention_model(nonpad=True, left_window_size=1, is_causal=1),
        feeds=_nonpad_feeds([4, 3]),
        target=23,
    ),
    AdapterCase(
        "Attention",
        25,
        "bool_mask_short_past_left2_to_opset_18",
        lambda: _attention_model(
            mask=(_BOOL, [_SQ, _SKV + 1]), past=True, outputs=3, left_window_size=2
        ),
        target=18,
    ),
    AdapterCase(
        "Attention",
        25,
        "int_mask_refused",
        lambda: _attention_model(mask=(TensorProto.INT32, [_SQ, _SKV]), left_window_size=1),
        refuse=r"node 'attention' \(Attention-25.*integer attn_mask",
    ),
    AdapterCase(
        "Attention",
        25,
        "past_with_nonpad_refused",
        lambda: _attention_model(past=True, nonpad=True, right_window_size=1),
        refuse=r"node 'attention' \(Attention-25.*both past_key and nonpad_kv_seqlen",
    ),
]
