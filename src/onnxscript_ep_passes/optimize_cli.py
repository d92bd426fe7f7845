"""The ``optimize`` subcommand's arguments and work (the command itself is in cli.py).

:func:`add_arguments` declares its options; :func:`run` loads the model, runs
:class:`~onnxscript_ep_passes.pipeline.OptimizeForEpPass`, saves the result, writes
``--report-json`` (validated by :func:`report_schema`, the JSON Schema shipped as
``optimize_report.schema.json``) and returns the lines to show (one per fusion tried; with ``--measure``
one per candidate measured, predicted vs measured; then the output).
"""

from __future__ import annotations

__all__ = ["add_arguments", "report_schema", "run"]

import argparse
import json
from pathlib import Path
from typing import Any


def report_schema() -> dict[str, Any]:
    """The JSON Schema of ``optimize --report-json`` (``OptimizeForEpPass.report()``)."""
    from onnxscript_ep_passes.report import package_schema

    return package_schema("optimize_report.schema.json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="input .onnx file")
    parser.add_argument("-o", "--output", required=True, help="output .onnx file")
    parser.add_argument("--ep", required=True, help="webgpu, cuda, dml, or an ORT EP name")
    parser.add_argument("--ort-version", help="the ORT release the model will run on")
    parser.add_argument("--target-opset", type=int, help="lower to this opset, not the best")
    parser.add_argument("--no-legalize", action="store_true", help="never expand nodes")
    parser.add_argument("--no-fuse", action="store_true", help="no com.microsoft fusions")
    parser.add_argument(
        "--max-length",
        type=int,
        default=4096,
        help="longest past + current sequence a fused attention must support (default 4096)",
    )
    measure_help = (
        "run the fused and the unfused model in real ORT sessions on the EP (and the "
        "lowering's best opsets); keep the fastest (the EP must be loadable here)"
    )
    parser.add_argument("--measure", action="store_true", help=measure_help)
    dims_help = "sizes of symbolic dimensions for estimates and measured runs (NAME=SIZE,...)"
    parser.add_argument("--dims", metavar="NAME=SIZE,...", help=dims_help)
    parser.add_argument("--report-json", help="write what was fused (JSON) to this file")
    padding_help = (
        "keep a fusion that equals the unfused model at every position attention_mask keeps "
        "even where it differs at padding positions (default: every position must agree)"
    )
    parser.add_argument("--allow-padding-differences", action="store_true", help=padding_help)
    lowest_help = "weigh no opset below N (default 18): a faster search (see lower --help)"
    parser.add_argument("--lowest-opset", metavar="N", type=int, help=lowest_help)


def run(args: argparse.Namespace) -> list[str]:
    from onnxscript_ep_passes.ep.dims import parse_dims
    from onnxscript_ep_passes.model_io import load_model, save_model
    from onnxscript_ep_passes.pipeline import OptimizeForEpPass

    model = load_model(args.model)
    pipeline = OptimizeForEpPass(
        args.ep,
        args.ort_version,
        args.target_opset,
        legalize=not args.no_legalize,
        fuse=not args.no_fuse,
        max_length=args.max_length,
        dims=parse_dims(args.dims),
        measure=args.measure,
        lowest_opset=args.lowest_opset,
        allow_padding_differences=args.allow_padding_differences,
    )
    pipeline(model)
    save_model(model, args.output)
    if args.report_json:
        Path(args.report_json).write_text(json.dumps(pipeline.report(), indent=1) + "\n")
    lines = [f"fusion {r.summary()}" for r in pipeline.fusions]
    lines += [f"candidate {c.summary()}" for c in pipeline.candidates]
    return [*lines, f"wrote {args.output}"]
