"""Kernel tables listed live from the ONNX Runtime installed in this process.

Rules:

- Built-in providers (CPU, CUDA, DirectML) are listed with ``get_all_opkernel_def()``,
  filtered by provider; listing CUDA needs a machine where its library loads.
- The WebGPU plugin EP is registered first (:mod:`~onnxscript_ep_passes.ep.webgpu`) and
  listed with ``get_registered_ep_kernel_defs``; a plugin EP registered under another
  name (a CUDA plugin bundled with onnxruntime-gpu) is tried the same way.
- An EP that cannot be listed here raises :class:`LiveTableUnavailableError` saying why.
- Tables are cached per EP for the life of the process.
"""

from __future__ import annotations

__all__ = ["LiveTableUnavailableError", "installed_ort_version", "live_table"]

import functools
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from onnxscript_ep_passes.ep import webgpu
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.names import WEBGPU_EP, canonical_ep_name

logger = logging.getLogger(__name__)


class LiveTableUnavailableError(RuntimeError):
    """The installed ONNX Runtime cannot list this EP's kernels in this process."""


def _rows_from_defs(
    defs: Iterable[Any], provider: str
) -> list[tuple[str, str, int, int | None, Mapping[str, Iterable[str]] | None]]:
    rows: list[tuple[str, str, int, int | None, Mapping[str, Iterable[str]] | None]] = []
    for d in defs:
        if getattr(d, "provider", provider) != provider:
            continue
        start, end = d.version_range
        types = {str(k): [str(t) for t in v] for k, v in dict(d.type_constraints).items()}
        rows.append((str(d.domain), str(d.op_name), int(start), int(end), types))
    return rows


def installed_ort_version() -> str:
    import onnxruntime as ort

    return str(ort.__version__)


@functools.cache
def live_table(ep: str) -> KernelTable:
    """List ``ep``'s kernels from the ONNX Runtime installed in this process.

    - Built-in providers (CPU, CUDA, DirectML): ``get_all_opkernel_def()`` filtered by
      provider. Listing CUDA needs a machine where its library loads (a GPU machine).
    - The WebGPU plugin EP: registers ``onnxruntime-ep-webgpu`` (see
      :func:`onnxscript_ep_passes.ep.webgpu.register_webgpu`) and calls
      ``get_registered_ep_kernel_defs("WebGpuExecutionProvider")``; this needs a WebGPU
      adapter (a Vulkan driver; lavapipe will do).
    - A CUDA *plugin* EP bundled with onnxruntime-gpu is tried the same way when the
      built-in listing has no CUDA kernels.

    Tables are cached per EP for the life of the process.

    Raises:
        LiveTableUnavailableError: the EP cannot be listed here; the message says why.
    """
    return _live_table(canonical_ep_name(ep))


@functools.cache
def _live_table(canonical: str) -> KernelTable:
    try:
        import onnxruntime as ort
        from onnxruntime.capi import _pybind_state as capi
    except ImportError as e:  # pragma: no cover - onnxruntime is a dependency
        raise LiveTableUnavailableError(f"onnxruntime is not importable: {e}") from e
    version = str(ort.__version__)

    if canonical == WEBGPU_EP:
        ok, reason = webgpu.webgpu_available(run_probe=False)
        if not ok:
            raise LiveTableUnavailableError(f"WebGPU EP unavailable: {reason}")
        try:
            defs = capi.get_registered_ep_kernel_defs(canonical)
        except Exception as e:
            raise LiveTableUnavailableError(f"cannot list WebGPU kernels: {e}") from e
        rows = _rows_from_defs(defs, canonical)
        return KernelTable.from_rows(
            canonical,
            version,
            "live:get_registered_ep_kernel_defs",
            rows,
            ep_version=webgpu.plugin_version(),
        )

    available = ort.get_available_providers()
    rows = []
    if canonical in available:
        try:
            rows = _rows_from_defs(capi.get_all_opkernel_def(), canonical)
        except Exception as e:
            raise LiveTableUnavailableError(
                f"get_all_opkernel_def() failed while listing {canonical} (its library must "
                f"load, e.g. a GPU machine for CUDA): {e}"
            ) from e
        if rows:
            return KernelTable.from_rows(canonical, version, "live:get_all_opkernel_def", rows)
    if hasattr(capi, "get_registered_ep_kernel_defs"):
        try:
            rows = _rows_from_defs(capi.get_registered_ep_kernel_defs(canonical), canonical)
        except Exception as e:
            logger.debug("get_registered_ep_kernel_defs(%s) failed: %s", canonical, e)
            rows = []
        if rows:
            return KernelTable.from_rows(
                canonical, version, "live:get_registered_ep_kernel_defs", rows
            )
    raise LiveTableUnavailableError(
        f"{canonical} is not available in the installed onnxruntime {version} "
        f"(available providers: {available}); its kernels can only be listed where its "
        "library loads (for CUDA: onnxruntime-gpu on a machine with a GPU)"
    )
