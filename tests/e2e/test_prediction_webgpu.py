"""Predictions on what users bring: real torch exports, predicted as ORT really places them.

For the exports of tests/e2e -- the static-shape decoders and CNN of
:func:`~tests.torch_models.export_proto` and the dynamic-shape decoders of
:func:`~tests.torch_models.llm_export` -- at opsets 23, 24 and 25, as exported and as
``LowerOpsetForEpPass("webgpu")`` lowers them, and for ``optimize``'s fused decoders:

1. at ORT's default level (a session as a user makes it, :func:`~tests.e2e.helpers.run_on_webgpu`,
   written apart from the package) and at ``ORT_ENABLE_BASIC``, the predicted Memcpy nodes
   equal, in number and direction, those in the optimized model ORT saves;
2. the nodes the prediction says ORT removes before placing (folded, merged, eliminated)
   are exactly the model's nodes missing from ORT's placement record, by name, for the
   exports as they came (of two equal nodes ORT keeps the first in its topological order); for the lowered ones each predicted removal is
   ORT's (ORT removes a few more, with rules not modelled: they are on the EP, and the
   Memcpy counts of rule 1 hold);
3. the originals: the nodes predicted on CPU are ORT's, op type by op type.
"""

from __future__ import annotations

import collections
import functools

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest

from onnxscript_ep_passes.ep import KernelTable, measure_placement, predict_placement
from onnxscript_ep_passes.ep.placement import OptimizationLevel
from onnxscript_ep_passes.passes import LowerOpsetForEpPass
from onnxscript_ep_passes.pipeline import OptimizeForEpPass
from tests.e2e.helpers import run_on_webgpu
from tests.e2e.prediction_checks import assert_removed_as_ort, assert_same_memcpy
from tests.fusion import WEBGPU_EXPORT_MARKS
from tests.torch_models import export_proto, llm_export, llm_inputs, sample_inputs

pytestmark = [
    *WEBGPU_EXPORT_MARKS,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

OPSETS = (23, 24, 25)
STATIC = ("llama", "cnn")  # export_proto's decoders share one architecture: one of them
DYNAMIC = ("llama", "qwen3", "gemma3")
CASES = [
    pytest.param(source, kind, opset, id=f"{source}-{kind}-{opset}")
    for source, kinds in (("static", STATIC), ("dynamic", DYNAMIC))
    for kind in kinds
    for opset in OPSETS
]
BASIC = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC


def _export(source: str, kind: str, opset: int) -> onnx.ModelProto:
    return export_proto(kind, opset) if source == "static" else llm_export(kind, opset)


def _feeds(source: str, kind: str, proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    return sample_inputs(kind) if source == "static" else llm_inputs(proto)


@functools.cache
def _models(source: str, kind: str, opset: int, table: KernelTable) -> dict[str, bytes]:
    """The export as it came and as lowered for WebGPU (serialized: each test parses its
    own copy)."""
    model = ir.from_proto(_export(source, kind, opset))
    LowerOpsetForEpPass("webgpu", table=table)(model)
    return {
        "original": _export(source, kind, opset).SerializeToString(),
        "lowered": ir.to_proto(model).SerializeToString(),
    }


def _parse(data: bytes) -> onnx.ModelProto:
    proto = onnx.ModelProto()
    proto.ParseFromString(data)
    return proto


@pytest.mark.parametrize("variant", ["original", "lowered"])
@pytest.mark.parametrize(("source", "kind", "opset"), CASES)
def test_predicted_memcpy_equals_ort_at_its_default_level(
    source: str, kind: str, opset: int, variant: str, webgpu_table: KernelTable
) -> None:
    proto = _parse(_models(source, kind, opset, webgpu_table)[variant])
    pred = predict_placement(proto, webgpu_table)  # ORT's default level
    assert pred.optimization_level == OptimizationLevel.ENABLE_ALL
    run = run_on_webgpu(proto, _feeds(source, kind, proto))
    assert_same_memcpy(pred, run.memcpy_from_host, run.memcpy_to_host)
    if variant == "original":
        predicted_cpu = collections.Counter(n.op_type for n in pred.cpu_nodes)
        assert predicted_cpu == collections.Counter(run.cpu_summary())


@pytest.mark.parametrize("variant", ["original", "lowered"])
@pytest.mark.parametrize(("source", "kind", "opset"), CASES)
def test_predicted_memcpy_and_removals_equal_ort_at_basic_level(
    source: str, kind: str, opset: int, variant: str, webgpu_table: KernelTable
) -> None:
    proto = _parse(_models(source, kind, opset, webgpu_table)[variant])
    pred = predict_placement(proto, webgpu_table, optimization_level=BASIC)
    measured = measure_placement(proto, "webgpu", graph_optimization_level=BASIC)
    assert_same_memcpy(pred, measured.memcpy_from_host, measured.memcpy_to_host)
    # The lowered models keep what ORT removes with rules not modelled (an Expand whose
    # input shape only ORT's inference knows, CastLike's Cast, Transposes it pushes).
    assert_removed_as_ort(proto, webgpu_table, pred, BASIC, exact=variant == "original")


def test_what_ort_folds_is_said() -> None:
    """The dynamic opset-23 Llama computes its rotary tables in the graph: 4 layers, each
    with its own Cos and Sin of the same frequencies; ORT merges them into one pair before
    placing, which removes their Memcpy nodes."""
    table = _webgpu_table()
    proto = llm_export("llama", 23)
    as_written = predict_placement(proto, table, optimization_level=0)
    pred = predict_placement(proto, table)
    merged = collections.Counter(
        r.op_type for r in pred.removed if r.rule == "common_subexpression"
    )
    assert merged["Cos"] == merged["Sin"] >= 3
    assert pred.memcpy < as_written.memcpy
    assert all(r.node is not None and r.node.op_type == r.op_type for r in pred.removed)


def _webgpu_table() -> KernelTable:
    from onnxscript_ep_passes.ep import get_table

    return get_table("webgpu")


@pytest.mark.parametrize(
    ("kind", "opset", "allow_padding_differences"),
    [("qwen3", 23, False), ("llama", 24, False), ("gemma3_wide", 25, False)]
    + [("mistral_w4", opset, True) for opset in (23, 24, 25)],
)
def test_optimized_decoders_predicted_as_ort_places_them(
    kind: str, opset: int, allow_padding_differences: bool, webgpu_table: KernelTable
) -> None:
    """``optimize``'s own prediction for its result (the JSON's) is ORT's count, whether the
    verification kept the attention fusion (mistral_w4 with the flag: a binding window) or
    dropped it (the others on lavapipe: WebGPU's GroupQueryAttention differs from 32 tokens
    on without a binding window)."""
    model = ir.from_proto(llm_export(kind, opset))
    pipeline = OptimizeForEpPass("webgpu", allow_padding_differences=allow_padding_differences)
    result = pipeline(model)
    proto = ir.to_proto(model)
    if allow_padding_differences:
        assert any(n.op_type == "GroupQueryAttention" for n in proto.graph.node)
    run = run_on_webgpu(proto, llm_inputs(proto))
    assert result.after is not None
    assert result.after.memcpy == run.memcpy
    pred = predict_placement(proto, webgpu_table)
    assert_same_memcpy(pred, run.memcpy_from_host, run.memcpy_to_host)
    # The model's own nodes on CPU, op by op. ORT's optimizers also make nodes of their own
    # (qwen3 at 23 unfused: four int64 Gather, "Gather_token_N", on CPU, moving no data
    # across the boundary); the prediction does not model those.
    own = {n.name for n in proto.graph.node}
    measured = collections.Counter(n.op_type for n in run.cpu_nodes if not n.name or n.name in own)
    assert collections.Counter(n.op_type for n in pred.cpu_nodes) == measured
