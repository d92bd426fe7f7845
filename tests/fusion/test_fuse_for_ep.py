"""FuseForEpPass: fusions gated by the EP's kernel table, verified by running the model.

These use snapshot tables and verify on the CPU EP only (``check_ep=False``); the checks on
the real WebGPU EP are in test_verify_webgpu.py."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxscript_ep_passes.ep import get_table, load_snapshot
from onnxscript_ep_passes.fusion import FUSIONS, FuseForEpPass, FusionResult, FusionSpec
from onnxscript_ep_passes.fusion.fuse_for_ep import ATTENTION_FUSIONS
from tests.torch_models import llm_export

torch_export = [pytest.mark.torch, pytest.mark.filterwarnings("ignore::FutureWarning")]


def _records(result: FusionResult) -> dict[str, dict]:
    return {r.pattern: r.to_dict() for r in result.records}


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_webgpu_table_fuses_attention_and_norms_with_verified_differences() -> None:
    model = ir.from_proto(llm_export("llama", 24))
    table = load_snapshot("webgpu-ort-1.32")
    fusing = FuseForEpPass("webgpu", table=table, max_length=128, check_ep=False)
    result = fusing(model)
    assert result.modified
    records = _records(result)
    assert records["group_query_attention"]["count"] == 4
    assert records["skip_rms_normalization"]["count"] == 8
    assert records["rms_normalization"]["count"] == 9
    for name in ("group_query_attention", "skip_rms_normalization", "rms_normalization"):
        record = records[name]
        assert record["kept"], record
        assert record["max_abs_diff"] <= record["tolerance"]
        assert "WebGpuExecutionProvider" in record["kernel"]
        assert [c["ep"] for c in record["checks"]] == ["CPUExecutionProvider"]
        assert record["checks"][0]["padded_ok"], record  # exact at padding positions on CPU
    assert records["rms_normalization_23"] == {**records["rms_normalization_23"], "count": 0}
    assert model.opset_imports["com.microsoft"] == 1


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_an_ep_without_the_fused_kernels_keeps_the_onnx_form() -> None:
    # CUDA 1.24 (the release's own table) registers com.microsoft::GroupQueryAttention for
    # float16 only: the float32 export gets no GroupQueryAttention, and the record says why;
    # its MultiHeadAttention takes float32, so the causal fallback fuses the attention (the
    # plain form: verified on the CPU EP alone here, where it is exact). Without that
    # kernel too, the ONNX form stays.
    model = ir.from_proto(llm_export("llama", 24))
    fusing = FuseForEpPass("cuda", table=get_table("cuda", "1.24"), max_length=128, check_ep=False)
    records = _records(fusing(model))
    gqa = records["group_query_attention"]
    assert not gqa["kept"] and gqa["count"] == 0
    assert "tensor(float) not supported for T" in gqa["reason"], gqa["reason"]
    assert not any(n.op_type == "GroupQueryAttention" for n in model.graph)
    assert records["causal_multi_head_attention"]["kept"]
    assert sum(n.op_type == "MultiHeadAttention" for n in model.graph) == 4
    model = ir.from_proto(llm_export("llama", 24))
    attention = tuple(f for f in ATTENTION_FUSIONS if f.op != "MultiHeadAttention")
    table = get_table("cuda", "1.24")
    FuseForEpPass("cuda", table=table, max_length=128, fusions=attention, check_ep=False)(model)
    assert sum(n.op_type == "Attention" for n in model.graph) == 4


def _small_model() -> ir.Model:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        initializer=[w],
    )
    return ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))


def _wrong_fusion(model: ir.Model, max_length: int) -> tuple[int, dict[str, str]]:
    weight = model.graph.initializers["w"]
    assert weight.const_value is not None
    weight.const_value = ir.tensor(weight.const_value.numpy() * 1.01)
    return 1, {}


def test_a_fusion_that_changes_the_outputs_is_dropped_with_the_reason() -> None:
    model = _small_model()
    before = model.graph.initializers["w"].const_value.numpy().copy()  # type: ignore[union-attr]
    spec = FusionSpec("wrong", "com.microsoft", "GroupQueryAttention", _wrong_fusion, 1e-4)
    table = load_snapshot("webgpu-ort-1.32")
    fusing = FuseForEpPass("webgpu", table=table, fusions=(spec,), check_ep=False)
    result = fusing(model)
    assert not result.modified
    (record,) = result.records
    assert not record.kept and record.count == 1
    assert record.max_abs_diff is not None and record.max_abs_diff > 1e-4
    assert "outputs differ" in (record.reason or "")
    np.testing.assert_array_equal(model.graph.initializers["w"].const_value.numpy(), before)  # type: ignore[union-attr]


def test_every_fusion_has_a_tolerance_and_a_fused_op() -> None:
    assert [f.pattern for f in FUSIONS] == [
        "rms_normalization_23",
        "rms_normalization",
        "skip_rms_normalization",
        "skip_layer_normalization",
        "fast_gelu",
        "bias_gelu",
        "sliced_position_gather",
        "uniform_index_gather",
        "int32_positions",
        "gather_before_reshape",
        "group_query_attention",
        "causal_multi_head_attention",
        "causal_multi_head_attention_padded_heads",
        "multi_head_attention",
    ]
    assert all(0 < f.tolerance <= 1e-3 for f in FUSIONS)
