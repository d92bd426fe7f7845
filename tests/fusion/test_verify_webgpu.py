"""Fusions verified on the real WebGPU EP (lavapipe): the sliding-window regression.

A tiny Mistral-style decoder (``mistral_w4``: sliding window 4, dynamic batch and sequence,
tests/torch_models.py). WebGPU's GroupQueryAttention computes something else than the
unfused attention at the padding positions of a left-padded row (queries that see no key):
0.15-0.55 on the logits, while ORT's CPU EP matches there. So ``optimize --ep webgpu``

- by default refuses the GroupQueryAttention fusion, naming WebGPU and the padding
  positions, and falls back to causal MultiHeadAttention
  (:mod:`~onnxscript_ep_passes.fusion.causal_mha`), whose sliding window is in its
  ``attention_bias``: equal to the export at every position, <= 2 Memcpy, <= 12 CPU nodes;
- with ``allow_padding_differences`` fuses it (<= 2 Memcpy, <= 12 CPU nodes) and the
  logits equal the export's at every position ``attention_mask`` keeps, for a right-padded
  and a left-padded second row (the padding goes to GroupQueryAttention as
  ``attention_bias``, so left padding is exact at real tokens too).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.fusion.evaluate import Sizes, generate_feeds, run_model
from onnxscript_ep_passes.pipeline import OptimizeForEpPass, OptimizeResult
from tests.e2e.helpers import EpRun, run_on_webgpu
from tests.fusion import WEBGPU_EXPORT_MARKS
from tests.torch_models import llm_export

pytestmark = WEBGPU_EXPORT_MARKS

RIGHT = Sizes(2, 8, 0, "right")  # the case: sequence 8, second row right-padded
LEFT = Sizes(2, 8, 0, "left")


def _optimized(proto: onnx.ModelProto, allow: bool) -> tuple[OptimizeResult, ir.Model]:
    model = ir.from_proto(proto)
    pipeline = OptimizeForEpPass("webgpu", allow_padding_differences=allow)
    result = pipeline(model)
    assert isinstance(result, OptimizeResult)
    return result, model


def _run(model: ir.Model | onnx.ModelProto, sizes: Sizes) -> tuple[EpRun, dict]:
    proto = model if isinstance(model, onnx.ModelProto) else ir.to_proto(model)
    feeds = generate_feeds(ir.from_proto(proto).graph.inputs, sizes)
    return run_on_webgpu(proto, feeds), feeds


@pytest.mark.parametrize("opset", [23, 24, 25])
def test_sliding_window_fusion_is_refused_by_default_and_fused_on_request(opset: int) -> None:
    proto = llm_export("mistral_w4", opset)

    default, refused = _optimized(proto, allow=False)
    record = next(f for f in default.fusions if f.pattern == "group_query_attention")
    assert not record.kept and record.count == 4
    assert record.reason is not None
    assert "differs on WebGpuExecutionProvider by up to" in record.reason
    assert "at padding positions" in record.reason and "left-padded" in record.reason
    assert "--allow-padding-differences" in record.reason
    webgpu_check = record.checks[1]
    assert webgpu_check["ok"] and not webgpu_check["padded_ok"]
    assert webgpu_check["padded_max_abs_diff"] > 0.01
    assert record.checks[0]["padded_ok"]  # the CPU EP is exact there
    assert webgpu_check["fused_on_ep"] == "4 of 4 GroupQueryAttention on WebGpuExecutionProvider"
    assert not any(n.op_type == "GroupQueryAttention" for n in refused.graph)
    # the decoder fallback: causal MultiHeadAttention, exact at every position on WebGPU
    # (its padded-heads form on lavapipe), so the default keeps a fused attention
    fallback = [f for f in default.fusions if f.pattern.startswith("causal_multi_head") and f.kept]
    assert len(fallback) == 1 and fallback[0].count == 4 and fallback[0].excluded is None
    reference = proto if opset != 23 else llm_export("mistral_w4", 24)
    for sizes in (RIGHT, LEFT):
        run, feeds = _run(refused, sizes)
        assert run.memcpy <= 2 and len(run.cpu_nodes) <= 12, run.cpu_summary()
        (expected,) = run_model(reference, feeds)
        np.testing.assert_allclose(run.outputs[0], expected, rtol=1e-3, atol=1e-3)

    allowed, fused = _optimized(proto, allow=True)
    record = next(f for f in allowed.fusions if f.pattern == "group_query_attention")
    assert record.kept, record.reason
    assert record.excluded is not None and "attention_mask is 0" in record.excluded
    assert "WebGpuExecutionProvider differs there by up to" in record.excluded
    gqa = [n for n in fused.graph if n.op_type == "GroupQueryAttention"]
    assert [n.attributes.get_int("local_window_size", -1) for n in gqa] == [4] * 4
    # the reference: the opset-24 export of the same model (ORT runs torch's opset-23
    # RotaryEmbedding at batch 1 only)
    for sizes in (RIGHT, LEFT):
        run, feeds = _run(fused, sizes)
        assert run.memcpy <= 2 and len(run.cpu_nodes) <= 12, run.cpu_summary()
        (expected,) = run_model(reference, feeds)
        real = feeds["attention_mask"].astype(bool)
        np.testing.assert_allclose(run.outputs[0][real], expected[real], rtol=1e-3, atol=1e-3)
