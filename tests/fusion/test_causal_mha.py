"""Causal attention -> MultiHeadAttention (:mod:`onnxscript_ep_passes.fusion.causal_mha`).

Tiny random-init transformers decoders (tests/torch_models.py, grouped KV heads: 4 query
heads, 2 KV heads) fused with :func:`fuse_causal_attention_to_mha` and run in real
sessions: the fused model equals the unfused one on ORT's CPU EP at every position
(right- and left-padded rows, prompts below and above 32 tokens, a past with a KV cache,
around Gemma3's sliding window) -- on the CPU EP and on the real WebGPU EP, where the
padded-heads form runs (the plain one differs there on long prompts: its flash path on
lavapipe). Through ``optimize --ep webgpu`` a transformers-5.x Llama export gets the
padded-heads fusion (GroupQueryAttention and the plain form dropped by the verification),
with at most 2 Memcpy and 12 CPU nodes.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common_passes
import onnxruntime as ort
import pytest

from onnxscript_ep_passes.fusion.causal_mha import fuse_causal_attention_to_mha
from onnxscript_ep_passes.fusion.evaluate import Sizes, generate_feeds
from onnxscript_ep_passes.pipeline import OptimizeForEpPass, OptimizeResult
from tests.e2e.helpers import run_on_webgpu
from tests.fusion import WEBGPU_EXPORT_MARKS
from tests.torch_models import LLM_LAYERS, family_export, llm_export

pytestmark = WEBGPU_EXPORT_MARKS

PROMPTS = [Sizes(2, 40, 0, "right"), Sizes(2, 40, 0, "left"), Sizes(2, 7, 0, "left")]
WITH_PAST = [Sizes(2, 3, 5, "right"), Sizes(2, 1, 40, "left"), Sizes(1, 33, 4, "none")]


def _fused(proto: onnx.ModelProto, pad_heads: bool) -> tuple[onnx.ModelProto, int]:
    model = ir.from_proto(proto)
    common_passes.ShapeInferencePass()(model)
    result = fuse_causal_attention_to_mha(model, pad_heads=pad_heads)
    assert not result.refused, result.refused
    fused = ir.to_proto(model)
    onnx.checker.check_model(fused, full_check=True)
    return fused, result.fused


def _cpu(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(x) for x in session.run(None, feeds)]


def _check_every_position(
    proto: onnx.ModelProto, fused: onnx.ModelProto, sizes: list[Sizes], *, webgpu: bool
) -> None:
    for size in sizes:
        feeds = generate_feeds(ir.from_proto(proto).graph.inputs, size)
        expected = _cpu(proto, feeds)
        runs = [("CPU", _cpu(fused, feeds))]
        if webgpu:
            on_webgpu = run_on_webgpu(fused, feeds)
            mha = [n for n in on_webgpu.nodes if n.op_type == "MultiHeadAttention"]
            assert mha and all(n.provider == "WebGpuExecutionProvider" for n in mha)
            runs.append(("WebGPU", on_webgpu.outputs))
        for ep, actual in runs:
            for name, a, e in zip([o.name for o in proto.graph.output], actual, expected):
                np.testing.assert_allclose(
                    a, e, rtol=1e-4, atol=1e-4, err_msg=f"{ep} {name} {size}"
                )


@pytest.mark.parametrize("kind", ["llama", "gemma3_w4"])
def test_padded_heads_equal_everywhere_on_cpu_and_webgpu(kind: str) -> None:
    proto = llm_export(kind, 24)
    fused, count = _fused(proto, pad_heads=True)
    assert count == LLM_LAYERS
    ops = {n.op_type for n in fused.graph.node}
    assert "MultiHeadAttention" in ops and "Attention" not in ops
    _check_every_position(proto, fused, PROMPTS, webgpu=True)


def test_kv_cache_stays_outside_and_every_position_holds() -> None:
    proto = llm_export("llama", 24, kv_cache=True)
    fused, count = _fused(proto, pad_heads=True)
    assert count == LLM_LAYERS
    assert [o.name for o in fused.graph.output] == [o.name for o in proto.graph.output]
    _check_every_position(proto, fused, WITH_PAST, webgpu=True)


def test_plain_form_is_exact_on_cpu() -> None:
    proto = llm_export("qwen3", 24)
    fused, _ = _fused(proto, pad_heads=False)
    assert not any(n.op_type == "Pad" for n in fused.graph.node)
    _check_every_position(proto, fused, PROMPTS, webgpu=False)


def test_bidirectional_attention_is_refused() -> None:
    model = ir.from_proto(family_export("bert", 23))
    common_passes.ShapeInferencePass()(model)
    result = fuse_causal_attention_to_mha(model)
    assert result.fused == 0 and len(result.refused) == LLM_LAYERS
    assert all("causal" in reason for reason in result.refused.values()), result.refused


@functools.cache
def _optimized() -> tuple[OptimizeResult, onnx.ModelProto]:
    model = ir.from_proto(llm_export("llama", 24))
    result = OptimizeForEpPass("webgpu")(model)
    assert isinstance(result, OptimizeResult)
    return result, ir.to_proto(model)


def test_optimize_webgpu_falls_back_to_causal_mha() -> None:
    result, optimized = _optimized()
    records = {f.pattern: f for f in result.fusions}
    kept = records["causal_multi_head_attention_padded_heads"]
    assert kept.kept and kept.count == LLM_LAYERS, kept.summary()
    assert [c["ep"] for c in kept.checks] == ["CPUExecutionProvider", "WebGpuExecutionProvider"]
    for dropped in ("group_query_attention", "causal_multi_head_attention"):
        record = records[dropped]
        assert not record.kept and "WebGpuExecutionProvider" in (record.reason or "")
    proto = llm_export("llama", 24)
    for size in (Sizes(2, 40, 0, "right"), Sizes(2, 7, 0, "left")):
        feeds = generate_feeds(ir.from_proto(proto).graph.inputs, size)
        on_webgpu = run_on_webgpu(optimized, feeds)
        np.testing.assert_allclose(on_webgpu.outputs[0], _cpu(proto, feeds)[0], atol=1e-3)
        cpu_nodes = [n for n in on_webgpu.nodes if n.provider == "CPUExecutionProvider"]
        assert on_webgpu.memcpy <= 2 and len(cpu_nodes) <= 12, (on_webgpu.memcpy, cpu_nodes)
