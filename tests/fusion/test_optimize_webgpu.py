"""``optimize --ep webgpu`` on tiny decoder exports with dynamic sequence, on the real EP.

The issue-14 targets, measured on the WebGPU plugin EP (lavapipe): at most 2 Memcpy nodes
and at most 12 CPU nodes, outputs within the fusions' tolerance of the original export.
One opset per model keeps CI short (all of 23..25 x Llama/Qwen3/Gemma3 are in
benchmarks/bench_fusion.py); each covers one rotary/normalization form: RMSNormalization-23
and RotaryEmbedding-23 (Qwen3 at 23), Pow/ReduceMean and rotate_half (Llama at 24), Gemma3's
q/k norms at 25 (``gemma3_wide``: its 4096-token sliding window cannot bind, so the
attention is provably causal; tests/torch_models.py) and ``gemma3_w4`` at 24, whose 4-token
window binds at 8 tokens (GroupQueryAttention with ``local_window_size=4`` on the EP).
Models: 4 layers, batch 1. The fusions are kept with ``allow_padding_differences``: WebGPU's
GroupQueryAttention differs from the unfused attention at the padding positions of a
left-padded row (queries that see no key), so by default the pass refuses it there
(test_verify_webgpu.py); every position ``attention_mask`` keeps is equal.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.fusion.evaluate import Sizes, generate_feeds, run_model
from onnxscript_ep_passes.pipeline import OptimizeForEpPass
from tests.e2e.helpers import run_on_webgpu
from tests.fusion import WEBGPU_EXPORT_MARKS
from tests.torch_models import llm_export

pytestmark = WEBGPU_EXPORT_MARKS


@pytest.mark.parametrize(
    ("kind", "opset"),
    [("qwen3", 23), ("llama", 24), ("gemma3_wide", 25), ("gemma3_w4", 24)],
)
def test_optimized_export_runs_on_webgpu_with_few_memcpy(kind: str, opset: int) -> None:
    proto = llm_export(kind, opset)
    model = ir.from_proto(proto)
    feeds = generate_feeds(model.graph.inputs, Sizes(1, 8, 0))
    pipeline = OptimizeForEpPass("webgpu", allow_padding_differences=True)
    pipeline(model)
    if kind == "gemma3_w4":
        gqa = [n for n in model.graph if n.op_type == "GroupQueryAttention"]
        assert [n.attributes.get_int("local_window_size", -1) for n in gqa] == [4] * 4
    kept = {f.pattern: f for f in pipeline.fusions if f.kept}
    assert {"skip_rms_normalization", "group_query_attention"} <= set(kept)
    checked = [c["ep"] for c in kept["group_query_attention"].checks]
    assert checked == ["CPUExecutionProvider", "WebGpuExecutionProvider"]
    run = run_on_webgpu(ir.to_proto(model), feeds)
    assert run.memcpy <= 2, run.cpu_summary()
    assert len(run.cpu_nodes) <= 12, run.cpu_summary()
    (expected,) = run_model(proto, feeds)
    np.testing.assert_allclose(run.outputs[0], expected, rtol=1e-3, atol=1e-3)
