"""The WebGPU EP's profile, and the real plugin (``onnxruntime-ep-webgpu``) it runs on.

Profile (:data:`WEBGPU`): ORT name ``WebGpuExecutionProvider``; sessions select it through
the plugin's devices; its kernels are listed with ``get_registered_ep_kernel_defs`` after
the plugin is registered.

Traits, *measured* on the plugin 0.4.0 on ORT 1.32.0 (lavapipe): each CPU-input slot fed by
a CPU node and the optimized model checked for a MemcpyFromHost on that slot (Shape's output
and If's condition checked the other way). The plugin does **not** apply ORT's CPU
preference: ``Gather(data, Shape(x))`` with a graph-input or small-initializer ``data``
stays on WebGPU (measured), unlike the in-tree WebGPU EP, whose ``GetCapability`` calls
``GetCpuPreferredNodes``. Its NHWC kernels live in ``com.ms.internal.nhwc``.

Rules for the plugin:

- The plugin is registered once per process under the name ``"webgpu"``
  (:func:`register_webgpu` is idempotent). Before registering, the environment variable
  ``ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER=1`` is set unless the caller already set it, so
  a software Vulkan driver (Mesa lavapipe, see ``tools/setup_webgpu.sh``) counts as an
  adapter on machines without a GPU.
- :func:`webgpu_available` never raises: it returns ``(False, reason)`` when the plugin,
  the driver or a working session is missing, so tests can skip with the reason. Its
  probe session must put its one node on the EP and compute the right result.

Measuring where ORT places nodes, on any EP, is :mod:`~onnxscript_ep_passes.ep.sessions`.
"""

from __future__ import annotations

__all__ = [
    "PLUGIN_REGISTRATION_NAME",
    "WEBGPU",
    "WEBGPU_EP_NAME",
    "make_webgpu_session_options",
    "plugin_version",
    "register_webgpu",
    "webgpu_available",
    "webgpu_devices",
]

import functools
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

import onnx

from onnxscript_ep_passes.ep.kernel_listing import LiveTableUnavailableError, list_plugin_kernels
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.profiles.base import EpProfile, register
from onnxscript_ep_passes.ep.traits import REDUCE_OPS, EpTraits, slots

logger = logging.getLogger(__name__)

WEBGPU_EP_NAME = "WebGpuExecutionProvider"
PLUGIN_REGISTRATION_NAME = "webgpu"
_SOFTWARE_ADAPTER_ENV = "ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER"

_lock = threading.Lock()
_registered = False


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
        import numpy as np
        import onnxruntime as ort

        so = make_webgpu_session_options()
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        sess = ort.InferenceSession(_probe_model(), so)
        on_ep = [
            node.name
            for assigned in sess.get_provider_graph_assignment_info()
            if assigned.ep_name == WEBGPU_EP_NAME
            for node in assigned.get_nodes()
        ]
        if not on_ep:
            return False, "the WebGPU probe session put its node on CPU, not on the EP"
        out = sess.run(None, {"x": np.array([[-1, 2, -3], [4, -5, 6]], dtype=np.float32)})[0]
        if not np.array_equal(out, np.array([[0, 2, 0], [4, 0, 6]], dtype=np.float32)):
            return False, f"the WebGPU probe session computed a wrong result: {out!r}"
    except Exception as e:
        return False, f"a WebGPU probe session failed: {e}"
    return True, f"WebGPU EP works ({len(on_ep)} probe node on the EP)"


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


def _select(so: Any, provider_options: Mapping[str, str]) -> None:
    make_webgpu_session_options(provider_options=provider_options, session_options=so)


def _list_kernels() -> KernelTable:
    ok, reason = webgpu_available(run_probe=False)
    if not ok:
        raise LiveTableUnavailableError(f"WebGPU EP unavailable: {reason}")
    return list_plugin_kernels(WEBGPU_EP_NAME, ep_version=plugin_version())


# Slots measured on the WebGPU plugin 0.4.0 (ORT 1.32.0, lavapipe).
_WEBGPU_CPU_INPUTS = slots(
    [
        ("Reshape", [1]),
        ("Expand", [1]),
        ("Slice", [1, 2, 3, 4]),
        ("Tile", [1]),
        ("Pad", [1, 2, 3]),
        ("Squeeze", [1]),
        ("Unsqueeze", [1]),
        ("TopK", [1]),
        ("Range", [0, 1, 2]),
        ("Split", [1]),
        ("Resize", [1, 2, 3]),
        ("Clip", [1, 2]),
        ("CumSum", [1]),
        ("Trilu", [1]),
        ("If", [0]),
        # total_sequence_length: fed by a CPU Cast in optimize's fused decoders, no
        # MemcpyFromHost (seqlens_k, slot 5, fed the same way, gets one).
        ("com.microsoft::GroupQueryAttention", [6]),
        *((op, [1]) for op in REDUCE_OPS),
    ]
)
_WEBGPU_CPU_OUTPUTS = slots([("Shape", [0])])


WEBGPU = register(
    EpProfile(
        ort_name=WEBGPU_EP_NAME,
        display_name="WebGPU",
        aliases=("webgpu",),
        traits=EpTraits(
            ep=WEBGPU_EP_NAME,
            cpu_inputs=_WEBGPU_CPU_INPUTS,
            cpu_outputs=_WEBGPU_CPU_OUTPUTS,
            prefers_cpu_for_shape_nodes=False,
            nhwc_domain="com.ms.internal.nhwc",
            evidence="measured: onnxruntime-ep-webgpu 0.4.0 on ORT 1.32.0 (Mesa lavapipe)",
        ),
        select_session=_select,
        list_kernels=_list_kernels,
        check_available=webgpu_available,
    )
)
"""The WebGPU plugin EP."""
