"""Listing an EP's kernels from the ONNX Runtime installed in this process.

The two ways ORT lists kernels, for any EP by ORT's name; which way an EP takes is its
profile's (:mod:`~onnxscript_ep_passes.ep.profiles`):

- :func:`list_builtin_kernels` -- a provider compiled into ORT (CPU, CUDA, DirectML):
  ``get_all_opkernel_def()`` filtered by provider; listing CUDA needs a machine where its
  library loads. When that lists nothing, a plugin EP registered under the same name (a CUDA
  plugin bundled with onnxruntime-gpu) is tried with ``get_registered_ep_kernel_defs``.
- :func:`list_plugin_kernels` -- a plugin EP library registered in this process:
  ``get_registered_ep_kernel_defs``.

An EP that cannot be listed here raises :class:`LiveTableUnavailableError` saying why.
"""

from __future__ import annotations

__all__ = [
    "LiveTableUnavailableError",
    "installed_ort_version",
    "list_builtin_kernels",
    "list_plugin_kernels",
]

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from onnxscript_ep_passes.ep.kernel_table import KernelTable, TableKind

logger = logging.getLogger(__name__)

_Row = tuple[str, str, int, int | None, Mapping[str, Iterable[str]] | None]


class LiveTableUnavailableError(RuntimeError):
    """The installed ONNX Runtime cannot list this EP's kernels in this process."""


def installed_ort_version() -> str:
    import onnxruntime as ort

    return str(ort.__version__)


def _capi() -> Any:
    try:
        from onnxruntime.capi import _pybind_state as capi
    except ImportError as e:  # pragma: no cover - onnxruntime is a dependency
        raise LiveTableUnavailableError(f"onnxruntime is not importable: {e}") from e
    return capi


def _rows_from_defs(defs: Iterable[Any], provider: str) -> list[_Row]:
    rows: list[_Row] = []
    for d in defs:
        if getattr(d, "provider", provider) != provider:
            continue
        start, end = d.version_range
        types = {str(k): [str(t) for t in v] for k, v in dict(d.type_constraints).items()}
        rows.append((str(d.domain), str(d.op_name), int(start), int(end), types))
    return rows


def list_plugin_kernels(ort_name: str, *, ep_version: str | None = None) -> KernelTable:
    """The kernels of the plugin EP ``ort_name`` registered in this process.

    Raises:
        LiveTableUnavailableError: ORT cannot list them (the message says why).
    """
    capi = _capi()
    try:
        defs = capi.get_registered_ep_kernel_defs(ort_name)
    except Exception as e:
        raise LiveTableUnavailableError(f"cannot list {ort_name} kernels: {e}") from e
    return KernelTable.from_rows(
        ort_name,
        installed_ort_version(),
        "live:get_registered_ep_kernel_defs",
        _rows_from_defs(defs, ort_name),
        ep_version=ep_version,
        kind=TableKind.LIVE,
    )


def list_builtin_kernels(ort_name: str) -> KernelTable:
    """The kernels of the provider ``ort_name`` compiled into the installed ORT (module doc).

    Raises:
        LiveTableUnavailableError: the provider is not available or lists nothing here.
    """
    import onnxruntime as ort

    capi = _capi()
    version = installed_ort_version()
    available = ort.get_available_providers()
    if ort_name in available:
        try:
            rows = _rows_from_defs(capi.get_all_opkernel_def(), ort_name)
        except Exception as e:
            raise LiveTableUnavailableError(
                f"get_all_opkernel_def() failed while listing {ort_name} (its library must "
                f"load, e.g. a GPU machine for CUDA): {e}"
            ) from e
        if rows:
            return KernelTable.from_rows(
                ort_name, version, "live:get_all_opkernel_def", rows, kind=TableKind.LIVE
            )
    if hasattr(capi, "get_registered_ep_kernel_defs"):
        try:
            table = list_plugin_kernels(ort_name)
        except LiveTableUnavailableError as e:
            logger.debug("get_registered_ep_kernel_defs(%s) failed: %s", ort_name, e)
        else:
            if table.ranges:
                return table
    raise LiveTableUnavailableError(
        f"{ort_name} is not available in the installed onnxruntime {version} "
        f"(available providers: {available}); its kernels can only be listed where its "
        "library loads (for CUDA: onnxruntime-gpu on a machine with a GPU)"
    )
