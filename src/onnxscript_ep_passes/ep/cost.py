"""The one cost objective that ranks ways of running a model on an execution provider.

Every decision that compares two predicted placements goes through this module: the
opset choice (:mod:`~onnxscript_ep_passes.passes.lower_for_ep`), the legalization search
(:mod:`~onnxscript_ep_passes.passes.legalize`) and the reports. Rules:

1. :func:`placement_cost` is the objective: what running a predicted placement costs,
   as a :class:`PlacementCost`. Lower is better; costs compare through
   :meth:`PlacementCost.key` only. Today the objective is the number of nodes that fall
   back to CPU for lack of a kernel (ORT's own choice to keep shape computations on CPU
   is not a fallback), then the number of Memcpy nodes ORT would insert.
2. :func:`candidate_rank` orders candidates (an opset, plain or legalized): the
   objective first, then the fewest of the model's nodes replaced (so a native kernel at
   a reachable opset beats an expansion), then the higher opset, then plain before
   legalized. The tie-breaks never outweigh the objective.
3. A rewrite is worth keeping only when it makes the objective strictly lower
   (:meth:`PlacementCost.improves_on`).
"""

from __future__ import annotations

__all__ = ["CandidateRank", "PlacementCost", "candidate_rank", "placement_cost"]

import dataclasses
import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from onnxscript_ep_passes.ep.placement import PlacementPrediction


@functools.total_ordering
@dataclasses.dataclass(frozen=True, eq=False)
class PlacementCost:
    """What running one predicted placement costs (lower is better).

    Attributes:
        fallback_nodes: Nodes on CPU for lack of an EP kernel.
        memcpy: Memcpy nodes ORT would insert between the EP and CPU.
    """

    fallback_nodes: int
    memcpy: int

    def key(self) -> tuple[float, ...]:
        """What costs are compared by, in order."""
        return (self.fallback_nodes, self.memcpy)

    def improves_on(self, other: PlacementCost) -> bool:
        """Strictly cheaper than ``other``."""
        return self.key() < other.key()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlacementCost):
            return NotImplemented
        return self.key() == other.key()

    def __lt__(self, other: PlacementCost) -> bool:
        return self.key() < other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __str__(self) -> str:
        return f"{self.fallback_nodes} fallback nodes, {self.memcpy} Memcpy"


def placement_cost(prediction: PlacementPrediction) -> PlacementCost:
    """The objective: what running ``prediction`` on its EP costs (module docstring)."""
    return PlacementCost(fallback_nodes=len(prediction.fallback_nodes), memcpy=prediction.memcpy)


@dataclasses.dataclass(frozen=True, order=True)
class CandidateRank:
    """Orders candidates: compared field by field, lower first (module docstring, rule 2)."""

    cost: PlacementCost
    replaced: int
    negative_opset: int
    legalized: bool

    @property
    def opset(self) -> int:
        return -self.negative_opset


def candidate_rank(
    prediction: PlacementPrediction, *, opset: int, replaced: int = 0, legalized: bool = False
) -> CandidateRank:
    """The rank of the candidate ``opset`` (legalized or not) whose placement is ``prediction``.

    ``replaced`` counts the model's nodes the candidate rewrote (by the lowering's
    adapters, or by legalization's expansions).
    """
    return CandidateRank(placement_cost(prediction), replaced, -opset, legalized)
