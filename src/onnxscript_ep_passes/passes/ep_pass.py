"""The base of the passes for one EP: what the caller named, and the precondition.

Rules:

- ``request`` (:class:`~onnxscript_ep_passes.ep.target.TargetRequest`) holds the EP, the
  ORT release and the table or table file the caller named; it is resolved to an
  :class:`~onnxscript_ep_passes.ep.target.EpTarget` when the pass runs, not when it is made.
- ``profile`` is the EP's profile and ``ep`` ORT's name for it.
- ``requires``: a model for any EP but the host (CPU) must import an ai.onnx opset
  (:class:`~onnxscript_ep_passes.lowering.opset_imports.NoOnnxOpsetError` otherwise, which
  onnx-ir raises unwrapped).
"""

from __future__ import annotations

__all__ = ["EpPass"]

import os

import onnx_ir as ir

from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.profiles import EpProfile
from onnxscript_ep_passes.ep.target import EpTarget, TargetRequest
from onnxscript_ep_passes.lowering.opset_imports import require_default_opset


class EpPass(ir.passes.InPlacePass):
    """An in-place pass for one EP (module docstring)."""

    def __init__(
        self,
        ep: str | EpProfile | EpTarget,
        ort_version: str | None = None,
        table: KernelTable | None = None,
        kernel_table: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__()
        self.request = TargetRequest(ep, ort_version, table, kernel_table)
        self.profile = self.request.profile
        self.ep = self.profile.ort_name

    def requires(self, model: ir.Model) -> None:
        if not self.profile.is_host:
            require_default_opset(model)
