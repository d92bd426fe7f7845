"""Use with ``torch.onnx.export(..., dynamo=True)``.

The exporter returns an ``ONNXProgram`` whose ``model`` is a mutable ``onnx_ir.Model`` and
offers no post-processing hook, so the passes run on ``program.model`` in place; the
program then saves as usual (``program.save(path, external_data=True)``)::

    program = torch.onnx.export(model, args, dynamo=True, opset_version=24)
    lower_for_ep(program, ep="cuda")
    program.save("model.onnx", external_data=True)

Rules:

- Only ``program.model`` is touched, in place (the same ``onnx_ir.Model`` object, so the
  program's ``save``, ``model_proto`` and ``__call__`` all see the lowered model).
- When the model changed, an ONNX Runtime session the program had already cached (by an
  earlier ``program(...)`` call) is released, so the next call runs the lowered model.
- A refused lowering raises :class:`~onnxscript_ep_passes.DowngradeError` and leaves the
  program as it was.
"""

from __future__ import annotations

__all__ = ["lower_for_ep", "lower_program_opset"]

import os
from typing import TYPE_CHECKING, Any, Protocol

import onnx_ir as ir

from onnxscript_ep_passes.ep.profiles import EpProfile
from onnxscript_ep_passes.ep.target import EpTarget
from onnxscript_ep_passes.lowering.lower_opset import LowerOpsetPass
from onnxscript_ep_passes.passes.lower_for_ep import (
    EpLoweringChoice,
    EpLoweringResult,
    LowerOpsetForEpPass,
)
from onnxscript_ep_passes.passes.options import SearchOptions, search_options

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from onnxscript_ep_passes.passes.options import SearchKeywords


class _HasModel(Protocol):
    model: ir.Model


def _model_of(program: Any) -> ir.Model:
    model = getattr(program, "model", None)
    if not isinstance(model, ir.Model):
        raise TypeError(
            "expected the ONNXProgram returned by torch.onnx.export(..., dynamo=True), "
            f"got {type(program).__name__}"
        )
    return model


def _model_changed(program: Any) -> None:
    """Drop the ORT session ``program`` cached for the model it had before the change."""
    release = getattr(program, "release", None)
    if callable(release) and getattr(program, "_inference_session", None) is not None:
        release()


def lower_for_ep(
    program: _HasModel,
    ep: str | EpProfile | EpTarget,
    *,
    ort_version: str | None = None,
    kernel_table: str | os.PathLike[str] | None = None,
    options: SearchOptions | None = None,
    **search: Unpack[SearchKeywords],
) -> EpLoweringChoice | None:
    """Lower ``program.model`` in place to the opset best for ``ep``; return the choice.

    Returns None for the CPU EP (nothing to lower); ``choice.summary()`` is the verdict
    line. See :class:`~onnxscript_ep_passes.passes.LowerOpsetForEpPass` for the arguments;
    ``search`` are the keywords of
    :class:`~onnxscript_ep_passes.passes.options.SearchOptions` (``target_opset``,
    ``lowest_opset``, ``legalize=False``: only choose the opset, never expand a node,
    ``dims``, ``measure``), sugar for ``options``.
    """
    lowering = LowerOpsetForEpPass(
        ep, ort_version, kernel_table=kernel_table, options=search_options(options, **search)
    )
    result = lowering(_model_of(program))
    if result.modified:
        _model_changed(program)
    assert isinstance(result, EpLoweringResult)
    return result.choice


def lower_program_opset(program: _HasModel, target_opset: int) -> bool:
    """Lower ``program.model`` in place to ``target_opset``; True if it changed."""
    modified = LowerOpsetPass(target_opset)(_model_of(program)).modified
    if modified:
        _model_changed(program)
    return modified
