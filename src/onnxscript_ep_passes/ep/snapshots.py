"""Kernel-table snapshots: the TSV format, its provenance sidecar, and the shipped files.

Rules:

- A snapshot is ``<name>.tsv`` (columns ``domain op start end [type_constraints]`` with a
  header; ``end`` is ``inf`` for an open range; lines starting with ``#`` are comments)
  plus ``<name>.json`` recording the EP, ORT version, where it came from and notes.
- Provenance names the release: ``release`` is the tag of the ORT release the rows were
  listed or transcribed from (``"v1.24.4"``) and ``commit`` the commit it was built from;
  a table that cannot be tied to a release has ``release: null`` and says so in its
  ``notes``.
- Shipped snapshots live under ``ep/data`` (see its README); :func:`load_snapshot` loads
  one by name and records ``"snapshot:<name>.tsv"`` as the table's source, followed by
  :data:`NOT_A_RELEASE` when the snapshot names no release, so every verdict made with it
  says so. Loaded tables are cached for the life of the process.
"""

from __future__ import annotations

__all__ = [
    "NOT_A_RELEASE",
    "SnapshotInfo",
    "available_snapshots",
    "load_snapshot",
    "parse_snapshot",
    "write_snapshot",
]

import dataclasses
import functools
import importlib.resources
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from onnxscript_ep_passes.ep.kernel_table import KernelTable

_SNAPSHOT_HEADER = ("domain", "op", "start", "end")
NOT_A_RELEASE = "(not from a release)"
"""Appended to the source of a snapshot whose provenance names no release."""
_TYPES_COLUMN = "type_constraints"


@dataclasses.dataclass(frozen=True)
class SnapshotInfo:
    """Provenance of one shipped snapshot (the sidecar JSON next to its TSV)."""

    name: str
    ep: str
    ort_version: str
    source: str
    ep_version: str | None = None
    after_release: str | None = None
    notes: str = ""
    release: str | None = None
    commit: str | None = None

    @property
    def file(self) -> str:
        return f"{self.name}.tsv"

    @property
    def table_source(self) -> str:
        """The loaded table's source: ``snapshot:<file>``, marked when not a release."""
        tail = "" if self.release else f" {NOT_A_RELEASE}"
        return f"snapshot:{self.file}{tail}"


def _data_dir() -> Any:
    return importlib.resources.files("onnxscript_ep_passes.ep").joinpath("data")


def _format_types(types: Mapping[str, frozenset[str]] | None) -> str:
    if types is None:
        return ""
    return ";".join(f"{k}={'|'.join(sorted(v))}" for k, v in sorted(types.items())) or "-"


def _parse_types(cell: str) -> dict[str, list[str]] | None:
    cell = cell.strip()
    if not cell:
        return None
    if cell == "-":
        return {}
    out: dict[str, list[str]] = {}
    for part in cell.split(";"):
        key, _, values = part.partition("=")
        out[key.strip()] = [v for v in values.split("|") if v]
    return out


def parse_snapshot(
    text: str, *, ep: str, ort_version: str, source: str, ep_version: str | None = None
) -> KernelTable:
    """Parse a snapshot TSV: ``domain op start end [type_constraints]`` with a header.

    ``end`` is ``inf`` for an open range. The optional fifth column spells constraints as
    ``T=tensor(float)|tensor(float16);shape=tensor(int64)`` (``-`` for none, empty for
    unknown). Lines starting with ``#`` are comments.
    """
    rows: list[tuple[str, str, int, int | None, Mapping[str, Iterable[str]] | None]] = []
    header_seen = False
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split("\t")
        if not header_seen:
            if tuple(c.strip() for c in cells[:4]) != _SNAPSHOT_HEADER:
                raise ValueError(f"{source}: line {lineno}: expected header {_SNAPSHOT_HEADER}")
            header_seen = True
            continue
        if len(cells) < 4:
            raise ValueError(f"{source}: line {lineno}: expected >= 4 tab-separated cells")
        domain, op, start, end = (c.strip() for c in cells[:4])
        types = _parse_types(cells[4]) if len(cells) > 4 else None
        rows.append((domain, op, int(start), None if end == "inf" else int(end), types))
    return KernelTable.from_rows(ep, ort_version, source, rows, ep_version=ep_version)


def write_snapshot(
    table: KernelTable,
    directory: str | Path,
    name: str,
    notes: str = "",
    *,
    after_release: str | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``<name>.tsv`` and its provenance ``<name>.json`` into ``directory``.

    ``provenance`` adds fields to the JSON (``release``, ``commit``, and whatever else
    ties the rows to their origin); ``release`` and ``commit`` are null unless given.
    Returns the TSV path. Type constraints are written when the table has them.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with_types = table.has_type_constraints
    header = list(_SNAPSHOT_HEADER) + ([_TYPES_COLUMN] if with_types else [])
    lines = ["\t".join(header)]
    for domain, op in table.ops():
        for r in table.ranges[(domain, op)]:
            cells = [domain or "ai.onnx", op, str(r.start), "inf" if r.end is None else str(r.end)]
            if with_types:
                cells.append(_format_types(r.type_constraints))
            lines.append("\t".join(cells))
    tsv = directory / f"{name}.tsv"
    tsv.write_text("\n".join(lines) + "\n", encoding="utf-8")
    meta = {
        "name": name,
        "ep": table.ep,
        "ort_version": table.ort_version,
        "ep_version": table.ep_version,
        "source": table.source,
        "kernels": len(table),
        "has_type_constraints": with_types,
        "after_release": after_release,
        "release": None,
        "commit": None,
        **(provenance or {}),
        "notes": notes,
    }
    (directory / f"{name}.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return tsv


def available_snapshots() -> list[SnapshotInfo]:
    """Provenance of every snapshot shipped in the package, sorted by name."""
    infos = []
    for entry in _data_dir().iterdir():
        if not entry.name.endswith(".json"):
            continue
        meta = json.loads(entry.read_text(encoding="utf-8"))
        infos.append(
            SnapshotInfo(
                name=meta["name"],
                ep=meta["ep"],
                ort_version=meta["ort_version"],
                source=meta["source"],
                ep_version=meta.get("ep_version"),
                after_release=meta.get("after_release"),
                notes=meta.get("notes", ""),
                release=meta.get("release"),
                commit=meta.get("commit"),
            )
        )
    return sorted(infos, key=lambda i: i.name)


@functools.cache
def load_snapshot(name: str) -> KernelTable:
    """Load a shipped snapshot by name (``"cuda-ort-1.24"``; a ``.tsv`` suffix is accepted).

    The table's :attr:`~KernelTable.source` is ``"snapshot:<name>.tsv"`` (followed by
    :data:`NOT_A_RELEASE` when its provenance names no release); its EP and ORT version
    come from the sidecar JSON.

    Raises:
        ValueError: No snapshot of that name; the message lists the shipped ones.
    """
    return _load_snapshot(name.removesuffix(".tsv"))


@functools.cache
def _load_snapshot(stem: str) -> KernelTable:
    infos = {i.name: i for i in available_snapshots()}
    if stem not in infos:
        raise ValueError(f"No kernel-table snapshot {stem!r}; shipped: {sorted(infos)}")
    info = infos[stem]
    text = _data_dir().joinpath(info.file).read_text(encoding="utf-8")
    return parse_snapshot(
        text,
        ep=info.ep,
        ort_version=info.ort_version,
        source=info.table_source,
        ep_version=info.ep_version,
    )
