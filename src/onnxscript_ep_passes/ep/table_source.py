"""Which kernel table the EP pass uses: a user's file, the usual lookup, or none (measure).

Rules:

1. ``kernel_table=FILE`` (``--kernel-table FILE``): the file is read in the snapshot format
   (``ep/data/README.md``: tab-separated ``domain op start end [type_constraints]`` with
   that header line, ``inf`` for an open range, ``#`` comments); its EP is the one asked
   for, its ORT version the one named (else the installed one), its source ``file:<path>``.
2. Otherwise :func:`~onnxscript_ep_passes.ep.table_choice.get_table`: a live listing when
   the EP loads here, else the nearest shipped snapshot.
3. An EP with neither, when the caller measures (``--measure``): an empty table with
   source :data:`MEASURED_ONLY`. Nothing can be predicted from it, so the pass measures
   every reachable opset (plain lowering only) and picks the fastest.
4. An EP with neither and no measuring: a :class:`ValueError` naming both options.
"""

from __future__ import annotations

__all__ = ["MEASURED_ONLY", "read_kernel_table", "resolve_table"]

import os
from pathlib import Path

from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.profiles import canonical_ep_name
from onnxscript_ep_passes.ep.snapshots import parse_snapshot
from onnxscript_ep_passes.ep.table_choice import get_table

MEASURED_ONLY = "none: measured"


def _installed_ort() -> str:
    import onnxruntime as ort

    return str(ort.__version__)


def read_kernel_table(
    path: str | os.PathLike[str], ep: str, ort_version: str | None = None
) -> KernelTable:
    """Read a kernel table for ``ep`` from a snapshot-format file (rule 1).

    Raises:
        OSError: the file cannot be read.
        ValueError: it is not in the snapshot format (the message names the line).
    """
    file = Path(path)
    text = file.read_text(encoding="utf-8")
    return parse_snapshot(
        text,
        ep=canonical_ep_name(ep),
        ort_version=ort_version or _installed_ort(),
        source=f"file:{file}",
    )


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
                canonical, ort_version or _installed_ort(), MEASURED_ONLY, []
            )
        raise ValueError(
            f"{error}. Either pass --kernel-table FILE (API: kernel_table=) with the EP's "
            "kernels in the snapshot format (see ep/data/README.md; "
            "tools/dump_kernel_table.py writes one where the EP loads), or --measure "
            "(API: measure=True) to run each reachable opset in a real session on the EP "
            "and keep the fastest"
        ) from error
