"""The ``lower`` subcommand's work (its options and the program are in :mod:`.cli`).

- :func:`lower_proto`: the plain lowering without the IR, when only labels change
  (:mod:`~onnxscript_ep_passes.lowering.proto_fast_path`), saved with its weights copy
  begun early (:class:`~onnxscript_ep_passes.proto_save.ProtoSave`);
- :func:`lower_to_opset`, :func:`lower_for_ep`: the full passes on the onnx-ir model, each
  returning whether the model changed and the line to show (and :func:`lower_for_ep` the
  ``--report-json`` report, which the caller writes after OUT).
"""

from __future__ import annotations

__all__ = ["lower_for_ep", "lower_proto", "lower_to_opset", "model_opset"]

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import onnx
    import onnx_ir as ir

    from onnxscript_ep_passes.ep.kernel_table import KernelTable


def model_opset(model: ir.Model) -> int:
    from onnxscript_ep_passes.lowering.lower_opset import default_opset

    opset = default_opset(model.opset_imports)
    if opset is None:
        raise ValueError("the model imports no ai.onnx opset")
    return opset


def lower_proto(
    proto: onnx.ModelProto,
    data: Path | Literal[False] | None,
    out: str,
    target: int,
    model_path: str | None = None,
) -> str:
    """Lower ``proto`` (read from ``model_path``) and save it to ``out`` without building
    the IR when only labels change (see lowering/proto_fast_path.py); "" when the full
    pass must run (``proto`` is then as it was)."""
    from onnxscript_ep_passes.lowering.lower_opset import default_opset
    from onnxscript_ep_passes.lowering.proto_fast_path import may_lower_proto, try_lower_proto
    from onnxscript_ep_passes.proto_save import ProtoSave

    source = default_opset({o.domain: o.version for o in proto.opset_import})
    if data is False or not may_lower_proto(proto, target):
        return ""
    with ProtoSave(proto, out, data, model_path) as saving:  # the weights copy starts now
        if not try_lower_proto(proto, target):
            return ""  # the copy stops and what it staged goes
        saving.commit(proto)
    return f"opset {source} -> {target}"


def lower_to_opset(model: ir.Model, target: int, source: int) -> tuple[bool, str]:
    from onnxscript_ep_passes.lowering.lower_opset import LowerOpsetPass

    if target >= source:
        return False, f"already at opset {source} (target {target})"
    LowerOpsetPass(target)(model)
    return True, f"opset {source} -> {target}"


def lower_for_ep(
    model: ir.Model, args: argparse.Namespace, table: KernelTable | None = None
) -> tuple[bool, str, dict[str, Any] | None]:
    """Lower ``model`` for ``args.ep`` (with ``table``, a ``--kernel-table`` read already);
    return whether it changed, the line to show and, with ``--report-json``, the report to
    write (the caller writes it once OUT is saved)."""
    from onnxscript_ep_passes.ep.dims import parse_dims
    from onnxscript_ep_passes.passes.lower_for_ep import EpLoweringResult, LowerOpsetForEpPass
    from onnxscript_ep_passes.report import choice_report

    lowering = LowerOpsetForEpPass(
        args.ep,
        args.ort_version,
        args.target_opset,
        table=table,
        legalize=not args.no_legalize,
        dims=parse_dims(args.dims),
        measure=args.measure,
        kernel_table=args.kernel_table,
        lowest_opset=args.lowest_opset,
    )
    result = lowering(model)
    assert isinstance(result, EpLoweringResult)
    choice = result.choice
    if choice is None:
        return False, f"the CPU EP runs every opset (model at opset {model_opset(model)})", None
    report = choice_report(model, choice, model_name=args.model) if args.report_json else None
    return choice.changes_model, choice.summary(), report
