"""The one cost objective: what it counts and how candidates are ranked."""

from __future__ import annotations

from onnxscript_ep_passes.ep.cost import PlacementCost, candidate_rank, placement_cost
from onnxscript_ep_passes.ep.placement import NodePlacement, PlacementPrediction, Transfer


def _prediction(fallback: int, shape: int, memcpy: int) -> PlacementPrediction:
    nodes = [
        NodePlacement(
            f"f{i}", "Transpose", "", 25, "cpu", "no kernel", reason_code="no_kernel_version"
        )
        for i in range(fallback)
    ]
    nodes += [
        NodePlacement(
            f"s{i}",
            "Shape",
            "",
            24,
            "cpu",
            "shape computation",
            is_shape_computation=True,
            reason_code="shape_computation",
        )
        for i in range(shape)
    ]
    nodes.append(NodePlacement("e", "Relu", "", 14, "ep", "kernel"))
    transfers = [Transfer(f"v{i}", "MemcpyFromHost", "graph 'main'") for i in range(memcpy)]
    return PlacementPrediction("X", "test", "1.0", tuple(nodes), tuple(transfers))


def test_cost_counts_fallback_not_shape_computation() -> None:
    cost = placement_cost(_prediction(fallback=2, shape=5, memcpy=3))
    assert cost == PlacementCost(fallback_nodes=2, memcpy=3)
    assert str(cost) == "2 fallback nodes, 3 Memcpy"


def test_cost_improves_only_when_strictly_lower() -> None:
    a = placement_cost(_prediction(1, 0, 4))
    b = placement_cost(_prediction(1, 0, 2))
    assert b.improves_on(a) and not a.improves_on(b) and not a.improves_on(a)
    assert placement_cost(_prediction(0, 0, 9)).improves_on(a)  # fallback weighs first


def test_rank_cost_first_then_replaced_then_higher_opset_then_plain() -> None:
    cheap, dear = _prediction(0, 0, 1), _prediction(1, 0, 0)
    assert candidate_rank(cheap, opset=18, replaced=50, legalized=True) < candidate_rank(
        dear, opset=25
    )
    same = _prediction(0, 0, 1)
    assert candidate_rank(same, opset=21, replaced=1) < candidate_rank(same, opset=24, replaced=2)
    assert candidate_rank(same, opset=24) < candidate_rank(same, opset=23)
    assert candidate_rank(same, opset=24) < candidate_rank(same, opset=24, legalized=True)
    assert candidate_rank(same, opset=24).opset == 24
