"""Legalization checked in REAL WebGPU sessions (the plugin EP on lavapipe).

- The tiny Llama/Qwen/Gemma exports with SDPA attention (ai.onnx ``Attention``, which
  WebGPU has no kernel for at any version) at opsets 23, 24 and 25, after
  ``LowerOpsetForEpPass("webgpu")``, have no more Memcpy nodes than the same model exported
  with eager attention (plain MatMul/Softmax), measured in real sessions at the same ORT
  optimization level (disabled: the graph as written; and ORT's default, all), and their
  WebGPU outputs equal the original's on ORT's CPU EP (float32 logits, 1e-4).
- The CNN exported at 22..25 (MaxPool-22 has no WebGPU kernel) reaches 0 Memcpy.
"""

from __future__ import annotations

import collections
import functools

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest

from onnxscript_ep_passes.ep import KernelTable, make_webgpu_session_options, measure_placement
from onnxscript_ep_passes.passes import EpLoweringChoice, EpLoweringResult, LowerOpsetForEpPass
from tests.harness import run_model
from tests.torch_models import DECODERS, export_proto, sample_inputs

pytestmark = [
    pytest.mark.webgpu,
    pytest.mark.torch,
    pytest.mark.usefixtures("webgpu"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

LEVELS = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


@functools.cache
def _legalized(
    kind: str, opset: int, table: KernelTable
) -> tuple[onnx.ModelProto, EpLoweringChoice]:
    model = ir.from_proto(export_proto(kind, opset))
    result = LowerOpsetForEpPass("webgpu", table=table)(model)
    assert isinstance(result, EpLoweringResult) and result.choice is not None
    return ir.to_proto(model), result.choice


def _webgpu_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), make_webgpu_session_options())
    assert "WebGpuExecutionProvider" in session.get_providers()
    return [np.asarray(o) for o in session.run(None, feeds)]


def _assert_equal_to_original(kind: str, opset: int, model: onnx.ModelProto) -> None:
    feeds = sample_inputs(kind)
    expected, how = run_model(export_proto(kind, opset), feeds)
    assert how == "onnxruntime"
    actual = _webgpu_outputs(model, feeds)
    assert len(actual) == len(expected)
    for e, a in zip(expected, actual):
        assert a.shape == e.shape and a.dtype == e.dtype
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("opset", [23, 24, 25])
@pytest.mark.parametrize("kind", DECODERS)
def test_sdpa_decoder_reaches_the_eager_export_on_webgpu(
    kind: str, opset: int, webgpu_table: KernelTable
) -> None:
    model, choice = _legalized(kind, opset, webgpu_table)
    assert choice.legalized
    expanded = [d for d in choice.decisions if d.decision == "expand"]
    assert {d.op_type for d in expanded} == {"Attention"} and len(expanded) == 2
    assert not any(n.op_type == "Attention" for n in model.graph.node)
    onnx.checker.check_model(model, full_check=True)

    original = export_proto(kind, opset)
    eager = export_proto(kind, opset, attention="eager")
    for level in LEVELS.values():
        before = measure_placement(original, "webgpu", graph_optimization_level=level)
        reference = measure_placement(eager, "webgpu", graph_optimization_level=level)
        after = measure_placement(model, "webgpu", graph_optimization_level=level)
        summary = collections.Counter(n.op_type for n in after.cpu_nodes)
        assert after.memcpy <= reference.memcpy, (level, summary, reference.summary())
        assert after.memcpy < before.memcpy, level
        assert after.memcpy == 0 and not after.cpu_nodes, (level, summary)
    assert choice.after.memcpy == 0 and not choice.after.fallback_nodes
    _assert_equal_to_original(kind, opset, model)


@pytest.mark.parametrize("opset", [22, 23, 24, 25])
def test_cnn_reaches_zero_memcpy_on_webgpu(opset: int, webgpu_table: KernelTable) -> None:
    model, choice = _legalized("cnn", opset, webgpu_table)
    assert choice.chosen_opset == 21 and not choice.legalized  # MaxPool-12's kernel, at 21
    assert {d.decision for d in choice.decisions} == {"lower"}
    assert "MaxPool" in {d.op_type for d in choice.decisions}
    for level in LEVELS.values():
        measured = measure_placement(model, "webgpu", graph_optimization_level=level)
        assert measured.memcpy == 0 and not measured.cpu_nodes, measured.summary()
    _assert_equal_to_original("cnn", opset, model)


def test_attention_ort_inlines_is_expanded_with_its_shape_math_folded(
    webgpu_table: KernelTable,
) -> None:
    # ORT 1.32 has no Attention-25 kernel at all (CPU included): it inlines the body,
    # whose run-time int64 shape math then runs on CPU. Kept at opset 25, legalization
    # expands the node itself and folds that shape math.
    original = export_proto("llama", 25)
    model = ir.from_proto(original)
    result = LowerOpsetForEpPass("webgpu", target_opset=25, table=webgpu_table)(model)
    assert isinstance(result, EpLoweringResult)
    choice = result.choice
    assert choice is not None and choice.legalized and choice.chosen_opset == 25
    attention = [d for d in choice.decisions if d.op_type == "Attention"]
    assert [d.decision for d in attention] == ["expand", "expand"]
    assert "ORT inlines its function body" in attention[0].reason
    legalized = ir.to_proto(model)
    before = measure_placement(original, "webgpu")
    after = measure_placement(legalized, "webgpu")
    assert after.memcpy < before.memcpy and len(after.cpu_nodes) < len(before.cpu_nodes)
    assert {n.op_type for n in after.cpu_nodes} == {"Transpose"}  # Transpose-25: no kernel
    _assert_equal_to_original("llama", 25, legalized)
