#!/usr/bin/env python3
"""Dump an execution provider's kernel table from the installed ONNX Runtime as a snapshot.

Writes ``<name>.tsv`` (``domain op start end type_constraints``) and ``<name>.json``
(provenance: EP, ORT version, plugin version, how it was listed) into ``--out``; the
package loads such files with ``onnxscript_ep_passes.ep.load_snapshot``. Run it where the
EP's library loads, e.g. on a GPU machine with ``onnxruntime-gpu`` for CUDA::

    python tools/dump_kernel_table.py cuda --out src/onnxscript_ep_passes/ep/data
    python tools/dump_kernel_table.py webgpu --out src/onnxscript_ep_passes/ep/data

The default name is ``<ep>-ort-<major.minor>`` (``cuda-ort-1.32``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from onnxscript_ep_passes.ep.live_tables import LiveTableUnavailableError, live_table
from onnxscript_ep_passes.ep.profiles import resolve_ep
from onnxscript_ep_passes.ep.snapshots import write_snapshot

logger = logging.getLogger("dump_kernel_table")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ep", help="cuda, dml, webgpu, cpu (or ORT's provider name)")
    parser.add_argument("--out", type=Path, default=Path("."), help="output directory")
    parser.add_argument("--name", help="snapshot name (default: <ep>-ort-<major.minor>)")
    parser.add_argument("--notes", default="", help="free text stored in the provenance JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    profile = resolve_ep(args.ep)
    ep = profile.ort_name
    try:
        table = live_table(ep)
    except LiveTableUnavailableError as e:
        logger.error("cannot list %s here: %s", ep, e)
        return 2
    version = ".".join(table.ort_version.split(".")[:2])
    name = args.name or f"{profile.short_name}-ort-{version}"
    path = write_snapshot(table, args.out, name, notes=args.notes)
    logger.info(
        "wrote %s: %d kernels of %s, ORT %s (%s)",
        path,
        len(table),
        table.ep,
        table.ort_version,
        table.source,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
