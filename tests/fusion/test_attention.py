"""fuse_attention_to_gqa on real torch exports and on hand-built graphs it must refuse."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common_passes
import pytest
from onnx import TensorProto, helper

from onnxscript_ep_passes.fusion.attention import fuse_attention_to_gqa
from onnxscript_ep_passes.fusion.evaluate import Sizes, generate_feeds, run_model
from tests.torch_models import llm_export

torch_only = [pytest.mark.torch, pytest.mark.filterwarnings("ignore::FutureWarning")]


def _ops(model: ir.Model) -> collections.Counter[str]:
    return collections.Counter(n.op_type for n in model.graph)


def _fused(proto: onnx.ModelProto) -> tuple[ir.Model, int, dict[str, str]]:
    model = ir.from_proto(proto)
    common_passes.ShapeInferencePass()(model)
    result = fuse_attention_to_gqa(model, max_length=128)
    return model, result.fused, result.refused


def _assert_same(original: onnx.ModelProto, fused: ir.Model, sizes: Sizes) -> None:
    feeds = generate_feeds(ir.from_proto(original).graph.inputs, sizes)
    expected = run_model(original, feeds)
    actual = run_model(ir.to_proto(fused), feeds)
    assert [o.name for o in fused.graph.outputs] == [o.name for o in original.graph.output]
    for e, a in zip(expected, actual):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("kind", "kv"), [("llama", False), ("qwen3", True)], ids=["llama-prefill", "qwen3-kv_cache"]
)
@pytest.mark.torch
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_decoder_attention_becomes_gqa_with_rotary_inside(kind: str, kv: bool) -> None:
    # the exports the e2e tests use too (one torch export fewer in CI)
    proto = llm_export(kind, 24, kv_cache=kv)
    model, fused, refused = _fused(proto)
    assert fused == 4 and not refused, refused
    ops = _ops(model)
    assert ops["GroupQueryAttention"] == 4 and ops["Attention"] == 0
    # the rotary subgraph (Cos/Sin) and the mask subgraph are gone: caches are initializers
    assert ops["Cos"] == 0 and ops["LessOrEqual"] == 0 and ops["GatherND"] == 0
    gqa = next(n for n in model.graph if n.op_type == "GroupQueryAttention")
    assert gqa.attributes.get_int("do_rotary", 0) == 1
    assert gqa.attributes.get_int("num_heads", 0) == 4
    assert gqa.attributes.get_int("kv_num_heads", 0) == 2
    # batch 2 without a past; with one, batch 1 (ORT's GroupQueryAttention refuses
    # batch > 1 with a past and more than one new token)
    _assert_same(proto, model, Sizes(1, 5, 3) if kv else Sizes(2, 8, 0))
    if kv:
        _assert_same(proto, model, Sizes(1, 1, 9))  # one generated token after 9


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_gemma3_sliding_window_becomes_gqa_with_local_window_size() -> None:
    # a 4-token window binds at these sizes (sequences of 10 and 12). The KV-cache export
    # keeps a sliding cache (past sliced to W - 1 tokens): refused by the matcher.
    proto = llm_export("gemma3_w4", 24)
    model, fused, refused = _fused(proto)
    assert fused == 4 and not refused, refused
    windows = [
        n.attributes.get_int("local_window_size", -1)
        for n in model.graph
        if n.op_type == "GroupQueryAttention"
    ]
    assert windows == [4] * 4
    for sizes in (Sizes(1, 10, 0), Sizes(2, 12, 0)):
        _assert_same(proto, model, sizes)


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_gemma3_sliding_kv_cache_is_refused_with_a_reason_naming_it() -> None:
    # Gemma3's sliding layers keep the last W - 1 past tokens: their KV Concat reads a
    # Slice of the past (the export the e2e objective tests build too)
    proto = llm_export("gemma3", 24, kv_cache=True)
    _, fused, refused = _fused(proto)
    assert fused < 4 and refused
    sliced = [r for r in refused.values() if "computed by Slice" in r]
    assert sliced, refused
    assert all("sliding-window cache" in r for r in sliced)


def _attention_model(mask_input: bool, is_causal: int) -> onnx.ModelProto:
    q = helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 4, "s", 16])
    k = helper.make_tensor_value_info("k", TensorProto.FLOAT, [1, 4, "s", 16])
    v = helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 4, "s", 16])
    inputs = [q, k, v]
    names = ["q", "k", "v"]
    if mask_input:
        inputs.append(helper.make_tensor_value_info("m", TensorProto.BOOL, [1, 1, "s", "s"]))
        names.append("m")
    node = helper.make_node("Attention", names, ["y"], is_causal=is_causal)
    graph = helper.make_graph(
        [node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])


@pytest.mark.parametrize(
    ("mask_input", "is_causal", "reason"),
    [
        (False, 0, "every query sees every key (bidirectional attention)"),
        (True, 0, "mask not proven causal: it depends on the values of input 'm'"),
        (True, 1, "both a mask and is_causal"),
    ],
)
def test_attention_without_a_proven_causal_mask_is_refused(
    mask_input: bool, is_causal: int, reason: str
) -> None:
    model, fused, refused = _fused(_attention_model(mask_input, is_causal))
    assert fused == 0
    assert len(refused) == 1 and reason in next(iter(refused.values()))
    assert _ops(model)["Attention"] == 1


def test_causal_attention_without_rotary_is_fused_exactly() -> None:
    proto = _attention_model(False, 1)
    model, fused, refused = _fused(proto)
    assert fused == 1, refused
    gqa = next(n for n in model.graph if n.op_type == "GroupQueryAttention")
    assert gqa.attributes.get_int("do_rotary", 0) == 0
    _assert_same(proto, model, Sizes(1, 6, 0))
