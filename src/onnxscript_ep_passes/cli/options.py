"""Option values of the command line, checked as argparse reads them.

Rules:

- A bad option value is a usage error: argparse prints the subcommand's usage and
  ``argument --NAME: <why>`` and exits 2, before any file is read. Every command checks
  its options with the same functions here, so one option is refused alike everywhere.
- ``--target-opset`` and ``--lowest-opset``: an integer from 18 (the lowest opset the
  adapters reach) to the newest ai.onnx opset the installed onnx knows.
- ``--max-length``: a positive integer.
- ``--ep``: an alias (``webgpu``, ``cuda``, ...) or ORT's ``<Name>ExecutionProvider``.
- ``--ort-version``: a release (``1.24``, ``1.24.2``) or a shipped snapshot's line
  (``main-2026-09``).
- ``--dims``: ``NAME=SIZE,...`` with positive sizes.
- Paths (``-o``, ``--report-json``, ``--kernel-table``): not empty.

Each function takes the option's text and returns its value (the text itself, except for
the integers), raising :class:`argparse.ArgumentTypeError` with the reason.

The options of the EP search (``--ep``, ``--ort-version``, ``--target-opset``,
``--no-legalize``, ``--dims``, ``--measure``, ``--kernel-table``, ``--lowest-opset``) are
defined once, by :func:`search_arguments`, for ``lower``, ``report`` and ``optimize``
alike; :func:`search_options_of` builds the
:class:`~onnxscript_ep_passes.passes.options.SearchOptions` from them once and
:func:`target_of_args` the :class:`~onnxscript_ep_passes.ep.target.EpTarget`.
"""

from __future__ import annotations

__all__ = [
    "dims_value",
    "ep_value",
    "opset_value",
    "ort_version_value",
    "path_value",
    "positive_int",
    "search_arguments",
    "search_options_of",
    "target_of_args",
]

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from onnxscript_ep_passes.errors import UsageError

if TYPE_CHECKING:
    from onnxscript_ep_passes.ep.kernel_table import KernelTable
    from onnxscript_ep_passes.ep.profiles import EpProfile
    from onnxscript_ep_passes.ep.target import EpTarget
    from onnxscript_ep_passes.passes.options import SearchOptions

_MIN_OPSET = 18  # lowering.lower_opset.MIN_TARGET_OPSET, not imported: start-up stays light


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _checked(check: Callable[[str], object], text: str) -> str:
    """``text`` when ``check`` accepts it; its ValueError as the parser's error."""
    try:
        check(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def opset_value(text: str) -> int:
    """An ai.onnx opset the lowering can reach: 18 to the newest onnx knows."""
    import onnx.defs

    value, newest = _integer(text), onnx.defs.onnx_opset_version()
    if value < _MIN_OPSET:
        raise argparse.ArgumentTypeError(
            f"{value} is below {_MIN_OPSET}, the lowest opset the adapters reach"
        )
    if value > newest:
        raise argparse.ArgumentTypeError(
            f"{value} is above {newest}, the newest opset the installed onnx knows"
        )
    return value


def positive_int(text: str) -> int:
    """An integer of at least 1."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def ep_value(text: str) -> str:
    """An EP alias or ORT name (:func:`~onnxscript_ep_passes.ep.profiles.resolve_ep`)."""
    from onnxscript_ep_passes.ep.profiles import canonical_ep_name

    return _checked(canonical_ep_name, text)


def ort_version_value(text: str) -> str:
    """A release version, or the ORT line of a shipped snapshot (``main-2026-09``)."""
    from packaging.version import InvalidVersion, Version

    try:
        Version(text)
    except InvalidVersion:
        from onnxscript_ep_passes.ep.snapshots import available_snapshots

        lines = sorted({s.ort_version for s in available_snapshots()} - {""})
        named = [line for line in lines if not line[:1].isdigit()]
        if text not in named:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not an ORT release (e.g. 1.24 or 1.24.2) nor a shipped "
                f"snapshot's line ({', '.join(named) or 'none'})"
            ) from None
    return text


def dims_value(text: str) -> str:
    """``NAME=SIZE,...`` as :func:`~onnxscript_ep_passes.ep.dims.parse_dims` reads it."""
    from onnxscript_ep_passes.ep.dims import parse_dims

    return _checked(parse_dims, text)


def path_value(text: str) -> str:
    """A path that is not empty (what it names is checked when the command runs)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    if "\0" in text:
        raise argparse.ArgumentTypeError("a path with a NUL character")
    return text


def search_arguments(parser: argparse.ArgumentParser, *, ep_required: bool = True) -> None:
    """Add the EP search's options to ``parser`` (``ep_required=False``: ``lower``, where
    ``--ep`` is one of two ways to name the target and these options need it)."""
    needs = "" if ep_required else "with --ep: "
    ep_help = "webgpu, cuda, dml, or an ORT EP name"
    if not ep_required:
        ep_help = "pick the opset best for this EP (webgpu, cuda, dml, ...)"
    parser.add_argument("--ep", required=ep_required, type=ep_value, help=ep_help)
    version_help = (
        f"{needs}the ORT release the model will run on (e.g. 1.24; default: the installed "
        "one, a shipped table when it cannot list the EP)"
    )
    parser.add_argument("--ort-version", type=ort_version_value, help=version_help)
    target_help = "the ai.onnx opset to lower to, not the best"
    parser.add_argument("--target-opset", type=opset_value, help=target_help)
    legalize_help = f"{needs}only choose the opset; never expand nodes the EP cannot run"
    parser.add_argument("--no-legalize", action="store_true", help=legalize_help)
    dims_help = "sizes of symbolic dimensions (default: 'batch' 1, 'past' 128, others 128)"
    parser.add_argument("--dims", metavar="NAME=SIZE,...", type=dims_value, help=dims_help)
    measure_help = "run the best candidates in real ORT sessions on the EP; keep the fastest"
    parser.add_argument("--measure", action="store_true", help=measure_help)
    table_help = "the EP's kernels in the snapshot TSV format (an EP without a shipped table)"
    parser.add_argument("--kernel-table", metavar="FILE", type=path_value, help=table_help)
    lowest_help = (
        "weigh no opset below N (default 18): a faster search when lower opsets are not "
        "wanted (below some opset a model's ops may expand to several times its size)"
    )
    parser.add_argument("--lowest-opset", metavar="N", type=opset_value, help=lowest_help)


def search_options_of(args: argparse.Namespace) -> SearchOptions:
    """The search's options from the parsed ``args``, checked once.

    Raises:
        UsageError: ``--lowest-opset`` above ``--target-opset``.
    """
    from onnxscript_ep_passes.passes.options import SearchOptions

    try:
        return SearchOptions.of(
            target_opset=args.target_opset,
            lowest_opset=args.lowest_opset,
            legalize=not args.no_legalize,
            dims=args.dims,
            measure=args.measure,
        )
    except ValueError as error:
        raise UsageError(f"--lowest-opset: {error}") from None


def target_of_args(
    args: argparse.Namespace, table: KernelTable | None = None
) -> EpProfile | EpTarget:
    """The target ``--ep``, ``--ort-version``, ``--kernel-table`` (``table``: the file,
    read already) and ``--measure`` name; the CPU EP's profile alone (it runs every opset:
    no table to look up)."""
    from onnxscript_ep_passes.ep.profiles import resolve_ep
    from onnxscript_ep_passes.ep.target import target_of

    profile = resolve_ep(args.ep)
    if profile.is_host and table is None:
        return profile
    return target_of(profile, args.ort_version, table=table, measure=args.measure)
