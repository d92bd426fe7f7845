"""Use the real WebGPU plugin EP (``onnxruntime-ep-webgpu``), and measure where ORT places nodes.

Rules:

- The plugin is registered once per process under the name ``"webgpu"``
  (:func:`register_webgpu` is idempotent). Before registering, the environment variable
  ``ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER=1`` is set unless the caller already set it, so
  a software Vulkan driver (Mesa lavapipe, see ``tools/setup_webgpu.sh``) counts as an
  adapter on machines without a GPU.
- :func:`webgpu_available` never raises: it returns ``(False, reason)`` when the plugin,
  the driver or a working session is missing, so tests can skip with the reason.
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
    "PLUGIN_REGISTRATION_NAME",
    "WEBGPU_EP_NAME",
    "MeasuredNode",
    "NoEpNodesError",
    "PlacementMeasurement",
    "make_session_options",
    "make_webgpu_session_options",
    "measure_placement",
    "plugin_version",
    "register_webgpu",
    "webgpu_available",
    "webgpu_devices",
]

import collections
import dataclasses
import functools
import logging
import os
import re
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx

from onnxscript_ep_passes._onnx import iter_nodes

logger = logging.getLogger(__name__)

WEBGPU_EP_NAME = "WebGpuExecutionProvider"
PLUGIN_REGISTRATION_NAME = "webgpu"
_SOFTWARE_ADAPTER_ENV = "ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER"

_lock = threading.Lock()
_registered = False


class NoEpNodesError(RuntimeError):
    """The session assigned no node to the requested EP (it would run wholly on CPU)."""


def plugin_version() -> str | None:
    """Installed version of ``onnxruntime-ep-webgpu``, or None."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("onnxruntime-ep-webgpu")
    except PackageNotFoundError:
        return None


def register_webgpu(*, allow_software_adapter: bool = True) -> str:
    """Register the WebGPU plugin EP library with ONNX Runtime (once per process).

    Args:
        allow_software_adapter: set ``ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER=1`` unless the
            variable is already set, so lavapipe (CPU Vulkan) is accepted as an adapter.

    Returns:
        The registration name (``"webgpu"``).

    Raises:
        ImportError: ``onnxruntime-ep-webgpu`` is not installed.
        RuntimeError: ORT refused to load the library.
    """
    global _registered
    import onnxruntime as ort
    import onnxruntime_ep_webgpu

    with _lock:
        if _registered:
            return PLUGIN_REGISTRATION_NAME
        if allow_software_adapter:
            os.environ.setdefault(_SOFTWARE_ADAPTER_ENV, "1")
        try:
            ort.register_execution_provider_library(
                PLUGIN_REGISTRATION_NAME, onnxruntime_ep_webgpu.get_library_path()
            )
        except Exception as e:
            if "already registered" not in str(e).lower():
                raise RuntimeError(f"Cannot register the WebGPU plugin EP: {e}") from e
        _registered = True
        logger.info(
            "Registered WebGPU plugin EP %s from %s",
            plugin_version(),
            onnxruntime_ep_webgpu.get_library_path(),
        )
    return PLUGIN_REGISTRATION_NAME


def webgpu_devices() -> list[Any]:
    """The ``OrtEpDevice`` objects of the WebGPU EP (registers the plugin first)."""
    import onnxruntime as ort

    register_webgpu()
    return [d for d in ort.get_ep_devices() if d.ep_name == WEBGPU_EP_NAME]


def _probe_model() -> bytes:
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])
    node = onnx.helper.make_node("Relu", ["x"], ["y"], name="probe_relu")
    graph = onnx.helper.make_graph([node], "webgpu_probe", [x], [y])
    model = onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid("", 14)], ir_version=8
    )
    return model.SerializeToString()


@functools.lru_cache(maxsize=2)
def webgpu_available(run_probe: bool = True) -> tuple[bool, str]:
    """Whether the WebGPU EP works here, and if not, why (never raises).

    Checks that ``onnxruntime-ep-webgpu`` imports, that its library registers, that ORT
    reports a WebGPU device (an adapter: a GPU, or lavapipe with the software-adapter
    variable) and, with ``run_probe``, that a one-Relu session really puts its node on
    the EP and runs.
    """
    try:
        import onnxruntime_ep_webgpu  # noqa: F401
    except ImportError as e:
        return (
            False,
            f"onnxruntime-ep-webgpu is not installed ({e}); pip install onnxruntime-ep-webgpu",
        )
    try:
        register_webgpu()
        devices = webgpu_devices()
    except Exception as e:
        return False, f"cannot register the WebGPU plugin EP: {e}"
    if not devices:
        return False, (
            "the WebGPU plugin found no adapter: install a Vulkan driver (tools/setup_webgpu.sh "
            f"installs Mesa lavapipe) and set {_SOFTWARE_ADAPTER_ENV}=1"
        )
    if not run_probe:
        return True, "WebGPU plugin registered with a device"
    try:
        m = measure_placement(_probe_model(), "webgpu")
        import numpy as np
        import onnxruntime as ort

        sess = ort.InferenceSession(_probe_model(), make_webgpu_session_options())
        out = sess.run(None, {"x": np.array([[-1, 2, -3], [4, -5, 6]], dtype=np.float32)})[0]
        if not np.array_equal(out, np.array([[0, 2, 0], [4, 0, 6]], dtype=np.float32)):
            return False, f"the WebGPU probe session computed a wrong result: {out!r}"
    except Exception as e:
        return False, f"a WebGPU probe session failed: {e}"
    return True, f"WebGPU EP works ({m.ep_node_count} probe node on the EP)"


def make_webgpu_session_options(
    *,
    provider_options: Mapping[str, str] | None = None,
    session_options: Any | None = None,
) -> Any:
    """``SessionOptions`` that put the WebGPU EP first (then ORT's CPU EP).

    Registers the plugin, then calls ``add_provider_for_devices`` with every WebGPU
    device. Pass ``session_options`` to extend existing options.

    Raises:
        RuntimeError: the plugin has no device (no Vulkan adapter).
    """
    import onnxruntime as ort

    devices = webgpu_devices()
    if not devices:
        raise RuntimeError(
            "No WebGPU device: install a Vulkan driver (tools/setup_webgpu.sh) and set "
            f"{_SOFTWARE_ADAPTER_ENV}=1"
        )
    so = session_options if session_options is not None else ort.SessionOptions()
    so.add_provider_for_devices(devices, dict(provider_options or {}))
    return so


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
    ep: str,
    *,
    graph_optimization_level: Any | None = None,
    provider_options: Mapping[str, str] | None = None,
) -> tuple[Any, list[Any] | None]:
    """Session options (and the ``providers`` argument) that select ``ep`` first.

    WebGPU goes through the plugin devices; a built-in EP (CUDA, DirectML) through the
    ``providers`` list, or through its devices when it is a registered plugin EP. Returns
    ``(session_options, providers_or_None)``.
    """
    import onnxruntime as ort

    from onnxscript_ep_passes.ep.kernel_table import canonical_ep_name

    canonical = canonical_ep_name(ep)
    so = ort.SessionOptions()
    if graph_optimization_level is not None:
        so.graph_optimization_level = graph_optimization_level
    if canonical == WEBGPU_EP_NAME:
        make_webgpu_session_options(provider_options=provider_options, session_options=so)
        return so, None
    if canonical == "CPUExecutionProvider":
        raise ValueError("Measuring placement needs a non-CPU EP")
    if canonical in ort.get_available_providers():
        return so, [(canonical, dict(provider_options or {})), "CPUExecutionProvider"]
    # A plugin EP registered in this process (e.g. the CUDA plugin bundled with some
    # onnxruntime-gpu builds) is selected through its devices.
    devices = [d for d in ort.get_ep_devices() if d.ep_name == canonical]
    if devices:
        so.add_provider_for_devices(devices, dict(provider_options or {}))
        return so, None
    raise RuntimeError(
        f"{canonical} is not available in onnxruntime {ort.__version__} "
        f"(available: {ort.get_available_providers()}; no plugin EP devices for it)"
    )


def measure_placement(
    model: str | os.PathLike[str] | bytes | onnx.ModelProto,
    ep: str = "webgpu",
    *,
    graph_optimization_level: Any | None = None,
    provider_options: Mapping[str, str] | None = None,
) -> PlacementMeasurement:
    """Create a real ORT session for ``model`` on ``ep`` and report where ORT placed nodes.

    Args:
        model: A path, serialized bytes or a ``ModelProto``.
        ep: ``"webgpu"`` (the plugin) or a built-in EP available in the installed ORT
            (``"cuda"`` on a GPU machine with onnxruntime-gpu).
        graph_optimization_level: an ``onnxruntime.GraphOptimizationLevel``; default
            ``ORT_DISABLE_ALL`` so the measured graph is the graph as written.
        provider_options: options for the EP.

    Raises:
        NoEpNodesError: the EP received no node at all.
    """
    import onnxruntime as ort

    from onnxscript_ep_passes.ep.kernel_table import canonical_ep_name

    canonical = canonical_ep_name(ep)
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
    return measurement
