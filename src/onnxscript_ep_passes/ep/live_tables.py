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

__all__ = ["LiveTableUnavailableError", "installed_ort_version", "live_table"]

import functools

from onnxscript_ep_passes.ep.kernel_listing import LiveTableUnavailableError, installed_ort_version
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.profiles import EpProfile, resolve_ep


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
