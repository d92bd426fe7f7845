"""Kernel tables listed live from the ONNX Runtime installed in this process.

Rules:

- Each EP is listed the way its profile says (:attr:`EpProfile.live_table
  <onnxscript_ep_passes.ep.profiles.base.EpProfile.live_table>`): a provider compiled into
  ORT with ``get_all_opkernel_def()``, a plugin EP with ``get_registered_ep_kernel_defs``
  after its library is registered (:mod:`~onnxscript_ep_passes.ep.kernel_listing`).
- An EP that cannot be listed here raises :class:`LiveTableUnavailableError` saying why.
- Tables are cached per EP for the life of the process.
"""

from __future__ import annotations

__all__ = [
    "LiveTableUnavailableError",
    "installed_cpu_table",
    "installed_ort_version",
    "live_table",
]

import functools
import logging

from onnxscript_ep_passes.ep.kernel_listing import LiveTableUnavailableError, installed_ort_version
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.profiles import CPU, EpProfile, resolve_ep

logger = logging.getLogger(__name__)


def live_table(ep: str | EpProfile) -> KernelTable:
    """List ``ep``'s kernels from the ONNX Runtime installed in this process (module doc).

    Raises:
        LiveTableUnavailableError: the EP cannot be listed here; the message says why.
        ValueError: ``ep`` names no EP.
    """
    return _live_table(resolve_ep(ep).ort_name)


@functools.cache
def _live_table(ort_name: str) -> KernelTable:
    return resolve_ep(ort_name).live_table()


@functools.cache
def installed_cpu_table() -> KernelTable | None:
    """The installed ORT's CPU kernels, or None when they cannot be listed (callers then
    assume ORT's CPU EP runs every ai.onnx op). Placement reads it twice: which ops ORT
    must inline (no CPU kernel either), and which nodes it can constant-fold (it folds on
    the CPU EP)."""
    try:
        return live_table(CPU)
    except Exception as error:  # no live listing
        logger.debug("no live CPU kernel table: %s", error)
        return None
