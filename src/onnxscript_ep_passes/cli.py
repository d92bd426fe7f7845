"""Command line: ``onnxscript-ep-passes lower|report`` (or ``python -m onnxscript_ep_passes``).

- ``lower IN -o OUT --target-opset N``: lower exactly to opset N.
- ``lower IN -o OUT --ep NAME [--ort-version V] [--no-legalize]``: lower to the opset
  best for that EP, expanding nodes it cannot run at any opset when that helps.
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
import importlib.machinery
import importlib.util
import json
import logging
import sys
import types
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from onnxscript_ep_passes.errors import DowngradeError

if TYPE_CHECKING:
    import onnx_ir as ir

# Start-up is a large part of a run on small models, so each command imports what it
# needs when it runs: ``lower --target-opset`` never imports onnxruntime, onnxscript or
# the EP machinery (tests/test_cli.py checks it).

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
        logger.error("lower needs --target-opset or --ep")
        return 1
    from onnxscript_ep_passes.model_io import load_model, save_model

    external = {"auto": None, "always": True, "never": False}[args.external_data]
    if args.ep is None and _lower_proto(args, external):
        return 0
    model = load_model(args.model)
    lowering: ir.passes.InPlacePass
    if args.ep is not None:
        from onnxscript_ep_passes.passes.lower_for_ep import LowerOpsetForEpPass

        lowering = LowerOpsetForEpPass(
            args.ep, args.ort_version, args.target_opset, legalize=not args.no_legalize
        )
    else:
        from onnxscript_ep_passes.lowering.lower_opset import LowerOpsetPass

        lowering = LowerOpsetPass(args.target_opset)
    try:
        lowering(model)
    except DowngradeError as error:
        sys.stderr.write(f"{error}\n")
        return EXIT_REFUSED
    save_model(model, args.output, external_data=external, weights=args.weights)
    logger.info("wrote %s", args.output)
    return 0


def _lower_proto(args: argparse.Namespace, external: bool | None) -> bool:
    """Lower and save without building the IR when only labels change (see
    lowering/proto_fast_path.py); False when the full pass must run."""
    from onnxscript_ep_passes.lowering.lower_opset import LowerOpsetPass
    from onnxscript_ep_passes.lowering.proto_fast_path import try_lower_proto
    from onnxscript_ep_passes.model_io import load_graph_proto, proto_source_file, save_proto

    LowerOpsetPass(args.target_opset)  # rejects a target it does not support
    proto = load_graph_proto(args.model)
    source = proto_source_file(proto, args.model, external_data=external, weights=args.weights)
    if source is False or not try_lower_proto(proto, args.target_opset):
        return False
    save_proto(proto, args.output, source)
    logger.info("wrote %s", args.output)
    return True


def _report(args: argparse.Namespace) -> int:
    from onnxscript_ep_passes.model_io import load_model
    from onnxscript_ep_passes.report import format_report, placement_report

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


class _DeferredModule(types.ModuleType):
    """Stands in ``sys.modules`` for a module until an attribute of it is first read."""

    def __getattr__(self, attr: str) -> Any:
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        real = importlib.import_module(name)
        self.__dict__.update(real.__dict__)  # later reads skip this method
        return getattr(real, attr)


def _defer_sympy() -> None:
    """Import sympy on first use, not at start-up.

    onnx-ir imports sympy at its top (about 0.3 s, a third of a small model's run) but
    needs it only for arithmetic on symbolic dims, which no command here does. Until an
    attribute of it is read, ``sys.modules["sympy"]`` holds a stand-in; the first read
    imports the real module, so code that uses sympy gets it. Nothing changes when sympy
    is already imported or not installed.
    """
    if "sympy" in sys.modules:
        return
    # onnx_ir._symbolic_shapes reads sympy attributes at import time: defer it too.
    # Its spec is looked up without importing onnx_ir (which would import sympy).
    onnx_ir = importlib.util.find_spec("onnx_ir")
    specs = {
        "sympy": importlib.util.find_spec("sympy"),
        "onnx_ir._symbolic_shapes": importlib.machinery.PathFinder.find_spec(
            "onnx_ir._symbolic_shapes", onnx_ir.submodule_search_locations
        )
        if onnx_ir is not None and "onnx_ir" not in sys.modules
        else None,
    }
    for name, spec in specs.items():
        if spec is not None:
            stand_in = _DeferredModule(name)
            stand_in.__spec__ = spec
            sys.modules[name] = stand_in


def main(argv: Sequence[str] | None = None) -> int:
    _defer_sympy()
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
