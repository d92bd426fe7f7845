"""The files of the ``lower``, ``optimize`` and ``report`` commands besides the model:
their paths checked together, ``--kernel-table`` read, ``--report-json`` written.

Rules (``docs/safety.md``):

- :func:`check_paths`, before any file is read: an output that is an input or another
  output is a :class:`~onnxscript_ep_passes.errors.UsageError` (exit 2); an output that
  is a directory or in a missing directory an ``OSError`` (exit 1). See :mod:`~onnxscript_ep_passes.model_files.paths`.
- :func:`read_table`: the ``--kernel-table`` file, read strictly
  (:func:`~onnxscript_ep_passes.ep.target.read_kernel_table`) before the model, so
  that a bad table costs no work.
- :func:`write_report`: the report written atomically after OUT, with at most the
  permissions of the files the model was read from.
"""

from __future__ import annotations

__all__ = ["check_paths", "read_table", "write_report"]

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnxscript_ep_passes.errors import UsageError

if TYPE_CHECKING:
    from onnxscript_ep_passes.ep.kernel_table import KernelTable


def check_paths(args: argparse.Namespace, writes: Mapping[str, str | None]) -> None:
    """The command's outputs ``writes`` (option -> path) against its inputs (the model,
    ``--kernel-table``) and each other."""
    from onnxscript_ep_passes.model_files.paths import check_writable, path_conflicts

    reads = {"MODEL": args.model, "--kernel-table": getattr(args, "kernel_table", None)}
    if problem := path_conflicts(reads, writes):
        raise UsageError(problem)
    check_writable(writes)


def read_table(args: argparse.Namespace) -> KernelTable | None:
    """The ``--kernel-table`` file's table for ``--ep`` (None without the option)."""
    if getattr(args, "kernel_table", None) is None:
        return None
    from onnxscript_ep_passes.ep.target import read_kernel_table

    return read_kernel_table(args.kernel_table, args.ep, args.ort_version)


def write_report(
    path: str | None,
    report: dict[str, Any] | None,
    inputs: Sequence[str | os.PathLike[str]],
    indent: int | None = None,
) -> None:
    """Write ``report`` to ``path`` atomically (nothing when either is None), with at most
    the permissions of ``inputs`` (the model file and its data files), as OUT."""
    if report is None or not path:
        return
    from onnxscript_ep_passes.model_files.atomic import permission_mask, write_file

    data = (json.dumps(report, indent=indent) + "\n").encode()
    write_file(Path(path), data, permission_mask(inputs))
