"""Measure where a real ONNX Runtime session places each node, on any execution provider.

Rules:

- :func:`make_session_options` selects the EP first (then ORT's CPU EP), the way its
  profile says (:mod:`~onnxscript_ep_passes.ep.profiles`): a plugin EP through its
  devices, a provider compiled into ORT through the ``providers`` list.
- :func:`measure_placement` creates a real session and reads ORT's own record of the
  placement (``session.record_ep_graph_assignment_info``) and the Memcpy nodes of the
  optimized model ORT saves. It raises :class:`NoEpNodesError` when the EP received no
  node at all: a session that silently ran everything on CPU is never an EP measurement.
- By default the session runs with graph optimizations disabled, so the measured graph is
  the graph as written (plus what ORT always does: layout transformation for the EP's
  preferred NHWC layout, Memcpy insertion). Pass another level to measure what a user gets.
"""

from __future__ import annotations

__all__ = [
    "MeasuredNode",
    "NoEpNodesError",
    "PlacementMeasurement",
    "make_session_options",
    "measure_placement",
    "measured_session",
]

import collections
import dataclasses
import logging
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx

from onnxscript_ep_passes.core.onnx_utils import iter_nodes
from onnxscript_ep_passes.ep.profiles import WEBGPU, EpProfile, resolve_ep

logger = logging.getLogger(__name__)


class NoEpNodesError(RuntimeError):
    """The session assigned no node to the requested EP (it would run wholly on CPU)."""


_NHWC_DOMAIN = "com.ms.internal.nhwc"
_TOKEN_SUFFIX = re.compile(r"_token_\d+$")


@dataclasses.dataclass(frozen=True)
class MeasuredNode:
    """One node as ORT placed it.

    ``name`` is ORT's: inlined function nodes are ``_inlfunc_<function>_<node>``, nodes the
    layout transformation converted to NHWC are ``<node>_token_<n>`` in the
    ``com.ms.internal.nhwc`` domain, and the Transposes it inserts get generated names.
    """

    name: str
    op_type: str
    domain: str
    provider: str

    @property
    def source_name(self) -> str:
        """The name the node had in the model (the ``_token_<n>`` of NHWC nodes removed)."""
        if self.domain == _NHWC_DOMAIN:
            return _TOKEN_SUFFIX.sub("", self.name)
        return self.name


@dataclasses.dataclass(frozen=True)
class PlacementMeasurement:
    """Where a real ORT session placed each node, and how many Memcpy nodes it inserted.

    Attributes:
        ep: The requested EP (ORT's name).
        ort_version: The ORT version that made the session.
        providers: ``session.get_providers()``.
        nodes: Every node of the session graph (subgraphs included) with its provider;
            Memcpy nodes are not listed (they are counted below).
        memcpy_from_host: MemcpyFromHost nodes in the optimized model (all graphs).
        memcpy_to_host: MemcpyToHost nodes in the optimized model (all graphs).
    """

    ep: str
    ort_version: str
    providers: tuple[str, ...]
    nodes: tuple[MeasuredNode, ...]
    memcpy_from_host: int
    memcpy_to_host: int

    @property
    def memcpy(self) -> int:
        """All Memcpy nodes."""
        return self.memcpy_from_host + self.memcpy_to_host

    @property
    def ep_nodes(self) -> list[MeasuredNode]:
        return [n for n in self.nodes if n.provider == self.ep]

    @property
    def cpu_nodes(self) -> list[MeasuredNode]:
        return [n for n in self.nodes if n.provider != self.ep]

    @property
    def ep_node_count(self) -> int:
        return len(self.ep_nodes)

    def provider_of(self, name: str) -> str | None:
        """Provider of the node named ``name`` in the model (None when ORT has no such node)."""
        for n in self.nodes:
            if n.source_name == name:
                return n.provider
        return None

    def cpu_node_names(self) -> set[str]:
        """Model names of the nodes on CPU."""
        return {n.source_name for n in self.cpu_nodes}

    def summary(self) -> dict[str, dict[str, int]]:
        """``op_type -> {provider: count}``."""
        out: dict[str, collections.Counter[str]] = {}
        for n in self.nodes:
            out.setdefault(n.op_type, collections.Counter())[n.provider] += 1
        return {k: dict(v) for k, v in sorted(out.items())}


def make_session_options(
    ep: str | EpProfile,
    *,
    graph_optimization_level: Any | None = None,
    provider_options: Mapping[str, str] | None = None,
) -> tuple[Any, list[Any] | None]:
    """Session options (and the ``providers`` argument) that select ``ep`` first.

    The EP's profile selects it (module docstring). Returns
    ``(session_options, providers_or_None)``.

    Raises:
        ValueError: ``ep`` is the CPU EP, or names no EP.
        RuntimeError: the EP is not available here.
    """
    import onnxruntime as ort

    profile = resolve_ep(ep)
    so = ort.SessionOptions()
    if graph_optimization_level is not None:
        so.graph_optimization_level = graph_optimization_level
    return so, profile.session_providers(so, provider_options or {})


def measure_placement(
    model: str | os.PathLike[str] | bytes | onnx.ModelProto,
    ep: str | EpProfile = WEBGPU,
    *,
    graph_optimization_level: Any | None = None,
    provider_options: Mapping[str, str] | None = None,
) -> PlacementMeasurement:
    """Create a real ORT session for ``model`` on ``ep`` and report where ORT placed nodes.

    As :func:`measured_session`, without the session.
    """
    return measured_session(
        model,
        ep,
        graph_optimization_level=graph_optimization_level,
        provider_options=provider_options,
    )[1]


def measured_session(
    model: str | os.PathLike[str] | bytes | onnx.ModelProto,
    ep: str | EpProfile = WEBGPU,
    *,
    graph_optimization_level: Any | None = None,
    provider_options: Mapping[str, str] | None = None,
) -> tuple[Any, PlacementMeasurement]:
    """A real ORT session for ``model`` on ``ep``, and where ORT placed its nodes.

    Args:
        model: A path, serialized bytes or a ``ModelProto``.
        ep: an EP profile or its name; it must be available here (the WebGPU plugin,
            or CUDA on a GPU machine with onnxruntime-gpu).
        graph_optimization_level: an ``onnxruntime.GraphOptimizationLevel``; default
            ``ORT_DISABLE_ALL`` so the measured graph is the graph as written.
        provider_options: options for the EP.

    Raises:
        NoEpNodesError: the EP received no node at all.
    """
    import onnxruntime as ort

    canonical = resolve_ep(ep).ort_name
    if graph_optimization_level is None:
        graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so, providers = make_session_options(
        canonical,
        graph_optimization_level=graph_optimization_level,
        provider_options=provider_options,
    )
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    if isinstance(model, onnx.ModelProto):
        model_arg: Any = model.SerializeToString()
    elif isinstance(model, bytes):
        model_arg = model
    else:
        model_arg = os.fspath(model)
    with tempfile.TemporaryDirectory(prefix="ep_placement_") as tmp:
        optimized = Path(tmp) / "optimized.onnx"
        so.optimized_model_filepath = str(optimized)
        # Keep weights out of the saved proto (large models; only the graph is read back).
        so.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", "weights.bin"
        )
        so.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
        )
        if providers is None:
            sess = ort.InferenceSession(model_arg, so)
        else:
            sess = ort.InferenceSession(model_arg, so, providers=providers)
        nodes = tuple(
            MeasuredNode(n.name, n.op_type, n.domain, sub.ep_name)
            for sub in sess.get_provider_graph_assignment_info()
            for n in sub.get_nodes()
            if n.op_type not in ("MemcpyFromHost", "MemcpyToHost")
        )
        saved = onnx.load(str(optimized), load_external_data=False)
    counts = collections.Counter(n.op_type for n in iter_nodes(saved.graph))
    measurement = PlacementMeasurement(
        ep=canonical,
        ort_version=str(ort.__version__),
        providers=tuple(sess.get_providers()),
        nodes=nodes,
        memcpy_from_host=counts.get("MemcpyFromHost", 0),
        memcpy_to_host=counts.get("MemcpyToHost", 0),
    )
    if canonical not in measurement.providers or measurement.ep_node_count == 0:
        raise NoEpNodesError(
            f"{canonical} received no node (session providers {measurement.providers}; "
            f"placement {measurement.summary()}): this session runs on CPU only and is not "
            "an EP measurement"
        )
    logger.debug("Measured placement on %s: %s", canonical, measurement.summary())
    return sess, measurement
