"""Real torch.onnx (dynamo) exports, lowered for the real WebGPU EP, at every opset 21..25.

For each tiny model (Llama, Qwen, Gemma with SDPA attention; a CNN) exported at each opset
the exporter supports from 21 up, ``LowerOpsetForEpPass("webgpu")`` runs with the live
kernel table of the installed plugin, and:

1. the lowered model passes ``onnx.checker`` (full check) at the chosen opset, and its ORT
   CPU outputs equal the original's (tight tolerance);
2. in a real WebGPU session (ORT's default optimization level, one forward), the Memcpy
   nodes of the optimized model ORT saves are no more than the original's, and neither are
   the nodes on CPU; the WebGPU outputs match the CPU ones;
3. every node the real session still leaves on CPU is justified by the live table: no
   kernel for its op at any since_version it takes at the opsets the model can reach (ai.onnx
   Attention on WebGPU, IsNaN ...), or a type fallback. This holds with or without
   legalization (rewriting such ops for the EP) in the pass: a node it expands is simply
   no longer there.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import onnx
import onnx.shape_inference
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.ep import KernelTable
from onnxscript_ep_passes.lowering.lower_opset import max_ir_version_for_opset
from onnxscript_ep_passes.passes import LowerOpsetForEpPass
from onnxscript_ep_passes.passes.lower_for_ep import EpLoweringChoice, EpLoweringResult
from tests.e2e.helpers import EpRun, audit_fallback, default_opset_of, run_on_webgpu
from tests.harness import run_model
from tests.torch_models import export_proto, sample_inputs

pytestmark = [
    pytest.mark.webgpu,
    pytest.mark.torch,
    pytest.mark.slow,
    pytest.mark.usefixtures("webgpu"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

KINDS = ("llama", "qwen", "gemma", "cnn")
OPSETS = (21, 22, 23, 24, 25)  # torch 2.13 exports 21..25 (26+ silently falls back to 18)
CASES = [pytest.param(kind, opset, id=f"{kind}-{opset}") for kind in KINDS for opset in OPSETS]


@dataclasses.dataclass(frozen=True)
class Lowered:
    original: onnx.ModelProto
    lowered: onnx.ModelProto
    lowered_ir: ir.Model
    choice: EpLoweringChoice
    feeds: dict[str, np.ndarray]


@functools.cache
def _lowered(kind: str, opset: int, table: KernelTable) -> Lowered:
    original = export_proto(kind, opset)
    assert default_opset_of(original) == opset, "the exporter did not honour the opset"
    model = ir.serde.deserialize_model(export_proto(kind, opset))
    result = LowerOpsetForEpPass("webgpu", table=table)(model)
    assert isinstance(result, EpLoweringResult)
    choice = result.choice
    assert choice is not None and choice.table_source == table.source
    return Lowered(original, ir.serde.serialize_model(model), model, choice, sample_inputs(kind))


@functools.cache
def _webgpu(kind: str, opset: int, table: KernelTable) -> tuple[EpRun, EpRun]:
    case = _lowered(kind, opset, table)
    return run_on_webgpu(case.original, case.feeds), run_on_webgpu(case.lowered, case.feeds)


@pytest.mark.parametrize(("kind", "opset"), CASES)
def test_lowered_is_valid_and_exact_on_cpu(
    kind: str, opset: int, webgpu_table: KernelTable
) -> None:
    case = _lowered(kind, opset, webgpu_table)
    chosen = case.choice.chosen_opset
    assert case.choice.source_opset == opset
    assert default_opset_of(case.lowered) == chosen <= opset
    assert case.lowered.ir_version <= max_ir_version_for_opset(chosen)
    onnx.checker.check_model(case.lowered, full_check=True)
    # The pass never picks a candidate estimated to cost more than the source.
    assert case.choice.after_cost.cost <= case.choice.costs[opset].cost

    expected, how_expected = run_model(case.original, case.feeds)
    actual, how_actual = run_model(case.lowered, case.feeds)
    assert how_expected == how_actual == "onnxruntime"
    assert len(actual) == len(expected)
    for e, a in zip(expected, actual):
        assert a.shape == e.shape and a.dtype == e.dtype
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("kind", "opset"), CASES)
def test_webgpu_memcpy_and_fallback_not_worse(
    kind: str, opset: int, webgpu_table: KernelTable
) -> None:
    before, after = _webgpu(kind, opset, webgpu_table)
    assert after.memcpy <= before.memcpy, (before.cpu_summary(), after.cpu_summary())
    # Compute-heavy ops never move to CPU (int64 shape math may: it costs next to nothing).
    heavy = {"MatMul", "Gemm", "Conv", "Attention", "Softmax", "MaxPool"}
    assert set(after.cpu_summary()) & heavy <= set(before.cpu_summary()) & heavy, (
        before.cpu_summary(),
        after.cpu_summary(),
    )
    # The lowered model really runs on WebGPU (lavapipe) and agrees with ORT's CPU EP.
    case = _lowered(kind, opset, webgpu_table)
    expected, _ = run_model(case.original, case.feeds)
    for e, a in zip(expected, after.outputs):
        np.testing.assert_allclose(a, e, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize(("kind", "opset"), CASES)
def test_no_avoidable_fallback(kind: str, opset: int, webgpu_table: KernelTable) -> None:
    case = _lowered(kind, opset, webgpu_table)
    _, after = _webgpu(kind, opset, webgpu_table)
    reachable = set(case.choice.predictions)
    verdicts = audit_fallback(after.cpu_nodes, case.lowered_ir, webgpu_table, reachable)
    avoidable = [v for v in verdicts if v.kind == "avoidable"]
    assert not avoidable, "\n".join(
        f"{v.node} ({v.domain or 'ai.onnx'}::{v.op_type}): {v.detail}" for v in avoidable
    )


@pytest.mark.parametrize(
    ("kind", "opset", "flagged"),
    [
        pytest.param("cnn", 25, {"MaxPool", "Transpose"}, id="cnn-25"),
        pytest.param("llama", 25, {"Shape", "Transpose", "Concat"}, id="llama-25"),
    ],
)
def test_audit_flags_the_unlowered_export(
    kind: str, opset: int, flagged: set[str], webgpu_table: KernelTable
) -> None:
    """The audit has teeth: on the export as it came, it finds the nodes lowering fixes."""
    case = _lowered(kind, opset, webgpu_table)
    before, _ = _webgpu(kind, opset, webgpu_table)
    original = ir.serde.deserialize_model(case.original)
    verdicts = audit_fallback(
        before.cpu_nodes, original, webgpu_table, set(case.choice.predictions)
    )
    assert flagged <= {v.op_type for v in verdicts if v.kind == "avoidable"}


def _one_node_model(op: str, opset: int, dtype: int, **attrs: object) -> ir.Model:
    x = onnx.helper.make_tensor_value_info("x", dtype, [2, 3])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)
    node = onnx.helper.make_node(op, ["x"], ["y"], name="n", **attrs)
    graph = onnx.helper.make_graph([node], "g", [x], [y])
    proto = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    proto = onnx.shape_inference.infer_shapes(proto)
    return ir.serde.deserialize_model(proto)


@pytest.mark.parametrize(
    ("op", "opset", "dtype", "reachable", "kind"),
    [
        # Transpose-25 has no kernel, Transpose [24, inf) does.
        ("Transpose", 25, onnx.TensorProto.FLOAT, {24, 25}, "avoidable"),
        ("Transpose", 25, onnx.TensorProto.FLOAT, {25}, "no_kernel"),
        # No WebGPU IsNaN at any version.
        ("IsNaN", 21, onnx.TensorProto.FLOAT, {18, 19, 20, 21}, "no_kernel"),
        # Shape's kernels exist for every version but take no int64 data: int64 shape math.
        ("Shape", 21, onnx.TensorProto.INT64, {18, 19, 20, 21}, "type"),
        ("Shape", 21, onnx.TensorProto.FLOAT, {18, 19, 20, 21}, "avoidable"),
    ],
)
def test_audit_rules(
    op: str, opset: int, dtype: int, reachable: set[int], kind: str, webgpu_table: KernelTable
) -> None:
    from tests.e2e.helpers import EpNode

    model = _one_node_model(op, opset, dtype)
    cpu = [EpNode("n", op, "", "CPUExecutionProvider")]
    (verdict,) = audit_fallback(cpu, model, webgpu_table, reachable)
    assert verdict.kind == kind, verdict
