"""Choose between the fused and the unfused model by running both on the EP (``--measure``).

The kernel table predicts where each candidate's nodes go; only a real session says
which runs faster. :func:`choose_by_measurement` takes candidates in preference order
(the fused model first) and, rules:

1. records each candidate's predicted placement (kernel table: Memcpy, CPU nodes,
   fallback nodes, nodes);
2. measures all of them in real sessions on the EP, interleaved
   (:func:`~onnxscript_ep_passes.ep.measure.measure_interleaved`: ORT's default
   optimization level, generated inputs sized by ``dims``, warm-up, then ``rounds``
   rounds of one run each): ORT's own placement, Memcpy nodes, median and minimum latency;
3. chooses the lowest median latency; a tie goes to the earlier (preferred) candidate
   (:func:`~onnxscript_ep_passes.ep.measure.pick_fastest`);
4. an EP ORT cannot load here is an error (``ValueError``), never a silent estimate.
"""

from __future__ import annotations

__all__ = ["CandidateRecord", "choose_by_measurement"]

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import onnx_ir as ir

from onnxscript_ep_passes.ep.dims import DimSizes, DimsSpec
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.measure import measure_interleaved, pick_fastest
from onnxscript_ep_passes.ep.placement import PlacementPrediction, predict_placement

logger = logging.getLogger(__name__)


def predicted_counts(prediction: PlacementPrediction) -> dict[str, int]:
    """The kernel table's figures for one model (the report's ``predicted`` objects)."""
    return {
        "memcpy": prediction.memcpy,
        "fallback_nodes": len(prediction.fallback_nodes),
        "cpu_nodes": len(prediction.cpu_nodes),
        "nodes": len(prediction.nodes),
    }


@dataclasses.dataclass
class CandidateRecord:
    """One candidate of the choice: predicted and measured figures, and whether it won."""

    name: str
    predicted: dict[str, int]
    measured: dict[str, Any] | None = None
    chosen: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def summary(self) -> str:
        """``fused: predicted 1 Memcpy, 6 CPU nodes; measured 1 Memcpy, 6 CPU nodes, ...``."""
        p = self.predicted
        text = f"{self.name}: predicted {p['memcpy']} Memcpy, {p['cpu_nodes']} CPU nodes"
        m = self.measured
        if m is not None:
            text += (
                f"; measured {m['memcpy']} Memcpy, {m['cpu_nodes']} CPU nodes, "
                f"median {m['median_ms']:.3f} ms, min {m['min_ms']:.3f} ms ({m['runs']} runs)"
            )
        return text + (" (chosen)" if self.chosen else "")


def choose_by_measurement(
    candidates: Sequence[tuple[str, ir.Model]],
    table: KernelTable,
    dims: DimsSpec = None,
    *,
    rounds: int = 20,
) -> tuple[str, list[CandidateRecord]]:
    """The name of the fastest candidate and every candidate's record (module docstring)."""
    records = [
        CandidateRecord(name, predicted_counts(predict_placement(model, table)))
        for name, model in candidates
    ]
    try:
        measured = measure_interleaved(
            [model for _, model in candidates], table.ep, DimSizes.of(dims), rounds=rounds
        )
    except (RuntimeError, ImportError) as error:
        raise ValueError(
            f"--measure needs a session on {table.ep} here, and ORT cannot make one: {error}"
        ) from error
    for record, result in zip(records, measured):
        record.measured = {
            "memcpy": result.memcpy,
            "cpu_nodes": result.cpu_nodes,
            "ep_nodes": result.ep_nodes,
            "median_ms": result.latency_ms,
            "min_ms": result.min_ms,
            "runs": result.runs,
        }
    best: str = pick_fastest([(r.name, m) for r, m in zip(records, measured)])
    for record in records:
        record.chosen = record.name == best
        logger.debug("candidate %s", record.summary())
    return best, records
