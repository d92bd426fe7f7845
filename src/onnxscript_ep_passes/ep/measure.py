"""Measure candidates in real ORT sessions: placement, Memcpy nodes and latency.

The estimate (:mod:`~onnxscript_ep_passes.ep.cost`) ranks candidates from a kernel
table; measuring asks ORT itself, for any EP it can load here. Rules:

1. One session per candidate, at ORT's default optimization level (what a user gets),
   with the EP first and CPU second
   (:func:`~onnxscript_ep_passes.ep.sessions.measured_session`).
2. Placement is ORT's own record (session config
   ``session.record_ep_graph_assignment_info=1``, then
   ``get_provider_graph_assignment_info()``); Memcpy nodes are counted in the optimized
   model ORT saves (``optimized_model_filepath``). A session in which the EP received no
   node is not a measurement (:class:`~onnxscript_ep_passes.ep.sessions.NoEpNodesError`).
3. Inputs are generated from the model's input types with the same dimension sizes as
   the estimate (:class:`~onnxscript_ep_passes.ep.dims.DimSizes`): floats standard normal
   (seeded), integers 1 (a valid token id, an attention mask of ones), booleans true.
4. Latency: ``warmup`` runs, then the median of ``runs`` timed runs, in milliseconds.
5. :func:`pick_fastest` chooses the lowest median latency; equal latencies go to the
   earlier candidate (the caller passes them best-estimate first).
6. :func:`measure_interleaved` measures several candidates on a shared machine: one
   session each (rule 1), all warmed up, then ``rounds`` rounds in which each candidate
   runs once in turn (ABAB...), so a burst of load from elsewhere hits every candidate
   alike; each gets the median (and the minimum) of its rounds.
"""

from __future__ import annotations

__all__ = [
    "CandidateMeasurement",
    "generate_inputs",
    "measure_candidate",
    "measure_interleaved",
    "pick_fastest",
]

import dataclasses
import logging
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnxscript_ep_passes.ep.dims import DimSizes
from onnxscript_ep_passes.ep.sessions import measured_session

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CandidateMeasurement:
    """What a real session showed for one candidate model.

    Attributes:
        ep: The EP measured (ORT's name).
        memcpy: Memcpy nodes in ORT's optimized model.
        cpu_nodes: Nodes ORT placed on another EP than ``ep`` (CPU), Memcpy excluded.
        ep_nodes: Nodes ORT placed on ``ep``.
        latency_ms: Median latency of the timed runs.
        runs: Timed runs.
        min_ms: Fastest timed run (set by :func:`measure_interleaved`).
    """

    ep: str
    memcpy: int
    cpu_nodes: int
    ep_nodes: int
    latency_ms: float
    runs: int
    min_ms: float | None = None

    def to_dict(self) -> dict[str, float | int]:
        return {"memcpy": self.memcpy, "cpu_nodes": self.cpu_nodes, "latency_ms": self.latency_ms}


def _numpy_dtype(elem_type: int) -> np.dtype[Any]:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def generate_inputs(
    model: onnx.ModelProto, dims: DimSizes | None = None, *, seed: int = 0
) -> dict[str, np.ndarray]:
    """Inputs for every graph input of ``model`` that is not an initializer (rule 3)."""
    sizes = dims or DimSizes()
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        shape = [
            d.dim_value
            if d.HasField("dim_value")
            else sizes.named(d.dim_param)
            if d.dim_param
            else 1
            for d in tensor_type.shape.dim
        ]
        dtype = _numpy_dtype(tensor_type.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[value.name] = np.ones(shape, dtype=np.bool_)
        else:
            feeds[value.name] = np.ones(shape, dtype=dtype)
    return feeds


class _Timed:
    """A candidate's real session (rule 1), its placement (rule 2) and inputs (rule 3)."""

    def __init__(
        self,
        model: ir.Model | onnx.ModelProto,
        ep: str,
        dims: DimSizes | None,
        provider_options: dict[str, str] | None,
    ) -> None:
        import onnxruntime as ort

        proto = model if isinstance(model, onnx.ModelProto) else ir.serde.serialize_model(model)
        self.session, self.placement = measured_session(
            proto,
            ep,
            graph_optimization_level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
            provider_options=provider_options,
        )
        self.feeds = generate_inputs(proto, dims)
        self.names = [o.name for o in self.session.get_outputs()]
        self.times: list[float] = []

    def run(self, timed: bool = True) -> None:
        start = time.perf_counter()
        self.session.run(self.names, self.feeds)
        if timed:
            self.times.append((time.perf_counter() - start) * 1000.0)

    def result(self, with_min: bool = False) -> CandidateMeasurement:
        return CandidateMeasurement(
            ep=self.placement.ep,
            memcpy=self.placement.memcpy,
            cpu_nodes=len(self.placement.cpu_nodes),
            ep_nodes=self.placement.ep_node_count,
            latency_ms=round(statistics.median(self.times), 4),
            runs=len(self.times),
            min_ms=round(min(self.times), 4) if with_min else None,
        )


def measure_candidate(
    model: ir.Model | onnx.ModelProto,
    ep: str,
    dims: DimSizes | None = None,
    *,
    warmup: int = 2,
    runs: int = 10,
    provider_options: dict[str, str] | None = None,
) -> CandidateMeasurement:
    """Create a real session for ``model`` on ``ep`` and measure it (module docstring).

    Raises:
        NoEpNodesError: the EP received no node (the session would run on CPU only).
        RuntimeError: the EP cannot be loaded here.
    """
    timed = _Timed(model, ep, dims, provider_options)
    for _ in range(warmup):
        timed.run(timed=False)
    for _ in range(max(1, runs)):
        timed.run()
    result = timed.result()
    logger.debug("measured on %s: %s", timed.placement.ep, result)
    return result


def measure_interleaved(
    models: Sequence[ir.Model | onnx.ModelProto],
    ep: str,
    dims: DimSizes | None = None,
    *,
    warmup: int = 3,
    rounds: int = 20,
    provider_options: dict[str, str] | None = None,
) -> list[CandidateMeasurement]:
    """Measure ``models`` on ``ep`` in interleaved rounds (rule 6), in their order.

    Raises:
        NoEpNodesError, RuntimeError: as :func:`measure_candidate`.
    """
    timed = [_Timed(model, ep, dims, provider_options) for model in models]
    for _ in range(warmup):
        for candidate in timed:
            candidate.run(timed=False)
    for _ in range(max(1, rounds)):
        for candidate in timed:
            candidate.run()
    return [candidate.result(with_min=True) for candidate in timed]


def pick_fastest(measured: Sequence[tuple[Any, CandidateMeasurement]]) -> Any:
    """The key of the fastest measurement (rule 5)."""
    if not measured:
        raise ValueError("no candidate was measured")
    best = min(range(len(measured)), key=lambda i: (measured[i][1].latency_ms, i))
    return measured[best][0]
