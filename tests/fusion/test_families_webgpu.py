"""Other families than the Llama-style decoders, optimized for the real WebGPU EP.

Tiny random-init GPT-2 (LayerNorm, learned positions, no rotary, gelu_new written out),
StableLM (LayerNorm, partial rotary) and BERT (a bidirectional encoder with a padding
mask, exact Gelu) exports with dynamic batch and sequence (tests/torch_models.py
``family_export``):

- each residual ``Add`` + ``LayerNormalization`` becomes ``SkipLayerNormalization``, GPT-2's
  tanh Gelu ``FastGelu`` and BERT's bias + Gelu ``BiasGelu``, BERT's position and
  token-type lookups by constant indices float ops (fusion.embedding), verified on the CPU
  EP and on WebGPU; the optimized model on WebGPU equals the torch model at every position
  of a batch of two with a right-padded and a left-padded row, and moves no more Memcpy
  than the export (BERT: 1 Memcpy and 6 CPU nodes, where the export has 21 and 31; the
  reference is torch's: ORT's CPU EP refuses StableLM's opset-23 export at batch 2, its
  RotaryEmbedding's caches having batch 1);
- GPT-2's causal mask (``attention_mask.view(batch, -1)``) is proven, so the attention
  fusion is tried and, where WebGPU's GroupQueryAttention differs here (lavapipe, a first
  prompt of 40 tokens), dropped with that figure; BERT's bidirectional mask is refused as
  not causal for GroupQueryAttention and proven padding-only for ``MultiHeadAttention``
  (the padding as its ``attention_bias``), which is kept on WebGPU.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.fusion.evaluate import Sizes, generate_feeds
from onnxscript_ep_passes.pipeline import OptimizeForEpPass, OptimizeResult
from tests.e2e.helpers import run_on_webgpu
from tests.fusion import WEBGPU_EXPORT_MARKS
from tests.torch_models import LLM_LAYERS, family_export, family_outputs

pytestmark = WEBGPU_EXPORT_MARKS

EXPECTED = {
    "gpt2": {"skip_layer_normalization": 2 * LLM_LAYERS, "fast_gelu": LLM_LAYERS},
    "stablelm": {"skip_layer_normalization": 2 * LLM_LAYERS},
    "bert": {
        "multi_head_attention": LLM_LAYERS,
        "skip_layer_normalization": 2 * LLM_LAYERS,
        "bias_gelu": LLM_LAYERS,
        "sliced_position_gather": 1,
        "uniform_index_gather": 1,
    },
}
BERT_BUDGET = (1, 6)
"""BERT on WebGPU after optimize: Memcpy (the padding mask's Cast to bool on the CPU) and
CPU nodes (2 Shape, 3 Concat, that Cast); the export has 21 and 31."""


@functools.cache
def _optimized(kind: str) -> tuple[OptimizeResult, onnx.ModelProto]:
    model = ir.from_proto(family_export(kind, 23))
    result = OptimizeForEpPass("webgpu")(model)
    assert isinstance(result, OptimizeResult)
    return result, ir.to_proto(model)


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_layer_norm_and_gelu_fusions_hold_on_webgpu(kind: str) -> None:
    proto = family_export(kind, 23)
    pipeline, optimized = _optimized(kind)
    records = {f.pattern: f for f in pipeline.fusions}
    for pattern, count in EXPECTED[kind].items():
        record = records[pattern]
        assert record.kept and record.count == count, record.summary()
        assert [c["ep"] for c in record.checks] == [
            "CPUExecutionProvider",
            "WebGpuExecutionProvider",
        ]
    fused = {n.op_type for n in optimized.graph.node if n.domain == "com.microsoft"}
    ms_ops = {records[p].op for p in EXPECTED[kind] if records[p].op.startswith("com.microsoft")}
    assert {op.split("::")[1] for op in ms_ops} <= fused
    for padding in ("right", "left"):
        feeds = generate_feeds(ir.from_proto(proto).graph.inputs, Sizes(2, 7, 0, padding))
        expected = family_outputs(kind, feeds)
        on_webgpu = run_on_webgpu(optimized, feeds)
        np.testing.assert_allclose(on_webgpu.outputs[0], expected, rtol=1e-3, atol=1e-3)
        assert on_webgpu.memcpy <= run_on_webgpu(proto, feeds).memcpy
        if kind == "bert":
            counts = (on_webgpu.memcpy, len(on_webgpu.cpu_nodes))
            assert counts <= BERT_BUDGET, (counts, on_webgpu.cpu_summary())


def test_gpt2s_mask_is_proven_and_berts_refused_as_bidirectional() -> None:
    record = next(f for f in _optimized("gpt2")[0].fusions if f.pattern == "group_query_attention")
    assert record.count == LLM_LAYERS and not record.refused, record.summary()
    if not record.kept:  # lavapipe's GroupQueryAttention, a first prompt of 32+ tokens
        assert "differ on WebGpuExecutionProvider" in (record.reason or "")
    record = next(f for f in _optimized("bert")[0].fusions if f.pattern == "group_query_attention")
    assert not record.kept and record.count == 0
    assert all("bidirectional" in why for why in record.refused.values()), record.refused
    record = next(f for f in _optimized("bert")[0].fusions if f.pattern == "multi_head_attention")
    assert record.kept and record.count == LLM_LAYERS, record.summary()
    record = next(f for f in _optimized("gpt2")[0].fusions if f.pattern == "multi_head_attention")
    assert record.count == 0 and all("causal" in why for why in record.refused.values())
