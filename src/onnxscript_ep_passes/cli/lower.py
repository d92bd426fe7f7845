"""The ``lower`` subcommand's work (its options and the program are in :mod:`.cli`).

- :func:`run`: the command (its options checked, the paths checked against each other,
  the kernel table read, the model read, lowered and saved, the report written);
- :func:`lower_proto`: the plain lowering without the IR, when only labels change
  (:mod:`~onnxscript_ep_passes.lowering.proto_fast_path`), saved with its weights copy
  begun early (:class:`~onnxscript_ep_passes.model_files.proto_save.ProtoSave`);
- :func:`lower_to_opset`, :func:`lower_for_ep`: the full passes on the onnx-ir model, each
  returning whether the model changed and the line to show (and :func:`lower_for_ep` the
  ``--report-json`` report, which the caller writes after OUT).

When the model changes, one note on stderr (INFO of the command's own logger, shown by
default) names ORT issue 27729, the kernel gap the lowering works around; the verdict
itself is the first line shown on stdout, once.
"""

from __future__ import annotations

__all__ = ["lower_for_ep", "lower_proto", "lower_to_opset", "model_opset", "run"]

import argparse
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from onnxscript_ep_passes.errors import UsageError

if TYPE_CHECKING:
    import onnx
    import onnx_ir as ir

    from onnxscript_ep_passes.ep.kernel_table import KernelTable

command_logger = logging.getLogger("onnxscript_ep_passes.cli.program")  # shown at INFO by default

ORT_TRACKING_NOTE = (
    "ORT issue 27729 tracks the kernel gaps this lowering works around: "
    "https://github.com/microsoft/onnxruntime/issues/27729"
)


def run(args: argparse.Namespace) -> list[str]:
    """Run ``lower`` with the parsed ``args``; return the lines to show (the caller
    prints them): the verdict, then what was written."""
    if args.target_opset is None and args.ep is None:
        raise UsageError("lower needs --target-opset N or --ep NAME")
    if args.ep is None and (args.ort_version or args.no_legalize):
        raise UsageError("--ort-version and --no-legalize need --ep")
    if args.ep is None and (
        args.report_json or args.measure or args.kernel_table or args.dims or args.lowest_opset
    ):
        raise UsageError(
            "--report-json, --measure, --kernel-table, --dims and --lowest-opset need --ep"
        )
    from onnxscript_ep_passes.cli.files import check_paths, read_table, write_report
    from onnxscript_ep_passes.model_files.io import (
        check_output_path,
        data_files,
        model_from_proto,
        parse_graph_proto,
        save_model,
    )
    from onnxscript_ep_passes.model_files.model_checks import check_model_proto
    from onnxscript_ep_passes.model_files.paths import check_not_weights
    from onnxscript_ep_passes.model_files.proto_save import early_save, proto_source_file

    if args.ep is not None:
        from onnxscript_ep_passes.cli.options import search_options_of

        search_options_of(args)  # a bad --lowest-opset is refused before any file is read
    if args.ep is None:
        from onnxscript_ep_passes.lowering.lower_opset import LowerOpsetPass

        LowerOpsetPass(args.target_opset)  # rejects a target it does not support
    writes = {"-o": args.output, "--report-json": args.report_json}
    check_paths(args, writes)
    table = read_table(args)
    name = Path(args.model).name
    external = {"auto": None, "always": True, "never": False}[args.external_data]
    # The structural checks run once the weights copy has begun (lower_proto, early_save).
    proto, extents = parse_graph_proto(args.model)
    data = proto_source_file(proto, args.model, external_data=external, weights=args.weights)
    checked = False
    if args.ep is None:
        fast = lower_proto(
            proto, data, args.output, args.target_opset, args.model, extents=extents, unchecked=True
        )
        if fast:
            command_logger.info(ORT_TRACKING_NOTE)
            return [f"{name}: {fast}", f"wrote {args.output}"]
        checked = True  # lower_proto checked it, whatever it answered
    # The weights copy starts now and overlaps the work (lower --ep: the whole search).
    report = None
    try:
        early = early_save(proto, args.model, args.output, data, extents=extents)
    except Exception:
        if not checked:
            check_model_proto(proto, args.model)  # a refusal of the model comes first
        raise
    with early as saving:
        if not checked:
            check_model_proto(proto, args.model)
        model = model_from_proto(proto, args.model)
        del proto
        if problem := check_output_path(model, args.output, args.weights):
            raise UsageError(problem)
        inputs = [args.model, *data_files(model)]
        check_not_weights({"--report-json": args.report_json}, inputs[1:])
        source = model_opset(model)
        if args.ep is None:
            changed, line = lower_to_opset(model, args.target_opset, source)
        else:
            changed, line, report = lower_for_ep(model, args, table)
        lines = [f"{name}: {line}" if changed else f"nothing to do: {name}: {line}"]
        if changed:
            command_logger.info(ORT_TRACKING_NOTE)
        if not changed and not args.write_unchanged:
            write_report(args.report_json, report, inputs)
            return lines  # the copy stops and what it staged goes
        if saving is None or not saving.commit_model(model):
            save_model(model, args.output, external_data=external, weights=args.weights)
    write_report(args.report_json, report, inputs)
    return [*lines, f"wrote {args.output}"]


def model_opset(model: ir.Model) -> int:
    from onnxscript_ep_passes.lowering.opset_imports import require_default_opset

    return require_default_opset(model)


def lower_proto(
    proto: onnx.ModelProto,
    data: Path | Literal[False] | None,
    out: str,
    target: int,
    model_path: str | None = None,
    *,
    extents: Mapping[Path, int] | None = None,
    unchecked: bool = False,
) -> str:
    """Lower ``proto`` (read from ``model_path``) and save it to ``out`` without building
    the IR when only labels change (see lowering/proto_fast_path.py); "" when the full
    pass must run (``proto`` is then as it was). ``extents``: what
    :func:`~onnxscript_ep_passes.model_files.external_data_checks.check_external_data` returned
    for ``proto``. ``unchecked``: only those checks have run
    (:func:`~onnxscript_ep_passes.model_files.io.parse_graph_proto`): the structural ones
    (:func:`~onnxscript_ep_passes.model_files.model_checks.check_model_proto`) run here, once
    the weights copy has begun, before anything else reads the graph; whatever this
    returns, ``proto`` has passed them (a refusal is raised and leaves nothing staged)."""
    from onnxscript_ep_passes.lowering.lower_opset import default_opset
    from onnxscript_ep_passes.lowering.proto_fast_path import may_lower_proto, try_lower_proto
    from onnxscript_ep_passes.model_files.model_checks import check_model_proto
    from onnxscript_ep_passes.model_files.proto_save import ProtoSave

    label = model_path if model_path is not None else "the model"
    if data is False or not may_lower_proto(proto, target):
        if unchecked:
            check_model_proto(proto, label)
        return ""
    source = default_opset({o.domain: o.version for o in proto.opset_import})
    try:
        saving = ProtoSave(proto, out, data, model_path, extents=extents)  # the copy starts
    except Exception:
        if unchecked:
            check_model_proto(proto, label)  # a refusal of the model comes first
        raise
    with saving:
        if unchecked:
            check_model_proto(proto, label)
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
    from onnxscript_ep_passes.cli.options import search_options_of, target_of_args
    from onnxscript_ep_passes.passes.lower_for_ep import EpLoweringResult, LowerOpsetForEpPass
    from onnxscript_ep_passes.reports.report import choice_report

    lowering = LowerOpsetForEpPass(target_of_args(args, table), options=search_options_of(args))
    result = lowering(model)
    assert isinstance(result, EpLoweringResult)
    choice = result.choice
    if choice is None:
        return False, f"the CPU EP runs every opset (model at opset {model_opset(model)})", None
    report = choice_report(model, choice, model_name=args.model) if args.report_json else None
    return choice.changes_model, choice.summary(), report
