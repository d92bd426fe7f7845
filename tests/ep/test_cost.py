"""The one cost objective: bytes moved across the device boundary, CPU compute, EP compute,
and how candidates are ranked."""

from __future__ import annotations

import dataclasses
import random

import onnx
import onnx.helper as oh
import onnx_ir as ir

from onnxscript_ep_passes.ep import KernelTable, predict_placement
from onnxscript_ep_passes.ep.cost import (
    MEMCPY_LATENCY_US,
    CandidateRank,
    PlacementCost,
    best_candidate,
    candidate_rank,
    placement_cost,
    undominated,
)
from onnxscript_ep_passes.ep.dims import DimSizes

FLOAT = onnx.TensorProto.FLOAT


def _chain(op: str) -> ir.Model:
    """x -> Relu (EP) -> ``op`` (no EP kernel: CPU) -> Relu (EP) -> y."""
    graph = oh.make_graph(
        [
            oh.make_node("Relu", ["x"], ["h"], name="first"),
            oh.make_node(op, ["h", "w"] if op == "MatMul" else ["h"], ["c"], name="cpu"),
            oh.make_node("Relu", ["c"], ["y"], name="relu"),
        ],
        "g",
        [
            oh.make_tensor_value_info("x", FLOAT, ["batch", "sequence_length", 16]),
            oh.make_tensor_value_info("w", FLOAT, [16, 16]),
        ],
        [oh.make_tensor_value_info("y", FLOAT, None)],
    )
    return ir.from_proto(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)]))


_TABLE = KernelTable.from_rows("TestEP", "0.0", "test", [("", "Relu", 14, None, None)])


def test_memcpy_bytes_follow_the_dims() -> None:
    model = _chain("Sin")
    prediction = predict_placement(model, _TABLE)
    assert prediction.memcpy == 2  # h to host, c from host
    small = placement_cost(prediction, model, DimSizes.of("batch=1,sequence_length=4"))
    large = placement_cost(prediction, model, DimSizes.of("batch=2,sequence_length=64"))
    assert small.memcpy_bytes == 2 * 1 * 4 * 16 * 4
    assert large.memcpy_bytes == 2 * 2 * 64 * 16 * 4
    assert small.transfer_us >= 2 * MEMCPY_LATENCY_US
    assert large.cost > small.cost
    assert small.fallback_nodes == 1 and small.cpu_nodes == 1


def test_a_matmul_left_on_cpu_costs_more_than_an_elementwise_op() -> None:
    sizes = DimSizes.of("batch=1,sequence_length=128")
    sin, matmul = _chain("Sin"), _chain("MatMul")
    cost_sin = placement_cost(predict_placement(sin, _TABLE), sin, sizes)
    cost_matmul = placement_cost(predict_placement(matmul, _TABLE), matmul, sizes)
    assert cost_matmul.cpu_flops > 10 * cost_sin.cpu_flops
    assert cost_matmul.cpu_us > cost_sin.cpu_us


def _estimate(bytes_: int, cpu_us: float, ep_us: float) -> PlacementCost:
    return PlacementCost(
        memcpy=1,
        memcpy_bytes=bytes_,
        fallback_nodes=0,
        cpu_nodes=0,
        cpu_flops=cpu_us,
        ep_flops=ep_us,
        transfer_us=bytes_ / 1000,
        cpu_us=cpu_us,
        ep_us=ep_us,
    )


def test_more_bytes_and_more_cpu_compute_never_wins() -> None:
    # A is cheaper in total only through its EP compute; it moves more bytes and leaves
    # more CPU compute than B, so it must not be chosen.
    a = candidate_rank(_estimate(2000, 50.0, 0.0), opset=24)
    b = candidate_rank(_estimate(1000, 40.0, 500.0), opset=21, replaced=5, legalized=True)
    assert a.cost.cost < b.cost.cost
    assert b.cost.dominates(a.cost) and not a.cost.improves_on(b.cost)
    assert undominated([a, b], lambda c: c.cost) == [b]
    assert best_candidate([a, b]) == b


def test_dominance_rule_holds_on_random_candidates() -> None:
    rng = random.Random(0)
    for _ in range(300):
        candidates = [
            CandidateRank(
                _estimate(rng.randint(0, 5) * 1000, rng.randint(0, 5) * 10.0, rng.random() * 300),
                rng.randint(0, 3),
                rng.randint(18, 25),
                rng.random() < 0.5,
            )
            for _ in range(rng.randint(1, 6))
        ]
        best = best_candidate(candidates)
        assert not any(c.cost.dominates(best.cost) for c in candidates)


def test_ties_go_to_the_higher_opset_then_fewer_rewrites() -> None:
    same = _estimate(100, 1.0, 1.0)
    low = candidate_rank(same, opset=21)
    high = candidate_rank(same, opset=23)
    rewritten = candidate_rank(dataclasses.replace(same), opset=23, replaced=4, legalized=True)
    plain_24 = candidate_rank(same, opset=24, replaced=1)
    assert best_candidate([low, high, rewritten]) == high
    assert best_candidate([low, plain_24]) == low  # fewer rewrites first, then higher opset
    assert candidate_rank(same, opset=24) < candidate_rank(same, opset=24, legalized=True)


def _copies(memcpy: int, bytes_: int, cpu_flops: float) -> PlacementCost:
    """A candidate priced as the module says: each copy's latency plus its bytes."""
    cpu_us = cpu_flops / 50_000.0
    return PlacementCost(
        memcpy=memcpy,
        memcpy_bytes=bytes_,
        fallback_nodes=0,
        cpu_nodes=0,
        cpu_flops=cpu_flops,
        ep_flops=0.0,
        transfer_us=memcpy * MEMCPY_LATENCY_US + bytes_ / 10_000.0,
        cpu_us=cpu_us,
        ep_us=0.0,
    )


def test_fewer_copies_moving_more_bytes_are_not_dominated() -> None:
    """rtdetr-l's TorchScript export on WebGPU (issue 26 item 4): at opset 20, 67 Memcpy
    moving 341 kB with 6.4 kFLOP on CPU; at 19, 16 moving 1.4 MB with 135 kFLOP. 19 moves
    more bytes and leaves more CPU compute, but 51 fewer copies make it cheaper: the
    dominance rule, which counts copies too, must not keep 20."""
    at_20 = candidate_rank(_copies(67, 341_400, 6_400.0), opset=20)
    at_19 = candidate_rank(_copies(16, 1_400_000, 135_200.0), opset=19, replaced=1)
    assert at_19.cost.cost < at_20.cost.cost
    assert not at_20.cost.dominates(at_19.cost)
    assert best_candidate([at_20, at_19]) == at_19
    # With as many copies as 20, 19 would be worse on every count: dominated.
    same_count = candidate_rank(_copies(67, 1_400_000, 135_200.0), opset=19)
    assert at_20.cost.dominates(same_count.cost)
    assert best_candidate([at_20, same_count]) == at_20
