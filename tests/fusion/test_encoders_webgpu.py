"""Mask-free encoders optimized for the real WebGPU EP: ViT- and Whisper-encoder-style.

Tiny random-init exports with a dynamic batch (tests/encoder_models.py): ViT (17 tokens;
transformers builds a constant all-true mask for it) and the Whisper encoder (40 tokens; no
mask; at 16 tokens it fuses as ViT does, left out to keep this file under a minute). ``optimize --ep webgpu``:

- fuses each residual ``Add`` + ``LayerNormalization`` into ``SkipLayerNormalization`` and
  each bias + exact Gelu into ``BiasGelu``, verified on the CPU EP and on WebGPU;
- fuses the attention into ``MultiHeadAttention`` below 32 tokens (ViT's constant mask read
  as no mask), and drops that fusion at 40 tokens with the figure, where lavapipe's kernel
  is wrong (docs/ep.md); the unfused attention then runs on WebGPU as plain ops;
- leaves no Memcpy and at most 2 CPU nodes (shape Concats) on WebGPU, where the exports
  have 8-9 Memcpy (ai.onnx ``Attention`` on the CPU), and the optimized model on WebGPU
  equals the torch model at every position of a batch of 3.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.pipeline import OptimizeForEpPass, OptimizeResult
from tests.e2e.helpers import run_on_webgpu
from tests.encoder_models import LAYERS, encoder_export, encoder_inputs, encoder_outputs
from tests.fusion import WEBGPU_EXPORT_MARKS

pytestmark = WEBGPU_EXPORT_MARKS

CASES = [("vit", 17), ("whisper_encoder", 40)]  # whisper_encoder at 16 tokens fuses as ViT does
MAX_MEMCPY = 0
MAX_CPU_NODES = 2


@functools.cache
def _optimized(kind: str, tokens: int) -> tuple[OptimizeResult, onnx.ModelProto]:
    model = ir.from_proto(encoder_export(kind, tokens))
    result = OptimizeForEpPass("webgpu")(model)
    assert isinstance(result, OptimizeResult)
    return result, ir.to_proto(model)


@pytest.mark.parametrize(("kind", "tokens"), CASES)
def test_encoder_fusions_are_verified_on_webgpu(kind: str, tokens: int) -> None:
    result, _ = _optimized(kind, tokens)
    records = {f.pattern: f for f in result.fusions}
    for pattern, count in (("skip_layer_normalization", 2 * LAYERS), ("bias_gelu", LAYERS)):
        record = records[pattern]
        assert record.kept and record.count == count, record.summary()
        assert [c["ep"] for c in record.checks] == [
            "CPUExecutionProvider",
            "WebGpuExecutionProvider",
        ]
    attention = records["multi_head_attention"]
    assert attention.count == LAYERS and not attention.refused, attention.summary()
    if tokens < 32:
        assert attention.kept, attention.summary()
    else:  # lavapipe's MultiHeadAttention from 32 tokens on
        assert not attention.kept
        assert "differ on WebGpuExecutionProvider" in (attention.reason or "")


@pytest.mark.parametrize(("kind", "tokens"), CASES)
def test_encoder_runs_on_webgpu_without_memcpy_and_equals_torch(kind: str, tokens: int) -> None:
    _, optimized = _optimized(kind, tokens)
    feeds = encoder_inputs(kind, tokens, batch=3, seed=1)
    run = run_on_webgpu(optimized, feeds)
    fused = {n.op_type for n in run.ep_nodes if n.domain == "com.microsoft"}
    assert {"SkipLayerNormalization", "BiasGelu"} <= fused
    assert ("MultiHeadAttention" in fused) == (tokens < 32)
    assert run.memcpy <= MAX_MEMCPY and len(run.cpu_nodes) <= MAX_CPU_NODES, run.cpu_summary()
    assert run_on_webgpu(encoder_export(kind, tokens), feeds).memcpy > run.memcpy
    expected = encoder_outputs(kind, tokens, feeds)
    np.testing.assert_allclose(run.outputs[0], expected, rtol=1e-4, atol=1e-4)
