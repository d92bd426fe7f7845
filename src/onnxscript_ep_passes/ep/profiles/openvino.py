"""The OpenVINO EP's profile: Intel's EP, whose tensors stay in host memory.

ORT name ``OpenVINOExecutionProvider``, compiled into the ``onnxruntime-openvino`` wheel
(which bundles the OpenVINO runtime); aliases ``openvino`` and ``ov``. Sessions select it
through the ``providers`` list with the provider option ``device_type`` (``CPU`` unless
the caller gives another: ``GPU``, ``NPU``, ``AUTO:...``).

Rules:

1. **Claims by op type.** OpenVINO is a compiling EP: its ``GetCapability`` asks its
   supported-op list (``onnxruntime/core/providers/openvino/ov_versions/data_ops.cc``)
   whether an op type is supported on the device, and compiles each claimed subgraph. It
   registers no kernels, so there is nothing to list live (:func:`_no_live_listing`;
   ``get_all_opkernel_def()`` kills a process of the onnxruntime-openvino 1.24.1 wheel
   with a segmentation fault, even when asked for the CPU EP's kernels:
   ``breaks_builtin_listing``, so no table is listed that way there). Its table is the shipped snapshot ``openvino-ort-1.24``,
   *transcribed* from the "ONNX Layers supported using OpenVINO" table of ORT's docs (CPU
   column), which every verdict made with it says (``(transcribed from docs)``).
2. **Host memory.** With ``device_type`` CPU (and on an integrated GPU) its tensors live in
   host memory: ORT inserts no Memcpy between it and the CPU EP, so placement predicts none
   and the cost prices no transfer (``traits.host_memory``; its rates have no link).
3. **No CPU preference.** Its ``GetCapability`` does not call ORT's
   ``GetCpuPreferredNodes``: shape arithmetic it supports stays on it.
4. **Loads here** only where the onnxruntime-openvino wheel is installed (it replaces the
   ``onnxruntime`` module, like onnxruntime-gpu); :func:`_loads_here` says why not.
"""

from __future__ import annotations

__all__ = ["OPENVINO", "OPENVINO_DEFAULT_OPTIONS", "OPENVINO_RATES"]

from collections.abc import Mapping
from typing import Any

from onnxscript_ep_passes.ep.kernel_listing import LiveTableUnavailableError
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.profiles.base import (
    CPU_ORT_NAME,
    CostRates,
    EpProfile,
    register,
)
from onnxscript_ep_passes.ep.traits import EpTraits

_ORT_NAME = "OpenVINOExecutionProvider"
_WHEEL = "onnxruntime-openvino"

OPENVINO_DEFAULT_OPTIONS: Mapping[str, str] = {"device_type": "CPU"}
"""Provider options a session gets unless the caller sets them (rule 2: the CPU device)."""

OPENVINO_RATES = CostRates(
    memcpy_latency_us=0.0,
    link_bytes_per_us=20_000.0,
    ep_flops_per_us=100_000.0,
    ep_bytes_per_us=20_000.0,
    basis=(
        "host memory, no link (OpenVINO on the CPU: no Memcpy, no transfer); compute "
        "twice the CPU EP's figure for OpenVINO's compiled graph, the host's memory "
        "bandwidth (orders of magnitude, not a measurement)"
    ),
)
"""The rates of an EP in host memory (rule 2): no Memcpy latency, no PCIe."""


def _select(so: Any, provider_options: Mapping[str, str]) -> list[Any] | None:
    import onnxruntime as ort

    if _ORT_NAME not in ort.get_available_providers():
        raise RuntimeError(_unavailable(ort.__version__, ort.get_available_providers()))
    options = {**OPENVINO_DEFAULT_OPTIONS, **provider_options}
    return [(_ORT_NAME, options), CPU_ORT_NAME]


def _unavailable(version: str, providers: list[str]) -> str:
    return (
        f"{_ORT_NAME} is not available in onnxruntime {version} (available: {providers}); "
        f"it ships in the {_WHEEL} wheel, which replaces onnxruntime"
    )


def _loads_here() -> tuple[bool, str]:
    """Whether the installed ORT has the OpenVINO EP (rule 4); never raises."""
    try:
        import onnxruntime as ort
    except ImportError as error:
        return False, f"onnxruntime does not import: {error}"
    providers = ort.get_available_providers()
    if _ORT_NAME not in providers:
        return False, _unavailable(ort.__version__, providers)
    return True, ""


def _no_live_listing() -> KernelTable:
    raise LiveTableUnavailableError(
        f"{_ORT_NAME} claims nodes by op type in its GetCapability and registers no "
        "kernels to list (get_all_opkernel_def() crashed the onnxruntime-openvino 1.24.1 "
        "wheel); the shipped transcription of ORT's docs is used"
    )


OPENVINO = register(
    EpProfile(
        ort_name=_ORT_NAME,
        display_name="OpenVINO",
        aliases=("openvino", "ov"),
        traits=EpTraits(
            ep=_ORT_NAME,
            cpu_inputs={},
            cpu_outputs={},
            prefers_cpu_for_shape_nodes=False,
            nhwc_domain=None,
            host_memory=True,
            evidence=(
                "ORT docs (OpenVINO EP, device_type CPU): tensors in host memory, no Memcpy "
                "at its boundary; GetCapability by op type (ov_versions/data_ops.cc), no "
                "GetCpuPreferredNodes"
            ),
        ),
        cost=OPENVINO_RATES,
        select_session=_select,
        list_kernels=_no_live_listing,
        check_available=_loads_here,
        breaks_builtin_listing=True,
    )
)
"""Intel OpenVINO, on the CPU device by default."""
