"""Command line: ``onnxscript-ep-passes lower|report`` (or ``python -m onnxscript_ep_passes``).

- ``lower IN -o OUT --target-opset N``: lower exactly to opset N.
- ``lower IN -o OUT --ep NAME [--ort-version V] [--no-legalize]``: lower to the opset
  best for that EP, expanding nodes it cannot run at any opset when that helps.
- ``report IN --ep NAME [--ort-version V] [--json]``: per op type, nodes on the EP and on
  CPU (with reasons) before and after the chosen lowering, and predicted Memcpy counts.
- With ``--ep``, both take ``--dims name=size,...`` (sizes of symbolic dimensions for the
  cost estimate), ``--measure`` (run the top candidates in real sessions on the EP and
  keep the fastest) and ``--kernel-table FILE`` (the EP's kernels, snapshot format, for an
  EP without a shipped table); ``lower --report-json FILE`` also writes the JSON report.

Exit status: 0 on success; 2 when the model cannot be lowered exactly (the offending
nodes are listed and OUT is not written); 1 for other errors (bad arguments, I/O).
"""

from __future__ import annotations

__all__ = ["main"]

import argparse
import contextlib
import gc
import json
import logging
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import onnx_ir as ir

from onnxscript_ep_passes.ep.dims import parse_dims
from onnxscript_ep_passes.errors import DowngradeError
from onnxscript_ep_passes.lowering.lower_opset import LowerOpsetPass
from onnxscript_ep_passes.model_io import load_model, save_model
from onnxscript_ep_passes.passes.lower_for_ep import EpLoweringResult, LowerOpsetForEpPass
from onnxscript_ep_passes.report import choice_report, format_report, placement_report

logger = logging.getLogger("onnxscript_ep_passes")

EXIT_REFUSED = 2


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="onnxscript-ep-passes",
        description="Lower ONNX models exactly so they run wholly on an ONNX Runtime EP.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="-v: debug logs")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    commands = parser.add_subparsers(dest="command", required=True)
    lower = commands.add_parser("lower", help="lower a model's ai.onnx opset")
    lower.add_argument("model", help="input .onnx file (external data is read lazily)")
    lower.add_argument("-o", "--output", required=True, help="output .onnx file")
    lower.add_argument("--target-opset", type=int, help="the ai.onnx opset to lower to")
    lower.add_argument("--ep", help="pick the opset best for this EP (webgpu, cuda, dml, ...)")
    lower.add_argument("--ort-version", help="the ORT release the model will run on")
    lower.add_argument(
        "--no-legalize",
        action="store_true",
        help="with --ep: only choose the opset; never expand nodes the EP cannot run",
    )
    lower.add_argument(
        "--external-data",
        choices=("auto", "always", "never"),
        default="auto",
        help="save weights to OUT.data: auto = when the input had external data or is large",
    )
    lower.add_argument(
        "--weights",
        choices=("copy_file", "rewrite"),
        default="copy_file",
        help="copy_file: copy the input's data file whole (fast; weights are never changed); "
        "rewrite: write each used tensor anew",
    )
    _objective_options(lower)
    lower.add_argument(
        "--report-json", metavar="FILE", help="with --ep: also write the JSON report to FILE"
    )
    report = commands.add_parser("report", help="predicted placement on an EP, before/after")
    report.add_argument("model", help="input .onnx file")
    report.add_argument("--ep", required=True, help="webgpu, cuda, dml, or an ORT EP name")
    report.add_argument("--ort-version", help="the ORT release (default: the installed one)")
    report.add_argument("--target-opset", type=int, help="evaluate this opset, not the best")
    report.add_argument("--json", action="store_true", help="print one JSON object")
    report.add_argument(
        "--no-legalize", action="store_true", help="only choose the opset; expand nothing"
    )
    _objective_options(report)
    return parser


def _objective_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--dims",
        metavar="NAME=SIZE,...",
        help="sizes of symbolic dimensions for the cost estimate and measured runs "
        "(default: names with 'batch' 1, 'past' 128, others 128)",
    )
    command.add_argument(
        "--measure",
        action="store_true",
        help="run the best candidates in real ORT sessions on the EP and keep the fastest",
    )
    command.add_argument(
        "--kernel-table",
        metavar="FILE",
        help="the EP's kernels in the snapshot TSV format (for an EP without a shipped table)",
    )


def _configure_logging(verbose: int, quiet: bool) -> None:
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


def _lower(args: argparse.Namespace) -> int:
    if args.target_opset is None and args.ep is None:
        logger.error("lower needs --target-opset or --ep")
        return 1
    if args.ep is None and (args.report_json or args.measure or args.kernel_table or args.dims):
        logger.error("--report-json, --measure, --kernel-table and --dims need --ep")
        return 1
    model = load_model(args.model)
    lowering: ir.passes.InPlacePass
    if args.ep is not None:
        lowering = LowerOpsetForEpPass(
            args.ep,
            args.ort_version,
            args.target_opset,
            legalize=not args.no_legalize,
            dims=parse_dims(args.dims),
            measure=args.measure,
            kernel_table=args.kernel_table,
        )
    else:
        lowering = LowerOpsetPass(args.target_opset)
    try:
        result = lowering(model)
    except DowngradeError as error:
        sys.stderr.write(f"{error}\n")
        return EXIT_REFUSED
    if args.report_json and isinstance(result, EpLoweringResult):
        choice = result.choice
        if choice is not None:
            # The lowering keeps the graph inputs, whose dimensions the report names.
            report = choice_report(model, choice, model_name=args.model)
            Path(args.report_json).write_text(json.dumps(report) + "\n", encoding="utf-8")
    external = {"auto": None, "always": True, "never": False}[args.external_data]
    save_model(model, args.output, external_data=external, weights=args.weights)
    logger.info("wrote %s", args.output)
    return 0


def _report(args: argparse.Namespace) -> int:
    model = load_model(args.model)
    try:
        result = placement_report(
            model,
            args.ep,
            ort_version=args.ort_version,
            target_opset=args.target_opset,
            legalize=not args.no_legalize,
            dims=parse_dims(args.dims),
            measure=args.measure,
            kernel_table=args.kernel_table,
            model_name=args.model,
        )
    except DowngradeError as error:
        sys.stderr.write(f"{error}\n")
        return EXIT_REFUSED
    sys.stdout.write(json.dumps(result) if args.json else format_report(result))
    sys.stdout.write("\n")
    return 0


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: a model's IR is millions of long-lived objects
    that it would scan again and again (a quarter of the run time on large models)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    _configure_logging(args.verbose, args.quiet)
    with _no_gc():
        return _dispatch(args)


def _dispatch(args: argparse.Namespace) -> int:
    try:
        if args.command == "lower":
            return _lower(args)
        if args.command == "report":
            return _report(args)
    except (OSError, ValueError) as error:
        logger.error("%s", error)
        return 1
    return 1  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
