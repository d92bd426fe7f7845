"""Execution-provider knowledge, kept apart from graph rewriting.

- :mod:`~onnxscript_ep_passes.ep.profiles` -- one profile per EP: its names and aliases,
  display name, memory traits, cost rates, session selection and live listing. An EP is
  a value (:class:`EpProfile`); nothing else spells an EP's name.
- :mod:`~onnxscript_ep_passes.ep.names` -- domain and type spelling (a leaf).
- :mod:`~onnxscript_ep_passes.ep.kernel_table` -- which kernels an EP registers at an ORT
  version, and ORT's exact matching rule.
- :mod:`~onnxscript_ep_passes.ep.snapshots` -- the snapshot format and the tables shipped
  under ``ep/data``.
- :mod:`~onnxscript_ep_passes.ep.kernel_listing` and
  :mod:`~onnxscript_ep_passes.ep.live_tables` -- tables listed from the installed ORT.
- :mod:`~onnxscript_ep_passes.ep.target` -- a run's target: the EP, its table, the ORT
  release and the table's provenance (:func:`resolve_target`); ``table_choice`` and
  ``table_source`` keep the old names (:func:`get_table`) and the file reader.
- :mod:`~onnxscript_ep_passes.ep.traits` -- the form of an EP's memory facts (which
  inputs/outputs it keeps in CPU memory, whether ORT moves shape computations off it).
- :mod:`~onnxscript_ep_passes.ep.memo` -- caches keyed by value for the per-node work
  placement and pricing repeat on every call (kernel decisions, per-node inference).
- :mod:`~onnxscript_ep_passes.ep.cost` -- the one cost objective that ranks predicted
  placements and candidates.
- :mod:`~onnxscript_ep_passes.ep.placement` -- predict ORT's node placement and Memcpy count
  for a model on an EP, without creating a session (a package, one module per phase).
- :mod:`~onnxscript_ep_passes.ep.sessions` -- real ORT sessions on any EP: options that
  select it, and the placement and Memcpy nodes ORT really chose.
- :mod:`~onnxscript_ep_passes.ep.profiles.webgpu` -- the real WebGPU plugin EP:
  registration, devices, session options.
"""

from onnxscript_ep_passes.ep.cost import (
    CandidateRank,
    PlacementCost,
    candidate_rank,
    placement_cost,
)
from onnxscript_ep_passes.ep.kernel_table import KernelRange, KernelTable, TableKind
from onnxscript_ep_passes.ep.live_tables import LiveTableUnavailableError, live_table
from onnxscript_ep_passes.ep.placement import (
    NodePlacement,
    PlacementPrediction,
    Transfer,
    predict_placement,
)
from onnxscript_ep_passes.ep.profiles import (
    CPU,
    CUDA,
    DML,
    WEBGPU,
    CostRates,
    EpProfile,
    canonical_ep_name,
    profile_for,
    resolve_ep,
    traits_for,
)
from onnxscript_ep_passes.ep.profiles.webgpu import (
    make_webgpu_session_options,
    register_webgpu,
    webgpu_available,
)
from onnxscript_ep_passes.ep.sessions import (
    MeasuredNode,
    NoEpNodesError,
    PlacementMeasurement,
    make_session_options,
    measure_placement,
)
from onnxscript_ep_passes.ep.snapshots import SnapshotInfo, available_snapshots, load_snapshot
from onnxscript_ep_passes.ep.table_choice import get_table
from onnxscript_ep_passes.ep.target import EpTarget, resolve_target
from onnxscript_ep_passes.ep.traits import EpTraits

__all__ = [
    "CPU",
    "CUDA",
    "DML",
    "WEBGPU",
    "CandidateRank",
    "CostRates",
    "EpProfile",
    "EpTarget",
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
    "TableKind",
    "Transfer",
    "available_snapshots",
    "candidate_rank",
    "canonical_ep_name",
    "get_table",
    "live_table",
    "load_snapshot",
    "make_session_options",
    "make_webgpu_session_options",
    "measure_placement",
    "placement_cost",
    "predict_placement",
    "profile_for",
    "register_webgpu",
    "resolve_ep",
    "resolve_target",
    "traits_for",
    "webgpu_available",
]
