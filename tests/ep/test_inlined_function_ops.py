"""A function op that no EP has a kernel for (CPU included) is inlined by ORT: its body is
placed node by node, and the prediction must do the same."""

from __future__ import annotations

import onnx
import onnx.helper as oh
import pytest

from onnxscript_ep_passes.ep import KernelTable, get_table, measure_placement, predict_placement

F = onnx.TensorProto.FLOAT


def _attention_25() -> onnx.ModelProto:
    shape = [1, 4, 8, 16]
    nodes = [
        oh.make_node("Relu", ["x"], ["q"], name="relu"),
        oh.make_node("Attention", ["q", "k", "v"], ["y"], name="attn", is_causal=1),
    ]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info(n, F, shape) for n in ("x", "k", "v")],
        [oh.make_tensor_value_info("y", F, shape)],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 25)])
    model.ir_version = 11
    return model


def test_installed_ort_has_no_attention_25_kernel() -> None:
    assert get_table("cpu").match("", "Attention", 25) is None


@pytest.mark.webgpu
def test_attention_25_body_is_placed_like_ort_inlines_it(webgpu_table: KernelTable) -> None:
    model = _attention_25()
    prediction = predict_placement(model, webgpu_table)
    measured = measure_placement(model, "webgpu")
    assert measured.ep_node_count > 0
    assert "Attention" not in {n.op_type for n in prediction.nodes}
    predicted_cpu = {n.op_type for n in prediction.cpu_nodes}
    measured_cpu = {n.op_type for n in measured.cpu_nodes}
    # ORT also rewrites CastLike (itself a function op) into Cast after inlining.
    assert predicted_cpu - {"CastLike"} <= measured_cpu, (predicted_cpu, measured_cpu)
    assert len(prediction.cpu_nodes) >= 0.75 * len(measured.cpu_nodes)
    assert prediction.memcpy >= 0.75 * measured.memcpy
