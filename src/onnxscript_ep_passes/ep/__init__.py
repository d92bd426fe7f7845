"""Execution-provider knowledge, kept apart from graph rewriting.

- :mod:`~onnxscript_ep_passes.ep.kernel_table` -- which kernels an EP registers at an ORT
  version, and ORT's exact matching rule (snapshots shipped under ``ep/data``, or listed
  live from the installed ORT).
- :mod:`~onnxscript_ep_passes.ep.traits` -- which inputs/outputs an EP keeps in CPU memory,
  and whether ORT moves small shape computations off it.
- :mod:`~onnxscript_ep_passes.ep.cost` -- the one cost objective that ranks predicted
  placements and candidates.
- :mod:`~onnxscript_ep_passes.ep.placement` -- predict ORT's node placement and Memcpy count
  for a model on an EP, without creating a session.
- :mod:`~onnxscript_ep_passes.ep.webgpu` -- the real WebGPU plugin EP: registration,
  session options, and measuring placement in a real session.
"""

from onnxscript_ep_passes.ep.cost import (
    CandidateRank,
    PlacementCost,
    candidate_rank,
    placement_cost,
)
from onnxscript_ep_passes.ep.kernel_table import (
    KernelRange,
    KernelTable,
    LiveTableUnavailableError,
    SnapshotInfo,
    available_snapshots,
    canonical_ep_name,
    get_table,
    live_table,
    load_snapshot,
)
from onnxscript_ep_passes.ep.placement import (
    NodePlacement,
    PlacementPrediction,
    Transfer,
    predict_placement,
)
from onnxscript_ep_passes.ep.traits import EpTraits, traits_for
from onnxscript_ep_passes.ep.webgpu import (
    MeasuredNode,
    NoEpNodesError,
    PlacementMeasurement,
    make_webgpu_session_options,
    measure_placement,
    register_webgpu,
    webgpu_available,
)

__all__ = [
    "CandidateRank",
    "EpTraits",
    "KernelRange",
    "KernelTable",
    "LiveTableUnavailableError",
    "MeasuredNode",
    "NoEpNodesError",
    "NodePlacement",
    "PlacementCost",
    "PlacementMeasurement",
    "PlacementPrediction",
    "SnapshotInfo",
    "Transfer",
    "available_snapshots",
    "candidate_rank",
    "canonical_ep_name",
    "get_table",
    "live_table",
    "load_snapshot",
    "make_webgpu_session_options",
    "measure_placement",
    "placement_cost",
    "predict_placement",
    "register_webgpu",
    "traits_for",
    "webgpu_available",
]
