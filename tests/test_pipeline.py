"""optimize_for_ep: onnxscript's optimizer around the EP-aware lowering, on real exports."""

from __future__ import annotations

import collections
import json

import jsonschema
import numpy as np
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.cli.optimize import report_schema as optimize_report_schema
from onnxscript_ep_passes.ep import get_table, load_snapshot, predict_placement
from onnxscript_ep_passes.pipeline import OptimizeForEpPass, ep_pass_list, optimize_for_ep
from tests.harness import run_model
from tests.torch_models import export_proto, sample_inputs

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore::FutureWarning")]


def _ops(model: ir.Model) -> collections.Counter[str]:
    return collections.Counter(n.op_type for n in ir.traversal.RecursiveGraphIterator(model.graph))


def test_rms_normalization_is_recovered_after_lowering_a_torch_export() -> None:
    proto = export_proto("llama", 24)
    model = ir.from_proto(proto)
    # torch fuses RMSNormalization only at opset 23: at 24 the export holds Pow/ReduceMean.
    assert _ops(model)["RMSNormalization"] == 0 and _ops(model)["ReduceMean"] > 0
    # CUDA 1.25: Reshape/Transpose-24 fall back, Attention-23 has a kernel (1.24 has none,
    # so there the search expands Attention and goes lower).
    table = get_table("cuda", "1.25")
    optimize_for_ep(model, "cuda", table=table)
    assert model.opset_imports[""] == 23
    ops = _ops(model)
    # 2 layers x 2 norms + the final norm: the CUDA table has SimplifiedLayerNormalization
    # (ORT's contrib op in the default domain) and, being the release's own listing,
    # com.microsoft::SkipSimplifiedLayerNormalization, which the fusion step prefers.
    norms = ("RMSNormalization", "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization")
    assert sum(ops[op] for op in norms) == 5, ops
    assert ops["SkipSimplifiedLayerNormalization"] == 4, ops
    prediction = predict_placement(model, table)
    assert not prediction.fallback_nodes, str(prediction)
    feeds = sample_inputs("llama")
    expected, _ = run_model(proto, feeds)
    actual, _ = run_model(ir.to_proto(model), feeds)
    np.testing.assert_allclose(actual[0], expected[0], rtol=1e-4, atol=1e-4)


def test_lowest_opset_reaches_the_lowering() -> None:
    # The Llama export at 24 is best at 23 on CUDA 1.25 (above); bounded at 24 the
    # lowering may weigh nothing lower, so the model stays at 24.
    model = ir.from_proto(export_proto("llama", 24))
    optimize_for_ep(model, "cuda", table=get_table("cuda", "1.25"), lowest_opset=24)
    assert model.opset_imports[""] == 24
    with pytest.raises(ValueError, match="lowest_opset 17 is below 18"):
        OptimizeForEpPass("cuda", lowest_opset=17)


def test_the_fused_copy_is_priced_with_the_users_dims(monkeypatch: pytest.MonkeyPatch) -> None:
    # The pipeline weighs the lowered model against its re-fused copy; both prices must use
    # the sizes the user gave (--dims), as the lowering's own search does.
    import onnxscript_ep_passes.pipeline as pipeline

    seen: list[object] = []
    real = pipeline.placement_cost

    def recording(prediction, model, sizes=None):  # type: ignore[no-untyped-def]
        seen.append(sizes)
        return real(prediction, model, sizes)

    monkeypatch.setattr(pipeline, "placement_cost", recording)
    model = ir.from_proto(export_proto("llama", 24))
    optimize_for_ep(model, "cuda", table=get_table("cuda", "1.24"), dims="batch=3,seq=77")
    # The model before and after (the verdict's figures), the lowered model and its copy.
    assert len(seen) == 4
    assert all(dict(s.bindings) == {"batch": 3, "seq": 77} for s in seen), seen  # type: ignore[attr-defined]


def test_no_lowering_where_the_ep_has_the_newer_kernels() -> None:
    # ORT main (Sept 2026) registers Reshape/Transpose/... 24: opset 24 is already best.
    model = ir.from_proto(export_proto("llama", 24))
    table = get_table("cuda", "main-2026-09")
    optimize_for_ep(model, "cuda", table=table)
    assert model.opset_imports[""] == 24
    assert not predict_placement(model, table).fallback_nodes


def test_pass_list_runs_in_a_pass_manager() -> None:
    # Each check can fail: the EP pass must have lowered (the source has fallback nodes on
    # CUDA 1.25, the result none), the second optimization must have fused, and the
    # outputs must not change. (``result.modified`` alone proves nothing: the optimizer
    # pass always reports a change.)
    proto = export_proto("llama", 24)
    table = get_table("cuda", "1.25")
    assert predict_placement(proto, table).fallback_nodes
    model = ir.from_proto(proto)
    result = ir.passes.PassManager(ep_pass_list("cuda", "1.25"))(model)
    assert result.model is model
    assert model.opset_imports[""] == 23
    assert _ops(model)["RMSNormalization"] == 5
    assert not predict_placement(model, table).fallback_nodes
    feeds = sample_inputs("llama")
    expected, _ = run_model(proto, feeds)
    actual, _ = run_model(ir.to_proto(model), feeds)
    np.testing.assert_allclose(actual[0], expected[0], rtol=1e-4, atol=1e-4)


def test_cpu_only_optimizes() -> None:
    model = ir.from_proto(export_proto("llama", 24))
    optimize_for_ep(model, "cpu")
    assert model.opset_imports[""] == 24


def test_report_says_what_was_fused_and_predicts_placement() -> None:
    model = ir.from_proto(export_proto("llama", 24))
    pipeline = OptimizeForEpPass("webgpu", table=load_snapshot("webgpu-ort-1.32"), max_length=64)
    report = pipeline(model).report()
    assert report["source_opset"] == 24 and report["table_source"].startswith("snapshot:")
    fused = {f["pattern"]: f for f in report["fusions"] if f["kept"]}
    assert fused["group_query_attention"]["op"] == "com.microsoft::GroupQueryAttention"
    assert fused["group_query_attention"]["count"] == 2
    assert report["predicted_after"]["memcpy"] < report["predicted_before"]["memcpy"]
    json.dumps(report)
    assert report["table_kind"] == "snapshot"  # the provenance as a value, not the text
    jsonschema.validate(json.loads(json.dumps(report)), optimize_report_schema())


def test_no_fuse_keeps_the_attention() -> None:
    model = ir.from_proto(export_proto("llama", 24))
    pipeline = OptimizeForEpPass("webgpu", table=load_snapshot("webgpu-ort-1.32"), fuse=False)
    assert pipeline(model).fusions == []
    assert _ops(model)["GroupQueryAttention"] == 0
