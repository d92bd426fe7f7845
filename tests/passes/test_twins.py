"""A plain candidate derived from the one above it (:mod:`onnxscript_ep_passes.passes.twins`),
and its legalization, are the fresh computation: every candidate's entry, its
prediction's records (labels included), each legalization's decisions, the choice and the
report are those of the search that derives nothing (``REUSE_TWINS`` off). On a decoder
(its 21 -> 20 step relabels Reshape, Transpose, Unsqueeze ... and CastLike's inlined
body; the legalization folds 781 nodes and tries none), on a small model whose labels
change but not its placement, on one whose table answers differently one opset lower
(nothing derived), and on the decoder with a folding that answers differently one opset
lower (its legalization not derived)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.placement import PlacementPrediction, predict_placement
from onnxscript_ep_passes.ep.table_choice import get_table
from onnxscript_ep_passes.passes import candidates, static_shapes
from onnxscript_ep_passes.passes.candidates import CandidateSearch, SearchSettings
from onnxscript_ep_passes.passes.lower_for_ep import EpLoweringChoice, _search
from onnxscript_ep_passes.passes.twins import derive_prediction
from onnxscript_ep_passes.reports.report import choice_report
from tests.harness import benchmark_decoder

FLOAT = onnx.TensorProto.FLOAT


def _records(prediction: PlacementPrediction) -> list[tuple[Any, ...]]:
    """Every field of every record, the model's node by name (the runs load the model
    separately); the Memcpy nodes and the removed nodes likewise."""
    nodes = [
        (
            n.name,
            n.op_type,
            n.domain,
            n.since_version,
            n.placement,
            n.reason,
            n.is_shape_computation,
            n.reason_code,
            n.scope,
            n.inserted_by_ort,
            n.nhwc,
            n.inlined_by_ort,
            None if n.node is None else n.node.name,
            None if n.function is None else n.function.name,
        )
        for n in prediction.nodes
    ]
    transfers = [
        (
            t.value,
            t.direction,
            t.scope,
            t.host_side,
            None if t.ir_value is None else t.ir_value.name,
        )
        for t in prediction.transfers
    ]
    removed = [(r.name, r.op_type, r.domain, r.rule, r.scope) for r in prediction.removed]
    return [nodes, transfers, removed, prediction.optimization_level, prediction.ep]


def _search_of(
    path: Path, table: KernelTable, reuse: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[ir.Model, EpLoweringChoice, CandidateSearch]:
    monkeypatch.setattr(candidates, "REUSE_TWINS", reuse)
    model = ir.load(path)
    choice, _, search = _search(model, table, None, 18, True, SearchSettings())
    return model, choice, search


def _assert_same_search(
    path: Path, table: KernelTable, monkeypatch: pytest.MonkeyPatch
) -> CandidateSearch:
    """The search with derivation equals the one without; the former's search."""
    model, choice, search = _search_of(path, table, True, monkeypatch)
    fresh_model, fresh_choice, fresh = _search_of(path, table, False, monkeypatch)
    assert not fresh.derived and not fresh.legalized_derived
    assert search.legalized_derived <= search.derived
    assert sorted(choice.candidates) == sorted(fresh_choice.candidates)
    assert sorted(search.legalizations) == sorted(fresh.legalizations)
    for opset, candidate in search.legalizations.items():
        ours, theirs = candidate.legalization, fresh.legalizations[opset].legalization
        assert ours is not None and theirs is not None
        assert [str(d) for d in ours.decisions] == [str(d) for d in theirs.decisions], opset
        assert (ours.folded, ours.tried, ours.modified) == (
            theirs.folded,
            theirs.tried,
            theirs.modified,
        ), opset
        assert _records(ours.before) == _records(theirs.before), opset
    for key, entry in choice.candidates.items():
        other = fresh_choice.candidates[key]
        assert _records(entry.prediction) == _records(other.prediction), key
        assert entry.cost == other.cost, key
        assert entry.replaced == other.replaced, key
        assert [n.name for n in entry.expanded] == [n.name for n in other.expanded], key
    assert (choice.chosen_opset, choice.legalized) == (
        fresh_choice.chosen_opset,
        fresh_choice.legalized,
    )
    assert choice.summary() == fresh_choice.summary()
    report = json.dumps(choice_report(model, choice, model_name="m"), sort_keys=True)
    fresh_report = json.dumps(choice_report(fresh_model, fresh_choice, model_name="m"))
    assert report == json.dumps(json.loads(fresh_report), sort_keys=True)
    # A derived candidate ties its twin above, which ties go to: never the choice.
    assert choice.chosen_opset not in search.derived
    return search


def test_decoder_twin_is_the_fresh_candidate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "decoder.onnx"
    benchmark_decoder(path, 1200, 400_000)
    search = _assert_same_search(path, get_table("cuda", "1.24"), monkeypatch)
    assert search.derived == {20}  # 21 -> 20 relabels, and places the same
    assert search.legalized_derived == {20}  # and so does the model with its shape math folded
    derived = search.legalizations[20].legalization
    assert derived is not None and derived.folded > 0 and not derived.tried
    relabelled = {
        (a.op_type, a.since_version, b.since_version)
        for a, b in zip(search.plain[21].prediction.nodes, search.plain[20].prediction.nodes)
        if a.since_version != b.since_version
    }
    assert ("Reshape", 21, 19) in relabelled and ("Unsqueeze", 21, 13) in relabelled
    assert any(n.inlined_by_ort for n in search.plain[20].prediction.nodes)  # CastLike's body


def _transpose_relu(path: Path) -> None:
    """Transpose -> Relu -> Transpose at opset 22, the values between without a shape
    (ORT's inference at load and the cost's run on the first Transpose)."""
    x = onnx.helper.make_tensor_value_info("x", FLOAT, [2, 3])
    y = onnx.helper.make_tensor_value_info("y", FLOAT, [2, 3])
    nodes = [
        onnx.helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0], name="t0"),
        onnx.helper.make_node("Relu", ["t"], ["u"], name="relu"),
        onnx.helper.make_node("Transpose", ["u"], ["y"], perm=[1, 0], name="t1"),
    ]
    graph = onnx.helper.make_graph(nodes, "g", [x], [y])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 22)])
    onnx.save(model, path)


def _table(transpose: list[tuple[int, int | None]]) -> KernelTable:
    """A CUDA table with these Transpose ranges and no Relu (so no opset runs wholly on
    the EP and the search goes down to 18)."""
    rows = [("", "Transpose", start, end, None) for start, end in transpose]
    return KernelTable.from_rows("CUDAExecutionProvider", "1.24", "file:test", rows)


def test_relabel_only_is_derived(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "m.onnx"
    _transpose_relu(path)
    search = _assert_same_search(path, _table([(13, 20), (21, 22)]), monkeypatch)
    assert 20 in search.derived  # Transpose-21 -> Transpose-13: another kernel, on the EP
    reasons = {n.reason for n in search.plain[20].prediction.nodes if n.op_type == "Transpose"}
    assert reasons == {"kernel Transpose [13, 20]"}


def test_table_answer_differs_below(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "m.onnx"
    _transpose_relu(path)
    search = _assert_same_search(path, _table([(21, 22)]), monkeypatch)
    assert 20 not in search.derived  # Transpose-13 has no kernel: predicted afresh
    placements = {n.placement for n in search.plain[20].prediction.nodes}
    assert placements == {"cpu"}


def test_folding_that_answers_differently_below(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Were ONNX's reference unable to run Div at opset 20, the legalization at 20 would
    fold less than the one at 21: it is legalized afresh (rule 7), as the fresh search does."""
    path = tmp_path / "decoder.onnx"
    benchmark_decoder(path, 1200, 400_000)
    evaluated = static_shapes._evaluated

    def opset_dependent(
        op_type: str, outputs: int, names: Any, attributes: Any, feeds: Any, opset: int, key: Any
    ) -> Any:
        if op_type == "Div" and opset <= 20:
            return None
        return evaluated(op_type, outputs, names, attributes, feeds, opset, key)

    monkeypatch.setattr(static_shapes, "_evaluated", opset_dependent)
    static_shapes._EVALUATED.clear()
    search = _assert_same_search(path, get_table("cuda", "1.24"), monkeypatch)
    assert search.derived == {20} and not search.legalized_derived
    folded = {k: c.legalization.folded for k, c in search.legalizations.items() if c.legalization}
    assert folded[20] < folded[21]


def test_nothing_derived_without_a_record(tmp_path: Path):
    path = tmp_path / "m.onnx"
    _transpose_relu(path)
    model = ir.load(path)
    table = _table([(13, 20), (21, 22)])
    above = predict_placement(model, table)
    assert derive_prediction(above, None, model, table, 21) is None
