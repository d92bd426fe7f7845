"""Deprecated: :mod:`~onnxscript_ep_passes.ep.target` reads a ``--kernel-table`` file
(:func:`~onnxscript_ep_passes.ep.target.read_kernel_table`) and resolves a run's table.

:func:`resolve_table` is ``resolve_target(...).table``; the other names are
:mod:`~onnxscript_ep_passes.ep.target`'s.
"""

from __future__ import annotations

__all__ = ["MAX_TABLE_BYTES", "MEASURED_ONLY", "read_kernel_table", "resolve_table"]

import os

from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.target import (
    MAX_TABLE_BYTES,
    MEASURED_ONLY,
    read_kernel_table,
    resolve_target,
)


def resolve_table(
    ep: str,
    ort_version: str | None = None,
    *,
    kernel_table: str | os.PathLike[str] | None = None,
    measure: bool = False,
) -> KernelTable:
    """Deprecated: ``resolve_target(...).table``
    (:func:`~onnxscript_ep_passes.ep.target.resolve_target`)."""
    return resolve_target(ep, ort_version, kernel_table=kernel_table, measure=measure).table
