"""Command line: ``onnxscript-ep-passes lower|report`` (or ``python -m onnxscript_ep_passes``).

Rules:

- Each subcommand is one :class:`Command` in :data:`COMMANDS`: its name, one-line help,
  examples, a function that adds its arguments and one that runs it. Adding a subcommand
  is adding one entry; ``--help`` of the program and of each subcommand lists them.
- Global options (``-v``/``-q``) are accepted before or after the subcommand;
  ``--version`` prints the package's version and those of onnx and ONNX Runtime.
- stdout carries results only (the verdict, the report, ``--json``); logs, ORT's and the
  GPU driver's messages go to stderr.
- One summary per command: its verdict line on stdout. stderr gets warnings, errors and
  the command's own notes; the passes' INFO lines, the lists of nodes and ORT's/Dawn's
  warnings only with ``-v`` (:mod:`~onnxscript_ep_passes.core.console`).
- Text from the model (names, op types, domains) is printed with control characters
  escaped (:mod:`.display`); ``--json`` keeps the exact strings.
- A target that is not below the model's opset (or an EP choice that keeps the model as
  it is) is "nothing to do": exit 0, and OUT is not written unless
  ``--write-unchanged`` asks for it.
- A missing or contradictory option is a usage error (:class:`UsageError`, exit 2 with the
  usage line), found before the model is read where possible.

- A bad option value (``--target-opset 0``, ``--max-length -1``, ``--ep ''``) is a usage
  error naming the option (:mod:`~onnxscript_ep_passes.cli.options`); so is a path that would write over an
  input or another output (:mod:`~onnxscript_ep_passes.model_files.paths`), found before any file is read.
- Ctrl-C, SIGTERM and SIGHUP stop the run (:mod:`~onnxscript_ep_passes.core.signals`): what was being written is
  removed, one line is logged, the exit status is 128 + the signal's number.

Exit status (see :data:`EXIT_STATUS_HELP`): 0 success, 1 bad input or I/O error, 2 usage
error, 3 the model cannot be lowered exactly (the offending nodes are listed, OUT is not
written), 128 + N interrupted by signal N (130: Ctrl-C).
"""

from __future__ import annotations

__all__ = ["COMMANDS", "EXIT_STATUS_HELP", "Command", "UsageError", "main"]

import argparse
import contextlib
import dataclasses
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import logging
import os
import signal
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from onnxscript_ep_passes import __version__
from onnxscript_ep_passes.cli.examples import LOWER_EXAMPLES, OPTIMIZE_EXAMPLES, REPORT_EXAMPLES
from onnxscript_ep_passes.cli.options import path_value, search_arguments
from onnxscript_ep_passes.core.collector import paused_collector
from onnxscript_ep_passes.core.console import configure_logging, native_output
from onnxscript_ep_passes.core.display import shown, shown_lines
from onnxscript_ep_passes.core.signals import Interrupted, interrupts_raised
from onnxscript_ep_passes.errors import (
    EXIT_BAD_INPUT,
    EXIT_REFUSED,
    DowngradeError,
    UsageError,
    one_line,
)

# Start-up is a large part of a run on small models, so each command imports what it
# needs when it runs: ``lower --target-opset`` never imports onnxruntime, onnxscript or
# the EP machinery (tests/cli/test_program.py checks it).

logger = logging.getLogger("onnxscript_ep_passes")

PROG = "onnxscript-ep-passes"

EXIT_STATUS_HELP = """\
exit status:
  0  success (also "nothing to do")
  1  bad input or I/O error: one line naming the problem (docs/safety.md)
  2  usage error (unknown, missing or bad option; paths that would overwrite an input)
  3  the model cannot be lowered exactly: every offending node is listed, OUT is not written
  128+N  interrupted by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP): nothing partial left"""


@dataclasses.dataclass(frozen=True)
class Command:
    """One subcommand.

    Attributes:
        name: What the user types.
        help: One line for the program's ``--help``.
        examples: Example invocations with a comment each, shown by ``NAME --help``.
        add_arguments: Adds the subcommand's own arguments to its parser.
        run: Runs it; returns the exit status (raise :class:`UsageError` for bad options).
    """

    name: str
    help: str
    examples: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# -- lower ---------------------------------------------------------------------------


def _lower_arguments(parser: argparse.ArgumentParser) -> None:
    model_help = "input .onnx file (external data is read lazily)"
    parser.add_argument("model", type=path_value, help=model_help)
    parser.add_argument("-o", "--output", required=True, type=path_value, help="output .onnx file")
    search_arguments(parser, ep_required=False)
    parser.add_argument(
        "--report-json",
        metavar="FILE",
        type=path_value,
        help="with --ep: also write the JSON report to FILE",
    )
    parser.add_argument(
        "--write-unchanged",
        action="store_true",
        help="write OUT even when there is nothing to do (a copy of the input)",
    )
    parser.add_argument(
        "--external-data",
        choices=("auto", "always", "never"),
        default="auto",
        help="save weights to OUT.data: auto = when the input had external data or is large",
    )
    parser.add_argument(
        "--weights",
        choices=("copy_file", "rewrite", "reference"),
        default="copy_file",
        help="copy_file (default): copy the input's data file (a reflink where possible), "
        "OUT is self-contained; rewrite: write each used tensor anew; reference: OUT (in the "
        "input's directory) points at the input's data file, no copy, the two share it",
    )


def _lower(args: argparse.Namespace) -> int:
    from onnxscript_ep_passes.cli.lower import run

    with _stdout_to_stderr():
        lines = run(args)
    for line in lines:
        _say(args, line)
    return 0


# -- report --------------------------------------------------------------------------


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", type=path_value, help="input .onnx file")
    search_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--all", action="store_true", help="list every op, not only those whose placement changes"
    )
    parser.add_argument(
        "--no-run",
        action="store_true",
        help="do not run the model (and, when it fails, the candidates) on ORT's CPU EP",
    )


def _report(args: argparse.Namespace) -> int:
    if args.json and args.all:
        raise UsageError("--all applies to the text report; --json always holds every node")
    from onnxscript_ep_passes.cli.files import read_table
    from onnxscript_ep_passes.cli.options import search_options_of, target_of_args
    from onnxscript_ep_passes.model_files.io import load_model
    from onnxscript_ep_passes.reports.report import placement_report, print_report

    options = search_options_of(args)
    table = read_table(args)
    model = load_model(args.model)
    with _stdout_to_stderr():
        result = placement_report(
            model,
            target_of_args(args, table),
            options=options,
            model_name=args.model,
            check_runs=not args.no_run,
        )
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        print_report(result, show_all=args.all)
    return 0


# -- optimize (arguments and run in cli/optimize.py) ------------------------------------


def _optimize_arguments(parser: argparse.ArgumentParser) -> None:
    from onnxscript_ep_passes.cli.optimize import add_arguments

    add_arguments(parser)


def _optimize(args: argparse.Namespace) -> int:
    from onnxscript_ep_passes.cli.files import check_paths
    from onnxscript_ep_passes.cli.optimize import run
    from onnxscript_ep_passes.cli.options import search_options_of

    search_options_of(args)  # a bad --lowest-opset is refused before any file is read
    check_paths(args, {"-o": args.output, "--report-json": args.report_json})
    with _stdout_to_stderr():
        lines = run(args)
    for line in lines:
        _say(args, line)
    return 0


COMMANDS: list[Command] = [
    Command(
        "lower",
        "lower a model's ai.onnx opset (to N, or to the best for an EP)",
        LOWER_EXAMPLES,
        _lower_arguments,
        _lower,
    ),
    Command(
        "optimize",
        "optimize, fuse into ORT kernels the EP has (verified), lower for the EP",
        OPTIMIZE_EXAMPLES,
        _optimize_arguments,
        _optimize,
    ),
    Command(
        "report",
        "predicted placement on an EP, before and after lowering",
        REPORT_EXAMPLES,
        _report_arguments,
        _report,
    ),
]
"""The subcommands, in the order ``--help`` lists them."""


# -- the program ---------------------------------------------------------------------


def _version() -> str:
    def installed(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    ort = next(
        (
            f"{dist} {installed(dist)}"
            for dist in ("onnxruntime", "onnxruntime-gpu", "onnxruntime-directml")
            if installed(dist) != "not installed"
        ),
        "onnxruntime not installed",
    )
    return f"{PROG} {__version__} (onnx {installed('onnx')}, {ort})"


def _global_options(*, defaults: bool) -> argparse.ArgumentParser:
    """-v/-q; the copy on each subcommand has no defaults, so it keeps what came before."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("global options (before or after the subcommand)")
    group.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0 if defaults else argparse.SUPPRESS,
        help="debug logs on stderr (-vv: also the libraries' debug logs and call stacks)",
    )
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=False if defaults else argparse.SUPPRESS,
        help="only warnings and errors on stderr; no verdict line from lower",
    )
    return parser


def _examples_epilog() -> str:
    return "examples:\n" + "\n".join(c.examples for c in COMMANDS) + "\n\n" + EXIT_STATUS_HELP


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: one subparser per :data:`COMMANDS` entry."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Lower ONNX models' ai.onnx opset exactly, per op, so they run wholly "
        "on the ONNX Runtime execution provider you pick.",
        epilog=_examples_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_global_options(defaults=True)],
    )
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        sub = commands.add_parser(
            command.name,
            help=command.help,
            description=command.help,
            epilog=f"examples:\n{command.examples}\n\n{EXIT_STATUS_HELP}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
            parents=[_global_options(defaults=False)],
        )
        command.add_arguments(sub)
        sub.set_defaults(run=command.run, usage_error=sub.error)
    return parser


def _say(args: argparse.Namespace, line: str) -> None:
    """A result line on stdout (not with -q), control characters escaped."""
    if not args.quiet:
        sys.stdout.write(shown(line) + "\n")
        sys.stdout.flush()


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send what native code (ORT, the GPU driver) writes to fd 1 to stderr meanwhile, so
    that stdout holds the results alone."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no fd 1 (embedded interpreters)
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


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
    """Run the command line; return the exit status.

    Without ``argv`` (the program itself: the console script, ``python -m``), the
    process ends after the command, so what it leaves is never collected
    (:func:`~onnxscript_ep_passes.core.collector.paused_collector`'s ``process_end``).
    """
    _defer_sympy()
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose, args.quiet)
    with native_output(args.verbose):
        return _run(args, process_end=argv is None)


def _run(args: argparse.Namespace, *, process_end: bool = False) -> int:
    try:
        with interrupts_raised(), paused_collector(process_end=process_end):
            return int(args.run(args))
    except KeyboardInterrupt as error:  # Ctrl-C, SIGTERM, SIGHUP: the clean-up has run
        signum = error.signum if isinstance(error, Interrupted) else signal.SIGINT
        name = signal.Signals(signum).name
        logger.error("interrupted by %s: stopped, no partial output left", name)
        return 128 + signum
    except UsageError as error:
        args.usage_error(shown(error))  # prints the subcommand's usage, exits 2
        raise  # pragma: no cover - error() exits
    except DowngradeError as error:
        sys.stderr.write(f"{shown_lines(error)}\n")
        return EXIT_REFUSED
    except Exception as error:  # every other failure: one line, exit 1, never a traceback
        logger.error("%s", one_line(error, getattr(args, "model", PROG)))
        logger.debug("traceback", exc_info=error)
        return EXIT_BAD_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
