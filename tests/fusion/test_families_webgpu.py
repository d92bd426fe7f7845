"""Other families than the Llama-style decoders, optimized for the real WebGPU EP.

Tiny random-init GPT-2 (LayerNorm, learned positions, no rotary, gelu_new written out),
StableLM (LayerNorm, partial rotary) and BERT (a bidirectional encoder with a padding
mask, exact Gelu) exports with dynamic batch and sequence (tests/torch_models.py
``family_export``):

- each residual ``Add`` + ``LayerNormalization`` becomes ``SkipLayerNormalization``, GPT-2's
  tanh Gelu ``FastGelu`` and BERT's bias + Gelu ``BiasGelu``, BERT's position and
  token-type lookups by constant indices float ops (fusion.embedding), verified on the CPU
  EP and on WebGPU; GPT-2's and StableLM's position ids become int32 and GPT-2's token
  lookup gathers before its Reshape (fusion.positions). The optimized model on WebGPU
  equals the torch model at every position of a batch of two with a right-padded and a
  left-padded row (the reference is torch's: ORT's CPU EP refuses StableLM's opset-23
  export at batch 2, its RotaryEmbedding's caches having batch 1), moves no more Memcpy
  than the export and stays within its family's budget of Memcpy and CPU nodes: BERT 1
  and 6 (the export has 21 and 31), GPT-2 1 and 10 (21 and 35), StableLM 1 and 12 (23 and
  35; 11 at opset 23); GPT-2's and StableLM's at opsets 24 and 25 too;
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
from tests.e2e.helpers import EpRun, run_on_webgpu
from tests.fusion import WEBGPU_EXPORT_MARKS
from tests.torch_models import LLM_LAYERS, family_export, family_outputs

pytestmark = WEBGPU_EXPORT_MARKS

EXPECTED = {
    "gpt2": {
        "skip_layer_normalization": 2 * LLM_LAYERS,
        "fast_gelu": LLM_LAYERS,
        "int32_positions": 1,
        "gather_before_reshape": 1,
    },
    "stablelm": {"skip_layer_normalization": 2 * LLM_LAYERS, "int32_positions": 1},
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
GPT2_BUDGET = (1, 10)
"""GPT-2 on WebGPU after optimize: Memcpy (the mask's Cast to bool) and CPU nodes (2 Shape
of the mask, the Squeeze and int32 Cast of the sequence length, 5 shape Concats, that
Cast); the export has 21 and 35 (the learned positions' int64 Range and the token ids'
int64 Reshape each copied over before fusion.positions)."""
STABLELM_BUDGET = (1, 12)
"""StableLM on WebGPU after optimize: Memcpy (the mask's Cast) and CPU nodes (2 Shape, the
Squeeze and int32 Cast of the sequence length, 6 shape Concats, that Cast: 11 at opset 23;
at 24 and 25, where torch writes the rotary out, also a Gather ORT makes of the attention
bias's ``Shape`` of the rotated query); the export has 23 and 35."""
BUDGETS = {"bert": BERT_BUDGET, "gpt2": GPT2_BUDGET, "stablelm": STABLELM_BUDGET}


@functools.cache
def _optimized(kind: str, opset: int = 23) -> tuple[OptimizeResult, onnx.ModelProto]:
    model = ir.from_proto(family_export(kind, opset))
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
        _assert_within(BUDGETS[kind], on_webgpu)


def _assert_within(budget: tuple[int, int], run: EpRun) -> None:
    memcpy, cpu = budget
    assert run.memcpy <= memcpy and len(run.cpu_nodes) <= cpu, (run.memcpy, run.cpu_summary())


@pytest.mark.parametrize("opset", [24, 25])
@pytest.mark.parametrize("kind", ["gpt2", "stablelm"])
def test_decoder_budgets_hold_at_opsets_24_and_25(kind: str, opset: int) -> None:
    proto = family_export(kind, opset)
    optimized = _optimized(kind, opset)[1]
    for padding in ("right", "left"):
        feeds = generate_feeds(ir.from_proto(proto).graph.inputs, Sizes(2, 7, 0, padding))
        on_webgpu = run_on_webgpu(optimized, feeds)
        expected = family_outputs(kind, feeds)
        np.testing.assert_allclose(on_webgpu.outputs[0], expected, rtol=1e-3, atol=1e-3)
        _assert_within(BUDGETS[kind], on_webgpu)


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
