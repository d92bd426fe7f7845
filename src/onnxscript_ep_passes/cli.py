"""Command line: ``onnxscript-ep-passes lower|report`` (or ``python -m onnxscript_ep_passes``).

- ``lower IN -o OUT --target-opset N``: lower exactly to opset N.
- ``lower IN -o OUT --ep NAME [--ort-version V] [--no-legalize]``: lower to the opset
  best for that EP, expanding nodes it cannot run at any opset when that helps.
- ``optimize IN -o OUT --ep NAME [--report-json FILE]``: the deployment pipeline
  (:mod:`~onnxscript_ep_passes.pipeline`): optimize, fuse into ORT kernels the EP has
  (each fusion verified), lower for the EP, optimize again.
- ``report IN --ep NAME [--ort-version V] [--json]``: per op type, nodes on the EP and on
  CPU (with reasons) before and after the chosen lowering, and predicted Memcpy counts.

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
from typing import Any

import onnx_ir as ir

from onnxscript_ep_passes.errors import DowngradeError
from onnxscript_ep_passes.lowering.lower_opset import LowerOpsetPass
from onnxscript_ep_passes.model_io import load_model, save_model
from onnxscript_ep_passes.passes.lower_for_ep import LowerOpsetForEpPass
from onnxscript_ep_passes.report import format_report, placement_report

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
    _add_optimize_parser(commands)
    report = commands.add_parser("report", help="predicted placement on an EP, before/after")
    report.add_argument("model", help="input .onnx file")
    report.add_argument("--ep", required=True, help="webgpu, cuda, dml, or an ORT EP name")
    report.add_argument("--ort-version", help="the ORT release (default: the installed one)")
    report.add_argument("--target-opset", type=int, help="evaluate this opset, not the best")
    report.add_argument("--json", action="store_true", help="print one JSON object")
    report.add_argument(
        "--no-legalize", action="store_true", help="only choose the opset; expand nothing"
    )
    return parser


def _add_optimize_parser(commands: Any) -> None:
    optimize = commands.add_parser(
        "optimize", help="optimize, fuse into the EP's kernels, lower for the EP, optimize"
    )
    optimize.add_argument("model", help="input .onnx file")
    optimize.add_argument("-o", "--output", required=True, help="output .onnx file")
    optimize.add_argument("--ep", required=True, help="webgpu, cuda, dml, or an ORT EP name")
    optimize.add_argument("--ort-version", help="the ORT release the model will run on")
    optimize.add_argument("--target-opset", type=int, help="lower to this opset, not the best")
    optimize.add_argument("--no-legalize", action="store_true", help="never expand nodes")
    optimize.add_argument("--no-fuse", action="store_true", help="no com.microsoft fusions")
    optimize.add_argument(
        "--max-length",
        type=int,
        default=4096,
        help="longest past + current sequence a fused attention must support (default 4096)",
    )
    optimize.add_argument("--report-json", help="write the fusions done (JSON) to this file")


def _configure_logging(verbose: int, quiet: bool) -> None:
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


def _lower(args: argparse.Namespace) -> int:
    if args.target_opset is None and args.ep is None:
        logger.error("lower needs --target-opset or --ep")
        return 1
    model = load_model(args.model)
    lowering: ir.passes.InPlacePass
    if args.ep is not None:
        lowering = LowerOpsetForEpPass(
            args.ep, args.ort_version, args.target_opset, legalize=not args.no_legalize
        )
    else:
        lowering = LowerOpsetPass(args.target_opset)
    try:
        lowering(model)
    except DowngradeError as error:
        sys.stderr.write(f"{error}\n")
        return EXIT_REFUSED
    external = {"auto": None, "always": True, "never": False}[args.external_data]
    save_model(model, args.output, external_data=external, weights=args.weights)
    logger.info("wrote %s", args.output)
    return 0


def _optimize(args: argparse.Namespace) -> int:
    from onnxscript_ep_passes.pipeline import OptimizeForEpPass

    model = load_model(args.model)
    pipeline = OptimizeForEpPass(
        args.ep,
        args.ort_version,
        args.target_opset,
        legalize=not args.no_legalize,
        fuse=not args.no_fuse,
        max_length=args.max_length,
    )
    try:
        pipeline(model)
    except DowngradeError as error:
        sys.stderr.write(f"{error}\n")
        return EXIT_REFUSED
    save_model(model, args.output)
    for record in pipeline.fusions:
        logger.info("fusion %s", record.summary())
    if args.report_json:
        with open(args.report_json, "w", encoding="utf-8") as f:
            json.dump(pipeline.report(), f, indent=1)
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
        if args.command == "optimize":
            return _optimize(args)
    except (OSError, ValueError) as error:
        logger.error("%s", error)
        return 1
    return 1  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
