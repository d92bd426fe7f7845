"""Kernel-table snapshots: the TSV format, its provenance sidecar, and the shipped files.

Rules:

- A snapshot is ``<name>.tsv`` (columns ``domain op start end [type_constraints]`` with a
  header; ``end`` is ``inf`` for an open range; lines starting with ``#`` are comments)
  plus ``<name>.json`` recording the EP, ORT version, where it came from and notes.
- Provenance names the release: ``release`` is the tag of the ORT release the rows were
  listed or transcribed from (``"v1.24.4"``) and ``commit`` the commit it was built from;
  a table that cannot be tied to a release has ``release: null`` and says so in its
  ``notes``. A table transcribed from a docs page (op names a vendor lists, not rows
  listed from a kernel registry) names the page in ``transcribed_from``.
- Shipped snapshots live under ``ep/data`` (see its README); :func:`load_snapshot` loads
  one by name and records ``"snapshot:<name>.tsv"`` as the table's source, followed by
  :data:`NOT_A_RELEASE` when the snapshot names no release and by :data:`TRANSCRIBED`
  when it was transcribed from docs, so every verdict made with it says so. Loaded tables are cached for the life of the process.
"""

from __future__ import annotations

__all__ = [
    "NOT_A_RELEASE",
    "TRANSCRIBED",
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
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from onnxscript_ep_passes.ep.kernel_table import KernelTable, TableKind

_SNAPSHOT_HEADER = ("domain", "op", "start", "end")
NOT_A_RELEASE = "(not from a release)"
"""Appended to the source of a snapshot whose provenance names no release."""
TRANSCRIBED = "(transcribed from docs)"
"""Appended to the source of a snapshot transcribed from a docs page (``transcribed_from``)."""
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
    transcribed_from: str | None = None

    @property
    def file(self) -> str:
        return f"{self.name}.tsv"

    @property
    def table_source(self) -> str:
        """The loaded table's source: ``snapshot:<file>``, marked when not a release and
        when transcribed from docs."""
        marks = ([] if self.release else [NOT_A_RELEASE]) + (
            [TRANSCRIBED] if self.transcribed_from else []
        )
        return " ".join([f"snapshot:{self.file}", *marks])


def _data_dir() -> Any:
    return importlib.resources.files("onnxscript_ep_passes.ep").joinpath("data")


def _format_types(types: Mapping[str, frozenset[str]] | None) -> str:
    if types is None:
        return ""
    return ";".join(f"{k}={'|'.join(sorted(v))}" for k, v in sorted(types.items())) or "-"


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOMAIN = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")
_MAX_SINCE_VERSION = 10_000  # far above any opset; a larger start is a corrupt row
_INT_MAX = 2**31 - 1  # ORT's end of an open range
_CONTAINERS = {"tensor": 1, "sparse_tensor": 1, "seq": 1, "optional": 1, "map": 2}


@functools.cache
def _element_types() -> frozenset[str]:
    import onnx

    names = set(onnx.TensorProto.DataType.keys()) - {"UNDEFINED"}
    return frozenset(n.lower() for n in names)


def _type_problem(text: str) -> str | None:
    """Why ``text`` is not an ONNX type as ORT spells it (``float16``, ``tensor(float)``,
    ``seq(tensor(int64))``, ``map(int64,tensor(float))``); None when it is one."""
    text = text.strip()
    if text in _element_types():
        return None
    head, paren, rest = text.partition("(")
    arity = _CONTAINERS.get(head)
    if not paren or arity is None or not rest.endswith(")"):
        return f"unknown type {text!r}"
    inner, depth, parts, part = rest[:-1], 0, [], ""
    for char in inner:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return f"unbalanced parentheses in type {text!r}"
        if char == "," and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += char
    parts.append(part)
    if depth or len(parts) != arity:
        return f"malformed type {text!r}"
    if head in ("tensor", "sparse_tensor", "map") and parts[0].strip() not in _element_types():
        return f"unknown element type in {text!r}"
    return next((p for p in map(_type_problem, parts[arity - 1 :]) if p), None)


def _parse_types(cell: str) -> dict[str, list[str]] | None:
    """The type-constraints cell (see :func:`parse_snapshot`); ValueError when malformed."""
    cell = cell.strip()
    if not cell:
        return None
    if cell == "-":
        return {}
    out: dict[str, list[str]] = {}
    for part in cell.split(";"):
        key, equals, values = part.partition("=")
        key = key.strip()
        if not equals or not _NAME.fullmatch(key):
            raise ValueError(f"type constraint {part!r} is not KEY=TYPE|TYPE...")
        if key in out:
            raise ValueError(f"type constraint {key!r} appears twice")
        types = [v.strip() for v in values.split("|")]
        if not all(types):
            raise ValueError(f"type constraint {key!r} has an empty type")
        problem = next((p for p in map(_type_problem, types) if p), None)
        if problem is not None:
            raise ValueError(f"type constraint {key!r}: {problem}")
        out[key] = types
    return out


def _version_cell(cell: str, what: str, low: int, high: int) -> int:
    if not cell.isdigit():
        raise ValueError(f"{what} {cell!r} is not a non-negative integer")
    value = int(cell)
    if not low <= value <= high:
        raise ValueError(f"{what} {value} is outside {low}..{high}")
    return value


_Row = tuple[str, str, int, int | None, Mapping[str, Iterable[str]] | None]


def _parse_row(cells: list[str], columns: int) -> _Row:
    """One row of a snapshot (module docstring); ValueError saying what is wrong."""
    if not 4 <= len(cells) <= columns:
        expected = "4" if columns == 4 else "4 or 5"
        raise ValueError(f"{len(cells)} tab-separated cells, expected {expected}")
    domain, op, start_cell, end_cell = (c.strip() for c in cells[:4])
    if not _DOMAIN.fullmatch(domain):
        raise ValueError(f"domain {domain!r} is not a domain name (ai.onnx for the default)")
    if not _NAME.fullmatch(op):
        raise ValueError(f"op {op!r} is not an operator name")
    start = _version_cell(start_cell, "start", 1, _MAX_SINCE_VERSION)
    end = None if end_cell == "inf" else _version_cell(end_cell, "end", start, _INT_MAX)
    types = _parse_types(cells[4]) if len(cells) > 4 else None
    return domain, op, start, end, types


def parse_snapshot(
    text: str,
    *,
    ep: str,
    ort_version: str,
    source: str,
    ep_version: str | None = None,
    where: str | None = None,
    kind: TableKind = TableKind.FILE,
) -> KernelTable:
    """Parse a snapshot TSV: ``domain op start end [type_constraints]`` with a header.

    ``end`` is ``inf`` for an open range. The optional fifth column spells constraints as
    ``T=tensor(float)|tensor(float16);shape=tensor(int64)`` (``-`` for none, empty for
    unknown). Lines starting with ``#`` and blank lines are skipped.

    Every row is validated: as many cells as the header has columns (4, or 4 or 5 with
    ``type_constraints``); a dotted domain name and an operator name; ``start`` an integer
    from 1 to 10000, ``end`` ``inf`` or an integer from ``start`` to 2^31-1; each type
    constraint ``KEY=TYPE|...`` once per row, with ONNX types. A table without a row is
    refused. The table's ``kind`` is the caller's to say (``FILE``, a caller's table,
    unless said otherwise; :func:`load_snapshot` says ``SNAPSHOT``).

    Raises:
        ValueError: the first problem, as ``<where>: line <n>: <problem>`` (``where``
            defaults to ``source``).
    """
    where = where or source
    rows: list[_Row] = []
    columns = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split("\t")
        if not columns:
            header = tuple(c.strip() for c in cells)
            if header not in (_SNAPSHOT_HEADER, (*_SNAPSHOT_HEADER, _TYPES_COLUMN)):
                raise ValueError(
                    f"{where}: line {lineno}: expected the header 'domain op start end "
                    f"[{_TYPES_COLUMN}]' (tab-separated)"
                )
            columns = len(header)
            continue
        try:
            rows.append(_parse_row(cells, columns))
        except ValueError as error:
            raise ValueError(f"{where}: line {lineno}: {error}") from None
    if not columns:
        raise ValueError(f"{where}: no header line (domain, op, start, end) and no kernels")
    if not rows:
        raise ValueError(f"{where}: the table lists no kernels")
    return KernelTable.from_rows(ep, ort_version, source, rows, ep_version=ep_version, kind=kind)


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
                transcribed_from=meta.get("transcribed_from"),
            )
        )
    return sorted(infos, key=lambda i: i.name)


@functools.cache
def load_snapshot(name: str) -> KernelTable:
    """Load a shipped snapshot by name (``"cuda-ort-1.24"``; a ``.tsv`` suffix is accepted).

    The table's :attr:`~KernelTable.source` is ``"snapshot:<name>.tsv"`` (followed by
    :data:`NOT_A_RELEASE` when its provenance names no release, and then
    :attr:`~KernelTable.from_release` is False), its kind ``SNAPSHOT``; its EP and ORT
    version come from the sidecar JSON.

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
    table = parse_snapshot(
        text,
        ep=info.ep,
        ort_version=info.ort_version,
        source=info.table_source,
        ep_version=info.ep_version,
        kind=TableKind.SNAPSHOT,
    )
    return table if info.release else dataclasses.replace(table, from_release=False)
