"""The candidates of the EP search: the chosen legalized candidate's model built once, by
replaying its legalization's edits, and equal to the model the search priced (or the
working copy itself, for the last candidate), and each candidate equal to its evaluation
from scratch (on real exports, and as a property of random decoder-shaped models: the
priced candidates are the built-and-predicted ones, each legalized one's replayed edits
make the model a fresh legalization makes, and what the pass returns is the chosen
candidate)."""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnxscript_ep_passes.ep.cost import placement_cost
from onnxscript_ep_passes.ep.dims import DimSizes
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.placement import PlacementPrediction, predict_placement
from onnxscript_ep_passes.ep.table_choice import get_table
from onnxscript_ep_passes.lowering.lower_opset import run_lowering
from onnxscript_ep_passes.passes.candidates import SearchSettings
from onnxscript_ep_passes.passes.legalize import legalize
from onnxscript_ep_passes.passes.lower_for_ep import (
    EpLoweringResult,
    LowerOpsetForEpPass,
    _search,
)
from onnxscript_ep_passes.passes.rewrites import replay_rewrites
from tests.harness import benchmark_decoder, run_model
from tests.passes import gelu_neg_model, no_gelu_table
from tests.torch_models import LLM_DIMS, llm_export

FLOAT = onnx.TensorProto.FLOAT


def _ops(model: ir.Model) -> collections.Counter[str]:
    return collections.Counter(n.op_type for n in ir.traversal.RecursiveGraphIterator(model.graph))


def test_a_legalized_model_not_kept_is_rebuilt_the_same() -> None:
    # Gelu has no kernel: every candidate opset 24..20 gets a legalized variant. Each
    # one's model built on demand (lowering steps, then its legalization's edits
    # replayed) is the one the search legalized (kept here: keep_models).
    original, table = gelu_neg_model(), no_gelu_table()
    model = ir.from_proto(original)
    _, _, search = _search(model, table, None, 20, True, SearchSettings(keep_models=True))
    assert sorted(search.legalized) == [20, 21, 22, 23, 24]
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)}
    expected, _ = run_model(original, feeds)
    for opset, candidate in search.legalized.items():
        kept = candidate.model
        assert kept is not None
        candidate.model = None
        rebuilt = search.model_of(model, candidate)
        assert rebuilt is candidate.model and rebuilt is not kept
        assert rebuilt.opset_imports[""] == opset
        assert _ops(rebuilt) == _ops(kept), opset
        proto = ir.to_proto(rebuilt)
        assert proto == ir.to_proto(kept), opset
        onnx.checker.check_model(proto, full_check=True)
        actual, how = run_model(proto, feeds)
        assert how == "onnxruntime"
        np.testing.assert_allclose(actual[0], expected[0], rtol=1e-6, atol=1e-6)
    assert _ops(model) == {"Gelu": 1, "Neg": 1}  # the model searched is untouched


def test_the_chosen_legalized_model_is_the_one_the_search_priced() -> None:
    # The search builds the chosen legalized candidate's model once, after it (its
    # legalization's edits replayed) and returns it: its prediction and price are the
    # chosen candidate's.
    original, table = gelu_neg_model(), no_gelu_table()
    model = ir.from_proto(original)
    choice, kept, search = _search(model, table, None, 20, True, SearchSettings())
    assert choice.legalized and kept is not None
    chosen = choice.candidates[(choice.chosen_opset, True)]
    assert kept is search.legalized[choice.chosen_opset].model
    assert [c.opset for c in search.legalized.values() if c.model is not None] == [chosen.opset]
    assert kept.opset_imports[""] == chosen.opset
    again = predict_placement(kept, table)
    assert _records(again) == _records(chosen.prediction)
    assert _transfers(again) == _transfers(chosen.prediction)
    assert placement_cost(again, kept, DimSizes()) == chosen.cost == choice.after_cost
    proto = ir.to_proto(kept)
    onnx.checker.check_model(proto, full_check=True)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)}
    expected, _ = run_model(original, feeds)
    actual, how = run_model(proto, feeds)
    assert how == "onnxruntime"
    np.testing.assert_allclose(actual[0], expected[0], rtol=1e-6, atol=1e-6)
    assert _ops(model) == {"Gelu": 1, "Neg": 1}  # the model searched is untouched
    result = LowerOpsetForEpPass("TestExecutionProvider", table=table)(ir.from_proto(original))
    assert isinstance(result, EpLoweringResult) and result.choice is not None
    after = result.choice.after
    assert _records(predict_placement(result.model, table)) == _records(after)


@pytest.mark.parametrize("target", [None, 23])
def test_the_last_candidate_keeps_the_working_copy_itself(
    monkeypatch: pytest.MonkeyPatch, target: int | None
) -> None:
    # The last candidate made on the working copy (the floor, or the one target) gets
    # the working copy itself as its model when it is the best so far: no copy is made,
    # and the model is the one a rebuild makes, and runs as the original does.
    import onnxscript_ep_passes.passes.candidates as candidates

    original, table = gelu_neg_model(), no_gelu_table()
    model = ir.from_proto(original)
    copies: list[ir.Model] = []
    real_copy = candidates.copy_with_origins

    def counted(m: ir.Model) -> object:
        copies.append(m)
        return real_copy(m)

    monkeypatch.setattr(candidates, "copy_with_origins", counted)
    choice, kept, search = _search(model, table, target, 23, True, SearchSettings())
    if target is None:  # 24 (the source, legalized on a copy) wins the tie with 23
        assert choice.chosen_opset == 24 and copies == [model]
        return
    assert choice.chosen_opset == 23 and choice.legalized and kept is not None
    assert copies == []  # work itself, not a copy of it
    assert kept is search.legalized[23].model and kept is not model
    rebuilt = search.model_of(model, dataclasses.replace(search.legalized[23], model=None))
    assert _ops(rebuilt) == _ops(kept) and ir.to_proto(rebuilt) == ir.to_proto(kept)
    assert _records(predict_placement(kept, table)) == _records(choice.after)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)}
    expected, _ = run_model(original, feeds)
    actual, how = run_model(ir.to_proto(kept), feeds)
    assert how == "onnxruntime"
    np.testing.assert_allclose(actual[0], expected[0], rtol=1e-6, atol=1e-6)
    assert _ops(model) == {"Gelu": 1, "Neg": 1}  # the model searched is untouched


def _records(prediction: PlacementPrediction) -> list[tuple[object, ...]]:
    return [
        (n.op_type, n.domain, n.since_version, n.placement, n.reason_code, n.inserted_by_ort)
        for n in prediction.nodes
    ]


def _transfers(prediction: PlacementPrediction) -> list[tuple[str, str]]:
    return sorted((t.direction, t.value) for t in prediction.transfers)


@pytest.mark.parametrize(
    ("kind", "ep", "ort_version", "floor"),
    [("gemma3", "webgpu", None, 18), ("qwen3", "cuda", "1.24", 21)],
)
def test_each_candidate_equals_its_evaluation_from_scratch(
    kind: str, ep: str, ort_version: str | None, floor: int
) -> None:
    """The search lowers one working copy step by step and legalizes it in place (then
    puts it back): each candidate's prediction and cost must equal those of a fresh copy
    of the model lowered to its opset (and legalized), evaluated alone."""
    proto = llm_export(kind, 25, kv_cache=True)
    _assert_candidates_from_scratch(proto, get_table(ep, ort_version), DimSizes.of(LLM_DIMS), floor)


@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    blocks=st.integers(1, 3),
    width=st.sampled_from([(16, 2), (16, 4), (32, 4)]),
    seed=st.integers(0, 2**16),
    ep=st.sampled_from([("cuda", "1.24"), ("webgpu", None)]),
)
def test_priced_candidates_of_random_decoders_equal_the_built_ones(
    tmp_path: Path, blocks: int, width: tuple[int, int], seed: int, ep: tuple[str, str | None]
) -> None:
    """Property: on a random decoder-shaped model (benchmarks/make_decoder.py: blocks,
    width, heads and weights drawn), every candidate the search priced equals that
    candidate built from scratch, predicted and priced alone; and the model the pass
    returns, predicted and priced, is the chosen candidate."""
    hidden, heads = width
    path = tmp_path / f"decoder_{blocks}_{hidden}_{heads}_{seed}.onnx"
    proto = benchmark_decoder(path, 18 + 32 * blocks, 20_000, hidden=hidden, heads=heads, seed=seed)
    table = get_table(*ep)
    _assert_candidates_from_scratch(proto, table, DimSizes(), 18)
    result = LowerOpsetForEpPass(ep[0], ep[1], table=table)(ir.from_proto(proto))
    assert isinstance(result, EpLoweringResult) and result.choice is not None
    again = predict_placement(result.model, table)
    assert _records(again) == _records(result.choice.after)
    assert _transfers(again) == _transfers(result.choice.after)
    assert placement_cost(again, result.model, DimSizes()) == result.choice.after_cost


def _assert_candidates_from_scratch(
    proto: onnx.ModelProto, table: KernelTable, sizes: DimSizes, floor: int
) -> None:
    """Each candidate of the search over ``proto`` equals its evaluation from scratch."""
    source = ir.from_proto(proto).opset_imports[""]
    model = ir.from_proto(proto)
    choice, _, search = _search(model, table, None, floor, True, SearchSettings(sizes))
    saved = ir.to_proto(ir.from_proto(proto)).SerializeToString()
    assert ir.to_proto(model).SerializeToString() == saved  # the search left it as it was
    assert len(search.plain) >= 2
    for opset, candidate in search.plain.items():
        fresh = ir.from_proto(proto)
        built: set[ir.Node] = set()
        for step in range(source - 1, opset - 1, -1):
            built.update(run_lowering(fresh, step).built)
        prediction = predict_placement(fresh, table)
        assert _records(candidate.prediction) == _records(prediction), opset
        assert _transfers(candidate.prediction) == _transfers(prediction), opset
        assert candidate.rank.cost == placement_cost(prediction, fresh, sizes), opset
        legalized = search.legalizations.get(opset)
        if legalized is None:
            continue
        order = [n for n in ir.traversal.RecursiveGraphIterator(fresh.graph) if n in built]
        result = legalize(fresh, table, built=order, dims=sizes)
        assert _records(legalized.prediction) == _records(result.after), opset
        assert _transfers(legalized.prediction) == _transfers(result.after), opset
        assert legalized.rank.cost == result.after_cost, opset
        assert [n.op_type for n in legalized.legalization.expanded] == [  # type: ignore[union-attr]
            n.op_type for n in result.expanded
        ]
        # What the search builds of a chosen legalized candidate (its legalization's edits
        # replayed, nothing predicted) is the model the fresh legalization made.
        assert legalized.legalization is not None
        replayed = ir.from_proto(proto)
        made: set[ir.Node] = set()
        for step in range(source - 1, opset - 1, -1):
            made.update(run_lowering(replayed, step).built)
        again = [n for n in ir.traversal.RecursiveGraphIterator(replayed.graph) if n in made]
        result_kept = legalized.legalization
        replay_rewrites(replayed, opset, result_kept.rewrites, table, again)
        assert ir.to_proto(replayed) == ir.to_proto(fresh), opset
    assert choice.chosen_opset in search.plain
