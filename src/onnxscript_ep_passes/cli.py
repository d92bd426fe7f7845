"""Command line: ``onnxscript-ep-passes lower`` (and ``python -m onnxscript_ep_passes``).

Exit status: 0 on success; 2 when the model cannot be lowered exactly (the offending
nodes are listed and OUT is not written); 1 for other errors (bad arguments, I/O).
"""

from __future__ import annotations

__all__ = ["main"]

import argparse
import logging
import sys
from collections.abc import Sequence

from onnxscript_ep_passes.errors import DowngradeError
from onnxscript_ep_passes.lowering.lower_opset import LowerOpsetPass
from onnxscript_ep_passes.model_io import load_model, save_model

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
    lower.add_argument(
        "--external-data",
        choices=("auto", "always", "never"),
        default="auto",
        help="save weights to OUT.data: auto = when the input had external data or is large",
    )
    return parser


def _configure_logging(verbose: int, quiet: bool) -> None:
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


def _lower(args: argparse.Namespace) -> int:
    if args.target_opset is None:
        logger.error("lower needs --target-opset")
        return 1
    model = load_model(args.model)
    try:
        LowerOpsetPass(args.target_opset)(model)
    except DowngradeError as error:
        sys.stderr.write(f"{error}\n")
        return EXIT_REFUSED
    external = {"auto": None, "always": True, "never": False}[args.external_data]
    save_model(model, args.output, external_data=external)
    logger.info("wrote %s", args.output)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    _configure_logging(args.verbose, args.quiet)
    try:
        if args.command == "lower":
            return _lower(args)
    except (OSError, ValueError) as error:
        logger.error("%s", error)
        return 1
    return 1  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
