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
"""

from __future__ import annotations

__all__ = [
    "dims_value",
    "ep_value",
    "opset_value",
    "ort_version_value",
    "path_value",
    "positive_int",
]

import argparse
from collections.abc import Callable

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
