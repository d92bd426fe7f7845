"""An independent reading of a shipped snapshot, for tests of CUDA/DML placement.

No CUDA or DirectML session can run here, so their placement tests cannot compare with a
real session. Instead of pinning what the package says about its own tables, they compare
the package with this second reading: the snapshot's TSV parsed with ``csv`` (not the
package's parser), schemas from ``onnx.defs`` (not the package's cache), and ORT's
``VerifyVersion`` written out as ``kernel_registry.cc`` states it.
"""

from __future__ import annotations

import csv
from pathlib import Path

import onnx.defs

_DATA = Path(__file__).resolve().parents[2] / "src" / "onnxscript_ep_passes" / "ep" / "data"


def snapshot_rows(name: str) -> list[tuple[str, str, int, int | None]]:
    with (_DATA / f"{name}.tsv").open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader((line for line in f if not line.startswith("#")), delimiter="\t")
        return [
            (
                "" if r["domain"] in ("", "ai.onnx") else r["domain"],
                r["op"],
                int(r["start"]),
                None if r["end"] == "inf" else int(r["end"]),
            )
            for r in reader
        ]


def has_kernel(rows: list[tuple[str, str, int, int | None]], op: str, opset: int) -> bool:
    """ORT's rule for an ai.onnx node ``op`` in a model at ``opset``."""
    v = onnx.defs.get_schema(op, opset, "").since_version
    return any(
        (start == v) or (end is not None and start <= v <= end)
        for domain, name, start, end in rows
        if domain == "" and name == op
    )
