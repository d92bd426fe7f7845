"""The ``optimize`` subcommand's arguments and work (the command itself is in cli.py).

:func:`add_arguments` declares its options; :func:`run` loads the model, runs
:class:`~onnxscript_ep_passes.pipeline.OptimizeForEpPass`, saves the result, writes
``--report-json`` after it, atomically (validated by :func:`report_schema`, the JSON
Schema shipped as ``optimize_report.schema.json``) and returns the lines to show: the
verdict (:meth:`~onnxscript_ep_passes.pipeline.OptimizeResult.summary`), then, with
``-v``, one per fusion tried and (``--measure``) one per candidate measured, predicted vs
measured; then the output written. The command checks the paths before calling it
(:mod:`~onnxscript_ep_passes.cli.files`).
"""

from __future__ import annotations

__all__ = ["add_arguments", "report_schema", "run"]

import argparse
from pathlib import Path
from typing import Any

from onnxscript_ep_passes.cli.options import path_value, positive_int, search_arguments


def report_schema() -> dict[str, Any]:
    """The JSON Schema of ``optimize --report-json`` (``OptimizeResult.report()``)."""
    from onnxscript_ep_passes.reports.report import package_schema

    return package_schema("optimize_report.schema.json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", type=path_value, help="input .onnx file")
    parser.add_argument("-o", "--output", required=True, type=path_value, help="output .onnx file")
    search_arguments(parser)
    parser.add_argument("--no-fuse", action="store_true", help="no com.microsoft fusions")
    parser.add_argument(
        "--max-length",
        type=positive_int,
        default=4096,
        help="longest past + current sequence a fused attention must support (default 4096)",
    )
    report_help = "write what was fused (JSON) to this file"
    parser.add_argument("--report-json", metavar="FILE", type=path_value, help=report_help)
    padding_help = (
        "keep a fusion that equals the unfused model at every position attention_mask keeps "
        "even where it differs at padding positions (default: every position must agree)"
    )
    parser.add_argument("--allow-padding-differences", action="store_true", help=padding_help)


def run(args: argparse.Namespace) -> list[str]:
    """Load, optimize and save the model, then write ``--report-json``; return the lines
    to show."""
    from onnxscript_ep_passes.cli.files import read_table, write_report
    from onnxscript_ep_passes.cli.options import search_options_of, target_of_args
    from onnxscript_ep_passes.model_files.io import (
        check_output_path,
        data_files,
        load_model,
        save_model,
    )
    from onnxscript_ep_passes.model_files.paths import check_not_weights
    from onnxscript_ep_passes.pipeline import OptimizeForEpPass, OptimizeResult

    options = search_options_of(args)
    table = read_table(args)
    model = load_model(args.model)
    check_output_path(model, args.output)
    inputs = [Path(args.model), *data_files(model)]
    check_not_weights({"--report-json": args.report_json}, inputs[1:])
    pipeline = OptimizeForEpPass(
        target_of_args(args, table),
        options=options,
        fuse=not args.no_fuse,
        max_length=args.max_length,
        allow_padding_differences=args.allow_padding_differences,
    )
    result = pipeline(model)
    assert isinstance(result, OptimizeResult)
    save_model(model, args.output)
    report = result.report() if args.report_json else None
    write_report(args.report_json, report, inputs, indent=1)
    lines = [result.summary(Path(args.model).name)]
    if args.verbose:
        lines += [f"fusion {r.summary()}" for r in result.fusions]
        lines += [f"candidate {c.summary()}" for c in result.candidates]
    return [*lines, f"wrote {args.output}"]
