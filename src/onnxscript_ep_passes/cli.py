"""Command line: ``onnxscript-ep-passes lower|report`` (or ``python -m onnxscript_ep_passes``).

- ``lower IN -o OUT --target-opset N``: lower exactly to opset N.
- ``lower IN -o OUT --ep NAME [--ort-version V] [--no-legalize]``: lower to the opset
  best for that EP, expanding nodes it cannot run at any opset when that helps.
- ``report IN --ep NAME [--ort-version V] [--json]``: per op type, nodes on the EP and on
  CPU (with reasons) before and after the chosen lowering, and predicted Memcpy counts.

Exit status: 0 success; 1 bad input or I/O error (one line on stderr naming the problem,
never a traceback; OUT untouched); 2 usage error; 3 the model cannot be lowered exactly
(the offending nodes are listed and OUT is not written).
"""

from __future__ import annotations

__all__ = ["EXIT_BAD_INPUT", "EXIT_OK", "EXIT_REFUSED", "EXIT_USAGE", "main"]

import argparse
import contextlib
import gc
import json
import logging
import sys
from collections.abc import Iterator, Sequence

import onnx_ir as ir

from onnxscript_ep_passes.errors import DowngradeError, InvalidModelError
from onnxscript_ep_passes.lowering.lower_opset import LowerOpsetPass
from onnxscript_ep_passes.model_io import (
    check_output_path,
    load_model,
    reference_problem,
    save_model,
)
from onnxscript_ep_passes.passes.lower_for_ep import LowerOpsetForEpPass
from onnxscript_ep_passes.report import format_report, placement_report

logger = logging.getLogger("onnxscript_ep_passes")

EXIT_OK = 0
EXIT_BAD_INPUT = 1  # the input is not a usable model, or reading/writing failed
EXIT_USAGE = 2  # wrong arguments (argparse's own status)
EXIT_REFUSED = 3  # a valid model that cannot be lowered exactly


class _UsageError(Exception):
    """Arguments that cannot work together; reported like argparse's own errors."""


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
        choices=("copy_file", "rewrite", "reference"),
        default="copy_file",
        help="copy_file (default): copy the input's data file (a reflink where possible); "
        "rewrite: write each used tensor anew; reference: OUT (in the input's directory) "
        "points at the input's data file, no copy, the two models then share that file",
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
    return parser


def _configure_logging(verbose: int, quiet: bool) -> None:
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


def _lower(args: argparse.Namespace) -> int:
    if args.target_opset is None and args.ep is None:
        raise _UsageError("lower needs --target-opset or --ep")
    model = load_model(args.model)
    check_output_path(model, args.output)
    if args.weights == "reference":
        problem = reference_problem(model, args.output)
        if problem is not None:
            raise _UsageError(problem)
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
    parser = _build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose, args.quiet)
    with _no_gc():
        try:
            return _dispatch(args)
        except _UsageError as error:
            parser.print_usage(sys.stderr)
            sys.stderr.write(f"{parser.prog}: error: {error}\n")
            return EXIT_USAGE


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command; every failure becomes one line on stderr and an exit status."""
    try:
        if args.command == "lower":
            return _lower(args)
        if args.command == "report":
            return _report(args)
    except _UsageError:
        raise
    except DowngradeError as error:  # raised outside the commands' own handlers
        sys.stderr.write(f"{error}\n")
        return EXIT_REFUSED
    except InvalidModelError as error:
        logger.error("%s", error)
        return EXIT_BAD_INPUT
    except (OSError, ValueError) as error:
        logger.error("%s", _one_line(error))
        return EXIT_BAD_INPUT
    except (MemoryError, RecursionError) as error:
        logger.error("%s: the model is too large or too deeply nested to process", args.model)
        logger.debug("details", exc_info=error)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        logger.error("interrupted; nothing was written")
        return 130
    except Exception as error:
        # A bug, or a model the checks let through: one line, the traceback with -v.
        logger.error(
            "%s: internal error (%s: %s); rerun with -v for details",
            args.model,
            type(error).__name__,
            _one_line(error),
        )
        logger.debug("traceback", exc_info=error)
        return EXIT_BAD_INPUT
    return EXIT_BAD_INPUT  # pragma: no cover - argparse rejects unknown commands


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
