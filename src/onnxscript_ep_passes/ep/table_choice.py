"""Deprecated: :mod:`~onnxscript_ep_passes.ep.target` resolves a run's target.

:func:`get_table` is :func:`~onnxscript_ep_passes.ep.target.lookup_table` (a live table or
the nearest snapshot) and :func:`release_assumed` is
:func:`~onnxscript_ep_passes.ep.target.release_assumed`; passes and commands call
:func:`~onnxscript_ep_passes.ep.target.resolve_target`, which also reads ``--kernel-table``
and falls back to measuring.
"""

from __future__ import annotations

__all__ = ["get_table", "release_assumed"]

from onnxscript_ep_passes.ep.target import lookup_table as get_table
from onnxscript_ep_passes.ep.target import release_assumed
