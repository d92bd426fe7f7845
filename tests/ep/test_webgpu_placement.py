"""Predictions checked against REAL placement on the WebGPU plugin EP (lavapipe on CI).

For each model: the nodes predicted on CPU (ORT's shape-computation preference aside) are
exactly the nodes ORT placed on CPU; the layout Transposes ORT inserts are predicted in
number and placement; the Memcpy nodes ORT inserted are predicted in number and direction.
Sessions run with graph optimizations disabled (the graph as written) unless a test says
otherwise; then the prediction is made for the same level, and the nodes ORT's basic
optimizations remove before placing are predicted too.
"""

from __future__ import annotations

import collections

import onnx
import onnxruntime as ort
import pytest

from onnxscript_ep_passes.ep import (
    KernelTable,
    PlacementMeasurement,
    PlacementPrediction,
    measure_placement,
    predict_placement,
)
from tests.ep.models import (
    ONE_OP_CASES,
    OneOpCase,
    chain_model,
    cnn_model,
    function_model,
    if_model,
    loop_and_nested_functions_model,
    one_op_model,
    shared_input_model,
)

pytestmark = [pytest.mark.webgpu, pytest.mark.usefixtures("webgpu")]

OPSETS = range(21, 29)


def _all_names(model: onnx.ModelProto) -> set[str]:
    names: set[str] = set()

    def walk(graph: onnx.GraphProto, prefix: str = "") -> None:
        for node in graph.node:
            names.add(prefix + node.name)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g, prefix)

    walk(model.graph)
    for fn in model.functions:
        for node in fn.node:
            names.add(f"_inlfunc_{fn.name}_{node.name}")
    return names


def compare(
    model: onnx.ModelProto,
    table: KernelTable,
    level: ort.GraphOptimizationLevel = ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
) -> tuple[PlacementPrediction, PlacementMeasurement]:
    """Predict and measure ``model`` at ORT's optimization ``level``; assert they agree."""
    pred = predict_placement(model, table, optimization_level=level)
    meas = measure_placement(model, "webgpu", graph_optimization_level=level)
    assert meas.ep_node_count > 0, "the EP received no node"
    assert "WebGpuExecutionProvider" in meas.providers

    own = _all_names(model)
    own |= {f"{name}_new_reshape" for name in own}  # ORT's name for a fused reshape chain
    measured_cpu = {n.source_name for n in meas.cpu_nodes if n.source_name in own}
    predicted_cpu = {n.name for n in pred.nodes if n.is_fallback and not n.inserted_by_ort}
    assert not pred.shape_computation_nodes  # the WebGPU plugin does not apply it
    assert predicted_cpu == measured_cpu, (str(pred), meas.summary())
    measured_own = {n.source_name for n in meas.nodes if n.source_name in own}
    predicted_own = {n.name for n in pred.nodes if not n.inserted_by_ort}
    assert measured_own == predicted_own
    # What ORT removed before placing is what the prediction says it removes.
    as_written = predict_placement(model, table, optimization_level=0)
    placeable = {n.name for n in as_written.nodes if not n.inserted_by_ort}
    fused = {
        n.node.name for n in pred.nodes if n.node is not None and n.name.endswith("_new_reshape")
    }
    assert {r.name for r in pred.removed} == placeable - measured_own - fused, pred.removed

    inserted_measured = collections.Counter(
        "ep" if n.provider == meas.ep else "cpu"
        for n in meas.nodes
        if n.source_name not in own and n.op_type == "Transpose"
    )
    inserted_predicted = collections.Counter(n.placement for n in pred.nodes if n.inserted_by_ort)
    assert inserted_predicted == inserted_measured
    nhwc_measured = {n.source_name for n in meas.nodes if n.domain == "com.ms.internal.nhwc"}
    assert {n.name for n in pred.nodes if n.nhwc} == nhwc_measured
    assert (pred.memcpy_from_host, pred.memcpy_to_host) == (
        meas.memcpy_from_host,
        meas.memcpy_to_host,
    ), (str(pred), [(t.value, t.direction) for t in pred.transfers])
    return pred, meas


@pytest.mark.parametrize("case", ONE_OP_CASES, ids=lambda c: c.label)
def test_one_op_models(case: OneOpCase, webgpu_table: KernelTable) -> None:
    fallbacks = {}
    for opset in OPSETS:
        _pred, meas = compare(one_op_model(case, opset), webgpu_table)
        fallbacks[opset] = meas.provider_of("op") != meas.ep
        if fallbacks[opset]:
            assert meas.memcpy >= 1
    # Every op here runs on WebGPU at opset 21 except Cos (Cos-7 vs Cos-22 from opset 22).
    assert not fallbacks[21] or case.op in {"Cos"}


def test_known_fallbacks_at_opset_25(webgpu_table: KernelTable) -> None:
    """The brief's observations: Transpose-25 and Flatten-23+ fall back on WebGPU."""
    cases = {c.label: c for c in ONE_OP_CASES}
    pred, meas = compare(one_op_model(cases["Transpose"], 25), webgpu_table)
    assert meas.provider_of("op") == "CPUExecutionProvider"
    assert (meas.memcpy_from_host, meas.memcpy_to_host) == (1, 1)
    pred, meas = compare(one_op_model(cases["Transpose"], 24), webgpu_table)
    assert meas.provider_of("op") == "WebGpuExecutionProvider" and meas.memcpy == 0
    pred, _ = compare(one_op_model(cases["Flatten"], 23), webgpu_table)
    assert "since_version 23" in pred.fallback_nodes[0].reason


@pytest.mark.parametrize("opset", OPSETS)
def test_chain_model(opset: int, webgpu_table: KernelTable) -> None:
    _pred, meas = compare(chain_model(opset), webgpu_table)
    # int64 shape arithmetic has no WebGPU kernel at any opset (types).
    for name in ("gather", "unsqueeze_dim", "concat"):
        assert meas.provider_of(name) == "CPUExecutionProvider"
    if opset >= 25:
        assert meas.provider_of("transpose") == "CPUExecutionProvider"


@pytest.mark.parametrize("opset", [21, 25])
@pytest.mark.parametrize(
    "level",
    [ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, ort.GraphOptimizationLevel.ORT_ENABLE_ALL],
    ids=["basic", "all"],
)
def test_chain_model_as_ort_optimizes_it(
    opset: int, level: ort.GraphOptimizationLevel, webgpu_table: KernelTable
) -> None:
    """Before placing, ORT folds the static shape computation (Shape of a [2, 3, 4] value,
    then Gather, Unsqueeze, Concat on constants), drops the Identity and the Unsqueeze on
    a constant: the int64 nodes that fell back are gone, and so are their Memcpy nodes."""
    pred, meas = compare(chain_model(opset), webgpu_table, level)
    assert pred.removed_by_rule() == {
        "constant_folding": 3,
        "identity_elimination": 1,
        "reshape_fusion": 2,
        "shape_folding": 1,
    }
    assert {r.name for r in pred.removed} == {
        "shape",
        "gather",
        "unsqueeze_dim",
        "concat",
        "identity",
        "unsqueeze",
        "squeeze",
    }
    # Reshape -> Unsqueeze -> Squeeze (static shapes) became one Reshape ORT names so.
    fused = [n for n in pred.nodes if n.node is not None and n.name != n.node.name]
    assert [(n.name, n.op_type) for n in fused] == [("reshape_new_reshape", "Reshape")]
    assert meas.provider_of("reshape_new_reshape") == "WebGpuExecutionProvider"
    as_written = predict_placement(chain_model(opset), webgpu_table, optimization_level=0)
    assert not as_written.removed and pred.memcpy <= as_written.memcpy
    # The int64 shape nodes that fell back as written are folded away.
    assert {"gather", "concat"} <= {n.name for n in as_written.fallback_nodes}
    assert not {"gather", "concat"} & {n.name for n in pred.nodes}
    assert meas.provider_of("reshape_dyn") == "WebGpuExecutionProvider"


@pytest.mark.parametrize("opset", OPSETS)
def test_cnn_model_with_layout_transposes(opset: int, webgpu_table: KernelTable) -> None:
    pred, _meas = compare(cnn_model(opset), webgpu_table)
    inserted = [n for n in pred.nodes if n.inserted_by_ort]
    # At 21 the whole network is one NHWC region (in and out); from 22 MaxPool-22 and
    # GlobalAveragePool-22 fall back and split it in two.
    assert len(inserted) == (2 if opset == 21 else 4)
    assert {n.placement for n in inserted} == {"cpu" if opset >= 25 else "ep"}
    assert {n.name for n in pred.nodes if n.nhwc} == (
        {"conv1", "pool", "conv2", "gap"} if opset == 21 else {"conv1", "conv2"}
    )


@pytest.mark.parametrize("opset", [21, 23, 24, 25, 28])
def test_if_subgraphs(opset: int, webgpu_table: KernelTable) -> None:
    compare(if_model(opset), webgpu_table)


@pytest.mark.parametrize(("opset", "function_opset"), [(24, 24), (25, 24), (24, 25), (25, 25)])
def test_local_functions_inlined(
    opset: int, function_opset: int, webgpu_table: KernelTable
) -> None:
    _pred, meas = compare(function_model(opset, function_opset), webgpu_table)
    # ORT resolves the inlined nodes at the model's opset.
    expected = "CPUExecutionProvider" if opset >= 25 else "WebGpuExecutionProvider"
    assert meas.provider_of("_inlfunc_Block_transpose") == expected


@pytest.mark.parametrize("opset", [21, 24, 25])
def test_graph_inputs_and_outputs_shared_with_cpu(opset: int, webgpu_table: KernelTable) -> None:
    compare(shared_input_model(opset), webgpu_table)


@pytest.mark.parametrize("opset", [21, 24, 25])
def test_loop_and_nested_functions(opset: int, webgpu_table: KernelTable) -> None:
    _, meas = compare(loop_and_nested_functions_model(opset), webgpu_table)
    # ORT names an inlined node after its innermost function.
    assert meas.provider_of("_inlfunc_Inner_transpose") == (
        "CPUExecutionProvider" if opset >= 25 else "WebGpuExecutionProvider"
    )
    assert meas.provider_of("loop") == "CPUExecutionProvider"  # WebGPU has no Loop kernel
