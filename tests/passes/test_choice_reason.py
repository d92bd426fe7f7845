"""Why the search chose its candidate (passes/choice_reason.py): the rule, in words and as
a value, and the report's lines that say it (issue 26 item 4)."""

from __future__ import annotations

import onnx_ir as ir

from onnxscript_ep_passes.ep import get_table
from onnxscript_ep_passes.ep.cost import MEMCPY_LATENCY_US, PlacementCost
from onnxscript_ep_passes.ep.kernel_table import TableKind
from onnxscript_ep_passes.ep.placement import PlacementPrediction, Transfer, predict_placement
from onnxscript_ep_passes.passes.candidates import CandidateEntry
from onnxscript_ep_passes.passes.choice import EpLoweringChoice
from onnxscript_ep_passes.passes.lower_for_ep import choose_target_opset
from onnxscript_ep_passes.reports.report import choice_report, format_report
from tests.ep.models import chain_model


def _cost(memcpy: int, bytes_: int, cpu_us: float, ep_us: float = 0.0) -> PlacementCost:
    return PlacementCost(
        memcpy=memcpy,
        memcpy_bytes=bytes_,
        fallback_nodes=1,
        cpu_nodes=1,
        cpu_flops=cpu_us,
        ep_flops=ep_us,
        transfer_us=memcpy * MEMCPY_LATENCY_US + bytes_ / 10_000.0,
        cpu_us=cpu_us,
        ep_us=ep_us,
    )


def _entry(opset: int, legalized: bool, cost: PlacementCost) -> CandidateEntry:
    copies = tuple(Transfer(f"v{i}", "MemcpyToHost", "main") for i in range(cost.memcpy))
    prediction = PlacementPrediction("E", "snapshot:test", "1.0", (), copies)
    return CandidateEntry(opset, legalized, prediction, cost)


def _choice(chosen: tuple[int, bool], *entries: CandidateEntry) -> EpLoweringChoice:
    return EpLoweringChoice(
        ep="E",
        ort_version="1.0",
        table_source="snapshot:test",
        table_kind=TableKind.SNAPSHOT,
        source_opset=max(e.opset for e in entries),
        chosen_opset=chosen[0],
        candidates={e.key: e for e in entries},
        blocked=None,
        legalized=chosen[1],
    )


def test_a_lower_estimate_that_is_dominated_is_named_with_what_dominates_it() -> None:
    # 19 legalized is estimated lowest only through its EP compute (negative here stands
    # for a saving); 20 moves fewer bytes, leaves less CPU compute and has no more copies.
    source = _entry(20, False, _cost(2, 1_000, 5.0, ep_us=100.0))
    cheap = _entry(19, True, _cost(2, 2_000, 10.0, ep_us=0.0))
    assert cheap.cost.cost < source.cost.cost and source.cost.dominates(cheap.cost)
    reason = _choice((20, False), source, cheap).reason
    assert reason.rule == "cheapest"
    assert reason.dominated == (((19, True), (20, False)),)
    assert "19 legalized is estimated lower but 20 dominates it" in reason.text
    assert reason.to_dict()["dominated"] == [
        {"opset": 19, "legalized": True, "by": {"opset": 20, "legalized": False}}
    ]


def test_ties_and_the_cheapest_say_so() -> None:
    a, b = _entry(20, False, _cost(1, 10, 1.0)), _entry(19, False, _cost(1, 10, 1.0))
    assert _choice((20, False), a, b).reason.rule == "tie"
    c = _entry(19, False, _cost(1, 0, 0.5))
    reason = _choice((19, False), a, c).reason
    assert reason.rule == "cheapest" and reason.dominated == ()


def test_a_choice_wholly_on_the_ep_says_the_search_stopped_there() -> None:
    model = ir.serde.deserialize_model(chain_model(21))
    choice = choose_target_opset(model, get_table("cuda", "1.24"))
    assert (choice.chosen_opset, choice.reason.rule) == (20, "wholly_on_ep")
    report = choice_report(model, choice)
    assert report["chosen"]["rule"] == "wholly_on_ep"
    # Where the copies at 21 come from: the Flatten CUDA 1.24 has no kernel for, a copy in
    # and a copy out (the Identity it also lacks is eliminated by ORT before placing).
    assert report["before"]["memcpy_sources"] == {"Flatten": 2}
    text = format_report(report)
    assert "chosen: wholly on the EP at opset 20" in text
    assert "Memcpy as given (opset 21): Flatten 2" in text


def test_directml_copies_with_no_node_on_cpu_name_the_slots_it_keeps_on_the_host() -> None:
    """DirectML keeps Shape's output and Reshape's shape input in host memory: shape math
    between them runs on the device, so a value crosses twice with no node on the CPU (the
    report's "Memcpy with 0 CPU nodes"). The graph as written: at ORT's default level this
    static chain is folded before placing."""
    before = predict_placement(chain_model(18), get_table("dml", "1.24"), optimization_level=0)
    assert not before.cpu_nodes
    assert before.memcpy_sources() == {"Reshape (CPU input 1)": 1, "Shape (CPU output 0)": 1}
