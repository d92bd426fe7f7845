"""Which kernel table the EP pass uses: a user's file, the usual lookup, or none (measure).

Rules:

1. ``kernel_table=FILE`` (``--kernel-table FILE``): the file is read in the snapshot format
   (``ep/data/README.md``: tab-separated ``domain op start end [type_constraints]`` with
   that header line, ``inf`` for an open range, ``#`` comments); its EP is the one asked
   for, its ORT version the one named (else the installed one), its source ``file:<path>``.
   It is read as strictly as a model: a regular file (never a FIFO, device or directory,
   opened without blocking), not empty, at most :data:`MAX_TABLE_BYTES`, UTF-8 text, every
   row validated (:func:`~onnxscript_ep_passes.ep.snapshots.parse_snapshot`) and at least
   one; each error is one line naming the file (and the line).
2. Otherwise :func:`~onnxscript_ep_passes.ep.table_choice.get_table`: a live listing when
   the EP loads here, else the nearest shipped snapshot.
3. An EP with neither, when the caller measures (``--measure``): an empty table with
   source :data:`MEASURED_ONLY`. Nothing can be predicted from it, so the pass measures
   every reachable opset (plain lowering only) and picks the fastest.
4. An EP with neither and no measuring: a :class:`ValueError` naming both options.
"""

from __future__ import annotations

__all__ = ["MAX_TABLE_BYTES", "MEASURED_ONLY", "read_kernel_table", "resolve_table"]

import os
from pathlib import Path

from onnxscript_ep_passes.ep.kernel_listing import installed_ort_version
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.profiles import canonical_ep_name
from onnxscript_ep_passes.ep.snapshots import parse_snapshot
from onnxscript_ep_passes.ep.table_choice import get_table
from onnxscript_ep_passes.model_files.paths import read_regular_file

MEASURED_ONLY = "none: measured"
MAX_TABLE_BYTES = 16 * 1024 * 1024
"""The largest kernel-table file read (the shipped tables are under 40 KB)."""


def read_kernel_table(
    path: str | os.PathLike[str], ep: str, ort_version: str | None = None
) -> KernelTable:
    """Read a kernel table for ``ep`` from a snapshot-format file (rule 1).

    Raises:
        ValueError: the file cannot be read, is not a regular file, is empty or too large,
            is not UTF-8 text or not in the snapshot format, or lists no kernel; the
            message is one line naming the file (and the line where there is one).
    """
    label = f"kernel table '{os.fspath(path)}'"
    text = _read_text(path, label)
    return parse_snapshot(
        text,
        ep=canonical_ep_name(ep),
        ort_version=ort_version or installed_ort_version(),
        source=f"file:{Path(path)}",
        where=label,
    )


def _read_text(path: str | os.PathLike[str], label: str) -> str:
    """The file's text, read as rule 1 says."""
    data = read_regular_file(
        path,
        label,
        MAX_TABLE_BYTES,
        kind="a kernel table",
        too_large=f"more than a kernel table may hold ({MAX_TABLE_BYTES} bytes)",
    )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ValueError(f"{label}: line {line}: not UTF-8 text") from None


def resolve_table(
    ep: str,
    ort_version: str | None = None,
    *,
    kernel_table: str | os.PathLike[str] | None = None,
    measure: bool = False,
) -> KernelTable:
    """The table for ``ep`` (module docstring, rules 1-4)."""
    canonical = canonical_ep_name(ep)
    if kernel_table is not None:
        return read_kernel_table(kernel_table, canonical, ort_version)
    try:
        return get_table(canonical, ort_version)
    except ValueError as error:
        if measure:
            return KernelTable.from_rows(
                canonical, ort_version or installed_ort_version(), MEASURED_ONLY, []
            )
        raise ValueError(
            f"{error}. Either pass --kernel-table FILE (API: kernel_table=) with the EP's "
            "kernels in the snapshot format (see ep/data/README.md; "
            "tools/dump_kernel_table.py writes one where the EP loads), or --measure "
            "(API: measure=True) to run each reachable opset in a real session on the EP "
            "and keep the fastest"
        ) from error
