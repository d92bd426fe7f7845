"""The one cost objective: what running a predicted placement costs, in estimated microseconds.

Every decision that compares two predicted placements goes through this module: the
opset choice (:mod:`~onnxscript_ep_passes.passes.lower_for_ep`), the legalization search
(:mod:`~onnxscript_ep_passes.passes.legalize`), the optimize pipeline and the reports.

A fallback node is not a cost: ORT keeps small int64 shape arithmetic on CPU on purpose,
and such a node moves a few bytes. What a user pays is data crossing the device boundary
and real compute left on the CPU. :func:`placement_cost` prices a
:class:`~onnxscript_ep_passes.ep.placement.PlacementPrediction` of a model:

1. **Transfers.** Each predicted Memcpy costs the EP's ``memcpy_latency_us`` (a copy and a
   stream synchronisation) plus its bytes over its ``link_bytes_per_us`` (the rates of the
   EP's profile, :class:`~onnxscript_ep_passes.ep.profiles.CostRates`). Its bytes are those of
   the value it copies (:class:`~onnxscript_ep_passes.ep.compute.ValueSizes`), with
   symbolic dimensions sized by :class:`~onnxscript_ep_passes.ep.dims.DimSizes`.
2. **CPU compute.** Each node on CPU (fallback or ORT's shape-computation choice) costs
   its work on the CPU, roofline style: ``max(flops / CPU_FLOPS_PER_US, bytes /
   CPU_BYTES_PER_US)`` (:meth:`~onnxscript_ep_passes.ep.compute.ValueSizes.node_work`). An
   Attention or MatMul on CPU dominates; an int64 ``Unsqueeze`` costs next to nothing.
3. **EP compute**, the baseline: each node on the EP costs its work at the EP's rates
   (its profile's ``ep_flops_per_us``, ``ep_bytes_per_us``), so a rewrite that adds work on the EP
   (an expansion materialising attention scores) pays for it.
4. ``cost`` = transfers + CPU + EP, rounded to 0.001 us (equal placements tie exactly).
   Node counts (fallback, CPU nodes) are reported, never compared; the Memcpy count is
   priced (rule 1) and bounds dominance (rule 5).
5. **Dominance** (:meth:`PlacementCost.dominates`): a candidate that moves strictly more
   bytes across the boundary *and* leaves strictly more CPU compute than another, with no
   fewer Memcpy nodes, never wins, whatever its EP compute (:func:`undominated` filters
   candidates before the cheapest is taken). The Memcpy count is part of it because each
   copy costs a fixed latency whatever its bytes: a candidate with fewer copies can be
   cheaper while moving more bytes (rtdetr-l's TorchScript export at opset 20 on WebGPU:
   67 Memcpy moving 341 kB, or 16 moving 1.4 MB at 19), so only a candidate worse on all
   three counts is worse whatever the rates. A rewrite is worth keeping only when it lowers the cost without
   being dominated (:meth:`PlacementCost.improves_on`).
6. **Candidates** (an opset, plain or legalized) are ranked by :func:`candidate_rank`:
   the cost, then the fewest of the model's nodes replaced (so at equal cost a native
   kernel at a reachable opset beats an expansion), then the higher opset, then plain
   before legalized; :func:`best_candidate` takes the best undominated one.

The CPU's rates are the host's (``CPU_FLOPS_PER_US``, ``CPU_BYTES_PER_US``); each EP's
come from its profile. An EP whose tensors live in host memory
(:attr:`~onnxscript_ep_passes.ep.traits.EpTraits.host_memory`, OpenVINO) has no Memcpy
predicted (:mod:`~onnxscript_ep_passes.ep.placement.memcpy`), so its transfers cost 0
(its profile's rates have no link latency either). Every other shipped profile uses
:data:`~onnxscript_ep_passes.ep.profiles.base.DISCRETE_GPU_RATES`, a generic discrete
accelerator behind PCIe (10 us per Memcpy, 10 GB/s link, a 50 GFLOP/s / 20 GB/s CPU, a
5 TFLOP/s / 300 GB/s device; ``MEMCPY_LATENCY_US`` ... ``EP_BYTES_PER_US`` name them):
round figures, not a calibration (docs/ep.md, "Where the rates come from", says where each comes from and why
the one EP measurable here, WebGPU on lavapipe, cannot calibrate them:
``benchmarks/calibrate_cost.py``). They rank candidates; they do not predict absolute
latency (``--measure`` does). Rules 5 and 6 hold whatever the rates.
"""

from __future__ import annotations

__all__ = [
    "CPU_BYTES_PER_US",
    "CPU_FLOPS_PER_US",
    "EP_BYTES_PER_US",
    "EP_FLOPS_PER_US",
    "LINK_BYTES_PER_US",
    "MEMCPY_LATENCY_US",
    "CandidateRank",
    "PlacementCost",
    "best_candidate",
    "candidate_rank",
    "placement_cost",
    "rates",
    "undominated",
]

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import onnx_ir as ir

from onnxscript_ep_passes.ep.compute import UNKNOWN_ELEMENTS, NodeWork, ValueSizes
from onnxscript_ep_passes.ep.dims import DimSizes
from onnxscript_ep_passes.ep.profiles import profile_for
from onnxscript_ep_passes.ep.profiles.base import DISCRETE_GPU_RATES
from onnxscript_ep_passes.ep.shapes import infer_missing_shapes

if TYPE_CHECKING:
    from onnxscript_ep_passes.ep.placement import PlacementPrediction

CPU_FLOPS_PER_US = 50_000.0
CPU_BYTES_PER_US = 20_000.0
# The default profile rates, by their historical names.
MEMCPY_LATENCY_US = DISCRETE_GPU_RATES.memcpy_latency_us
LINK_BYTES_PER_US = DISCRETE_GPU_RATES.link_bytes_per_us
EP_FLOPS_PER_US = DISCRETE_GPU_RATES.ep_flops_per_us
EP_BYTES_PER_US = DISCRETE_GPU_RATES.ep_bytes_per_us

_UNKNOWN_WORK = NodeWork(float(UNKNOWN_ELEMENTS), 8.0 * UNKNOWN_ELEMENTS)

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class PlacementCost:
    """The estimated cost of one predicted placement (module docstring).

    Attributes:
        memcpy: Predicted Memcpy nodes.
        memcpy_bytes: Bytes they move per run.
        fallback_nodes: Nodes on CPU for lack of a kernel (reported, not compared).
        cpu_nodes: All nodes on CPU (reported, not compared).
        cpu_flops, ep_flops: Operations left on CPU / run on the EP.
        transfer_us, cpu_us, ep_us: The three parts of the cost.
    """

    memcpy: int
    memcpy_bytes: int
    fallback_nodes: int
    cpu_nodes: int
    cpu_flops: float
    ep_flops: float
    transfer_us: float
    cpu_us: float
    ep_us: float

    @property
    def cost(self) -> float:
        """Estimated microseconds per run (lower is better)."""
        return round(self.transfer_us + self.cpu_us + self.ep_us, 3)

    def dominates(self, other: PlacementCost) -> bool:
        """Strictly fewer bytes moved, strictly less CPU compute and no more Memcpy nodes
        than ``other`` (rule 5)."""
        return (
            self.memcpy_bytes < other.memcpy_bytes
            and self.cpu_us < other.cpu_us
            and self.memcpy <= other.memcpy
        )

    def improves_on(self, other: PlacementCost) -> bool:
        """Worth switching to from ``other``: cheaper and not dominated by it."""
        return self.cost < other.cost and not other.dominates(self)

    def to_dict(self) -> dict[str, float | int]:
        return {**dataclasses.asdict(self), "cost": self.cost}

    def __str__(self) -> str:
        return (
            f"~{self.cost:.1f} us ({self.memcpy} Memcpy moving {self.memcpy_bytes} B, "
            f"{self.cpu_flops:.3g} FLOPs on CPU)"
        )


def undominated(items: Sequence[T], estimate: Callable[[T], PlacementCost]) -> list[T]:
    """The items no other item dominates (rule 5), in their order."""
    costs = [estimate(i) for i in items]
    return [
        item
        for item, cost in zip(items, costs)
        if not any(other.dominates(cost) for other in costs)
    ]


def placement_cost(
    prediction: PlacementPrediction, model: ir.Model, sizes: DimSizes | None = None
) -> PlacementCost:
    """Price ``prediction``, a placement predicted for ``model`` (module docstring)."""
    measure = ValueSizes(sizes or DimSizes(), infer_missing_shapes(model))
    rates = profile_for(prediction.ep).cost
    memcpy_bytes = 0
    for transfer in prediction.transfers:
        value = transfer.ir_value  # the model's value whose data the Memcpy copies
        memcpy_bytes += measure.bytes(value) if value is not None else 4 * UNKNOWN_ELEMENTS
    cpu_flops = ep_flops = cpu_us = ep_us = 0.0
    work_of = measure.work
    unknown = (_UNKNOWN_WORK.flops, _UNKNOWN_WORK.bytes)
    for placed in prediction.nodes:
        # A layout Transpose ORT adds, or a node of a schema's function body ORT inlines,
        # has no node of the model to size it by.
        node = placed.node
        if node is None or placed.inserted_by_ort or placed.inlined_by_ort:
            flops, touched = unknown
        else:
            flops, touched = work_of(node)
        if placed.placement == "cpu":
            cpu_flops += flops
            cpu_us += max(flops / CPU_FLOPS_PER_US, touched / CPU_BYTES_PER_US)
        else:
            ep_flops += flops
            ep_us += max(flops / rates.ep_flops_per_us, touched / rates.ep_bytes_per_us)
    return PlacementCost(
        memcpy=prediction.memcpy,
        memcpy_bytes=memcpy_bytes,
        fallback_nodes=len(prediction.fallback_nodes),
        cpu_nodes=len(prediction.cpu_nodes),
        cpu_flops=cpu_flops,
        ep_flops=ep_flops,
        transfer_us=(
            prediction.memcpy * rates.memcpy_latency_us + memcpy_bytes / rates.link_bytes_per_us
        ),
        cpu_us=cpu_us,
        ep_us=ep_us,
    )


def rates(ep: str | None = None) -> dict[str, float]:
    """The rates the estimate uses for ``ep`` (module docstring), by name; without ``ep``
    the default profile rates."""
    ep_rates = DISCRETE_GPU_RATES if ep is None else profile_for(ep).cost
    return {
        "memcpy_latency_us": ep_rates.memcpy_latency_us,
        "link_bytes_per_us": ep_rates.link_bytes_per_us,
        "cpu_flops_per_us": CPU_FLOPS_PER_US,
        "cpu_bytes_per_us": CPU_BYTES_PER_US,
        "ep_flops_per_us": ep_rates.ep_flops_per_us,
        "ep_bytes_per_us": ep_rates.ep_bytes_per_us,
    }


@dataclasses.dataclass(frozen=True)
class CandidateRank:
    """One candidate (an opset, plain or legalized) and what ranks it (rule 6)."""

    cost: PlacementCost
    replaced: int
    opset: int
    legalized: bool

    def key(self) -> tuple[float, int, int, int]:
        """Cost, then the model's nodes replaced, higher opset, plain before legalized."""
        return (self.cost.cost, self.replaced, -self.opset, int(self.legalized))

    def __lt__(self, other: CandidateRank) -> bool:
        return self.key() < other.key()


def candidate_rank(
    cost: PlacementCost, *, opset: int, replaced: int = 0, legalized: bool = False
) -> CandidateRank:
    """The rank of the candidate ``opset`` (legalized or not) that costs ``cost``.

    ``replaced`` counts the model's own nodes the candidate no longer has: those the
    lowering's adapters replaced (as :class:`~onnxscript_ep_passes.lowering.LoweringResult`
    reports them) and those legalization expanded. Nodes an adapter only edited, and nodes
    ORT inlines itself, are not replaced.
    """
    return CandidateRank(cost, replaced, opset, legalized)


def best_candidate(candidates: Sequence[CandidateRank]) -> CandidateRank:
    """The best of the candidates no other dominates (rules 5-6)."""
    return min(undominated(candidates, lambda c: c.cost), key=CandidateRank.key)
