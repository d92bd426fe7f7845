"""``optimize --ep webgpu`` on tiny decoder exports with dynamic sequence, on the real EP.

One opset per model keeps CI short; each covers one rotary/normalization form:
RMSNormalization-23 and RotaryEmbedding-23 (Qwen3 at 23), Pow/ReduceMean and rotate_half
(Llama at 24), Gemma3's q/k norms at 25 (``gemma3_wide``: its 4096-token sliding window
cannot bind, so the attention is provably causal; tests/torch_models.py) and ``gemma3_w4``
at 24, whose 4-token window binds at 8 tokens. Models: 4 layers. All with
``allow_padding_differences`` (WebGPU's GroupQueryAttention differs at the padding
positions of a left-padded row: test_verify_webgpu.py).

What the verification on the real EP (lavapipe) finds:

- ``gemma3_w4`` (a binding window): GroupQueryAttention with ``local_window_size=4`` is
  kept, and the issue-14 targets hold: at most 2 Memcpy nodes and at most 12 CPU nodes,
  outputs equal to the export's;
- the others (no window binds): WebGPU's GroupQueryAttention is wrong for a first prompt
  of 32 tokens or more (0.02 on the logits at 40 tokens, while the export and the
  lowering are exact there), so the attention fusion is dropped with that reason.
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
def test_optimized_export_is_verified_on_webgpu(kind: str, opset: int) -> None:
    proto = llm_export(kind, opset)
    model = ir.from_proto(proto)
    pipeline = OptimizeForEpPass("webgpu", allow_padding_differences=True)
    records = {f.pattern: f for f in pipeline(model).fusions}
    gqa = records["group_query_attention"]
    assert gqa.count == 4
    checked = [c["ep"] for c in gqa.checks]
    assert checked == ["CPUExecutionProvider", "WebGpuExecutionProvider"]
    assert gqa.checks[0]["ok"] and gqa.checks[0]["padded_ok"]  # exact on the CPU EP
    fused = [n for n in model.graph if n.op_type == "GroupQueryAttention"]
    feeds = generate_feeds(model.graph.inputs, Sizes(1, 8, 0))
    run = run_on_webgpu(ir.to_proto(model), feeds)
    if kind == "gemma3_w4":
        assert gqa.kept, gqa.reason
        assert records["skip_rms_normalization"].kept
        assert [n.attributes.get_int("local_window_size", -1) for n in fused] == [4] * 4
        assert run.memcpy <= 2, run.cpu_summary()
        assert len(run.cpu_nodes) <= 12, run.cpu_summary()
    else:
        assert not gqa.kept and not fused
        assert gqa.reason is not None
        assert gqa.reason.startswith("outputs differ on WebGpuExecutionProvider by up to")
        assert "batch 1, 40 tokens" in gqa.reason, gqa.reason
    (expected,) = run_model(proto, feeds)
    np.testing.assert_allclose(run.outputs[0], expected, rtol=1e-3, atol=1e-3)
