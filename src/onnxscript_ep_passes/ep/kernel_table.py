"""Kernel registrations of one ONNX Runtime execution provider at one ORT version.

A :class:`KernelTable` answers "does this EP have a kernel for this node?" the way ORT
does. The rules:

- **Domains** are normalised: ``""`` and ``"ai.onnx"`` are the same domain, stored as ``""``.
- **Version matching** is ORT's ``VerifyVersion`` (``kernel_registry.cc``). With ``v`` the
  since_version of the node's schema at the model's opset::

      match = (start == v) or (end is not None and start <= v <= end)

  so an open range ``23+`` (``end is None``) matches only ``v == 23``: a node whose schema
  is Reshape-24 finds no kernel in a table that registered "Reshape 23+".
- **Types** are checked only when both sides are known: a range whose
  ``type_constraints`` is ``None`` (transcribed tables) accepts every type, and a type
  parameter whose actual type is unknown is not checked. Constraint keys are what ORT's
  kernel defs use: a schema type parameter (``"T"``) or a formal parameter name
  (``"shape"``).

Tables come from three places, recorded in :attr:`KernelTable.source`:

- ``"snapshot:<file>"`` -- a TSV shipped under ``ep/data`` (see its README), loaded by
  :func:`load_snapshot`;
- ``"live:get_all_opkernel_def"`` -- the providers built into the installed ORT package;
- ``"live:get_registered_ep_kernel_defs"`` -- a plugin EP (WebGPU) registered in this
  process.

:func:`get_table` picks one: a live table when the requested ORT version is the installed
one (or not given) and the EP is available here, otherwise the nearest shipped snapshot
(the newest snapshot not newer than the requested version; if all are newer, the oldest).
"""

from __future__ import annotations

__all__ = [
    "EP_ALIASES",
    "KernelRange",
    "KernelTable",
    "LiveTableUnavailableError",
    "SnapshotInfo",
    "available_snapshots",
    "canonical_ep_name",
    "get_table",
    "live_table",
    "load_snapshot",
    "normalize_domain",
    "normalize_type",
    "parse_snapshot",
    "write_snapshot",
]

import dataclasses
import functools
import importlib.resources
import json
import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_INT_MAX = 2**31 - 1
_SNAPSHOT_HEADER = ("domain", "op", "start", "end")
_TYPES_COLUMN = "type_constraints"

EP_ALIASES: Mapping[str, str] = {
    "cuda": "CUDAExecutionProvider",
    "cudaexecutionprovider": "CUDAExecutionProvider",
    "dml": "DmlExecutionProvider",
    "directml": "DmlExecutionProvider",
    "dmlexecutionprovider": "DmlExecutionProvider",
    "webgpu": "WebGpuExecutionProvider",
    "webgpuexecutionprovider": "WebGpuExecutionProvider",
    "cpu": "CPUExecutionProvider",
    "cpuexecutionprovider": "CPUExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "qnn": "QNNExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "migraphx": "MIGraphXExecutionProvider",
}
"""Accepted spellings (case-insensitive) of each supported EP, mapped to ORT's name."""

# File-name prefix of the shipped snapshots, per canonical EP name.
_SNAPSHOT_PREFIX: Mapping[str, str] = {
    "CUDAExecutionProvider": "cuda",
    "DmlExecutionProvider": "dml",
    "WebGpuExecutionProvider": "webgpu",
    "CPUExecutionProvider": "cpu",
}


class LiveTableUnavailableError(RuntimeError):
    """The installed ONNX Runtime cannot list this EP's kernels in this process."""


def canonical_ep_name(ep: str) -> str:
    """Return ORT's provider name for ``ep`` ("webgpu", "cuda", "dml"/"directml", "cpu" ...).

    Any ``<Name>ExecutionProvider`` is accepted as ORT spells it (an EP without a shipped
    kernel table needs ``--kernel-table`` or ``--measure``).

    Raises:
        ValueError: ``ep`` is not a supported EP name or alias.
    """
    key = ep.strip().lower()
    if key in EP_ALIASES:
        return EP_ALIASES[key]
    if key.endswith("executionprovider") and key.isalnum():
        return ep.strip()  # any other EP, by ORT's own name
    raise ValueError(
        f"Unknown execution provider {ep!r}; expected ORT's name of an EP (like "
        f"{sorted(set(EP_ALIASES.values()))}) or an alias {sorted(k for k in EP_ALIASES if k.isalpha() and len(k) < 10)}"
    )


def normalize_domain(domain: str) -> str:
    """``"ai.onnx"`` and ``""`` name the same (default) domain; return ``""`` for both."""
    return "" if domain in ("", "ai.onnx") else domain


def normalize_type(type_str: str) -> str:
    """Spell a type as ORT's kernel defs do: ``"float"`` -> ``"tensor(float)"``.

    Strings that already carry a container (``tensor(...)``, ``seq(...)``, ``optional(...)``)
    are returned unchanged apart from surrounding whitespace and case of the element type
    name, which ONNX spells in lower case.
    """
    t = type_str.strip()
    if "(" in t:
        return t
    return f"tensor({t.lower()})"


@dataclasses.dataclass(frozen=True)
class KernelRange:
    """One registered kernel: its version range and, when known, its type constraints.

    Attributes:
        start: The first since_version the kernel was registered for.
        end: The last one, or ``None`` for an open range ("N+"), which ORT matches only
            for ``since_version == start``.
        type_constraints: Allowed types per constraint key (``"T"``, or a formal
            parameter name such as ``"shape"``), spelled ``"tensor(float)"``; ``None``
            when the table does not record types (then every type is accepted).
    """

    start: int
    end: int | None
    type_constraints: dict[str, frozenset[str]] | None = dataclasses.field(default=None, hash=False)

    def matches(self, since_version: int) -> bool:
        """ORT's VerifyVersion: exact start, or inside a closed range."""
        if self.start == since_version:
            return True
        return self.end is not None and self.start <= since_version <= self.end

    def type_mismatch(self, types: Mapping[str, str] | None) -> str | None:
        """Return why ``types`` violate this kernel's constraints, or None if they do not.

        Only keys present on both sides are checked.
        """
        if self.type_constraints is None or not types:
            return None
        for key, actual in types.items():
            allowed = self.type_constraints.get(key)
            if allowed is None:
                continue
            norm = normalize_type(actual)
            if norm not in allowed:
                return (
                    f"type {norm} not supported for {key} (supported: {', '.join(sorted(allowed))})"
                )
        return None

    def describe(self) -> str:
        """``"[13, 18]"`` for a closed range, ``"23+"`` for an open one."""
        if self.end is None:
            return f"{self.start}+"
        return f"[{self.start}, {self.end}]"


@dataclasses.dataclass(frozen=True)
class KernelTable:
    """Kernel registrations of one EP at one ORT version.

    Attributes:
        ep: ORT's provider name, e.g. ``"CUDAExecutionProvider"``.
        ort_version: The ORT version (or line, e.g. ``"main-2026-09"``) the table describes.
        source: Provenance: ``"snapshot:<file>"``, ``"live:get_all_opkernel_def"`` or
            ``"live:get_registered_ep_kernel_defs"``.
        ranges: ``(domain, op) -> kernel ranges`` in registration order; domain ``""`` is
            ai.onnx.
        ep_version: Version of a plugin EP library (e.g. onnxruntime-ep-webgpu), if any.
    """

    ep: str
    ort_version: str
    source: str
    ranges: Mapping[tuple[str, str], tuple[KernelRange, ...]] = dataclasses.field(hash=False)
    ep_version: str | None = None

    @classmethod
    def from_rows(
        cls,
        ep: str,
        ort_version: str,
        source: str,
        rows: Iterable[tuple[str, str, int, int | None, Mapping[str, Iterable[str]] | None]],
        *,
        ep_version: str | None = None,
    ) -> KernelTable:
        """Build a table from ``(domain, op, start, end, type_constraints)`` rows.

        ``end`` may be ``None`` or ORT's INT_MAX for an open range; domains and type
        names are normalised.
        """
        grouped: dict[tuple[str, str], list[KernelRange]] = {}
        for domain, op, start, end, types in rows:
            if end is not None and end >= _INT_MAX:
                end = None
            constraints = None
            if types is not None:
                constraints = {k: frozenset(normalize_type(t) for t in v) for k, v in types.items()}
            grouped.setdefault((normalize_domain(domain), op), []).append(
                KernelRange(int(start), None if end is None else int(end), constraints)
            )
        return cls(
            ep=canonical_ep_name(ep) if ep.lower() in EP_ALIASES else ep,
            ort_version=ort_version,
            source=source,
            ranges={k: tuple(v) for k, v in grouped.items()},
            ep_version=ep_version,
        )

    # -- queries -----------------------------------------------------------------

    def registered(self, domain: str, op: str) -> tuple[KernelRange, ...]:
        """All ranges registered for ``op`` in ``domain`` (empty when none)."""
        return self.ranges.get((normalize_domain(domain), op), ())

    def has_op(self, domain: str, op: str) -> bool:
        """Whether any kernel (any version) is registered for the op."""
        return bool(self.registered(domain, op))

    def match(self, domain: str, op: str, since_version: int) -> KernelRange | None:
        """The first kernel whose version range matches ``since_version`` (types ignored)."""
        for r in self.registered(domain, op):
            if r.matches(since_version):
                return r
        return None

    def supports(
        self,
        domain: str,
        op: str,
        since_version: int,
        input_types: Mapping[str, str] | None = None,
    ) -> bool:
        """Whether a kernel matches the version and, where known, the types.

        Args:
            domain: The node's domain (``""`` or ``"ai.onnx"`` for the default domain).
            op: The op type.
            since_version: The since_version of the node's schema at its graph's opset.
            input_types: Actual types per constraint key (``{"T": "tensor(float)"}``,
                ``{"shape": "int64"}``) for the node's inputs and outputs; keys that are
                unknown or absent are not checked.
        """
        return self.explain(domain, op, since_version, input_types)[0] is not None

    def explain(
        self,
        domain: str,
        op: str,
        since_version: int,
        input_types: Mapping[str, str] | None = None,
    ) -> tuple[KernelRange | None, str]:
        """Like :meth:`supports`, returning the matching kernel (or None) and why.

        The reason names the registered ranges when the version has no kernel, or the
        offending type when only types fail.
        """
        ranges = self.registered(domain, op)
        op_name = f"{domain}::{op}" if normalize_domain(domain) else op
        if not ranges:
            return None, f"no {self.ep} kernel for {op_name} (op not registered)"
        version_matches = [r for r in ranges if r.matches(since_version)]
        if not version_matches:
            listed = ", ".join(r.describe() for r in ranges)
            return None, (
                f"no kernel for {op_name} at since_version {since_version} (registered: {listed})"
            )
        first_problem = ""
        for r in version_matches:
            problem = r.type_mismatch(input_types)
            if problem is None:
                return r, f"kernel {op_name} {r.describe()}"
            first_problem = first_problem or problem
        return None, f"{first_problem} by {op_name} {version_matches[0].describe()}"

    def ops(self, domain: str | None = None) -> list[tuple[str, str]]:
        """Sorted ``(domain, op)`` keys, optionally restricted to one domain."""
        wanted = None if domain is None else normalize_domain(domain)
        return sorted(k for k in self.ranges if wanted is None or k[0] == wanted)

    @property
    def has_type_constraints(self) -> bool:
        """Whether any range records its types (live tables and dumped snapshots do)."""
        return any(r.type_constraints is not None for rs in self.ranges.values() for r in rs)

    def __len__(self) -> int:
        return sum(len(v) for v in self.ranges.values())

    def __repr__(self) -> str:
        return (
            f"KernelTable(ep={self.ep!r}, ort_version={self.ort_version!r}, "
            f"source={self.source!r}, kernels={len(self)})"
        )


# -- snapshots -------------------------------------------------------------------


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

    @property
    def file(self) -> str:
        return f"{self.name}.tsv"


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
) -> Path:
    """Write ``<name>.tsv`` and its provenance ``<name>.json`` into ``directory``.

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
            )
        )
    return sorted(infos, key=lambda i: i.name)


@functools.cache
def load_snapshot(name: str) -> KernelTable:
    """Load a shipped snapshot by name (``"cuda-ort-1.24"``; a ``.tsv`` suffix is accepted).

    The table's :attr:`~KernelTable.source` is ``"snapshot:<name>.tsv"``; its EP and ORT
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
    return parse_snapshot(
        text,
        ep=info.ep,
        ort_version=info.ort_version,
        source=f"snapshot:{info.file}",
        ep_version=info.ep_version,
    )


# -- live tables -------------------------------------------------------------------


def _rows_from_defs(
    defs: Iterable[Any], provider: str
) -> list[tuple[str, str, int, int | None, Mapping[str, Iterable[str]] | None]]:
    rows: list[tuple[str, str, int, int | None, Mapping[str, Iterable[str]] | None]] = []
    for d in defs:
        if getattr(d, "provider", provider) != provider:
            continue
        start, end = d.version_range
        types = {str(k): [str(t) for t in v] for k, v in dict(d.type_constraints).items()}
        rows.append((str(d.domain), str(d.op_name), int(start), int(end), types))
    return rows


def _installed_ort_version() -> str:
    import onnxruntime as ort

    return str(ort.__version__)


@functools.cache
def live_table(ep: str) -> KernelTable:
    """List ``ep``'s kernels from the ONNX Runtime installed in this process.

    - Built-in providers (CPU, CUDA, DirectML): ``get_all_opkernel_def()`` filtered by
      provider. Listing CUDA needs a machine where its library loads (a GPU machine).
    - The WebGPU plugin EP: registers ``onnxruntime-ep-webgpu`` (see
      :func:`onnxscript_ep_passes.ep.webgpu.register_webgpu`) and calls
      ``get_registered_ep_kernel_defs("WebGpuExecutionProvider")``; this needs a WebGPU
      adapter (a Vulkan driver; lavapipe will do).
    - A CUDA *plugin* EP bundled with onnxruntime-gpu is tried the same way when the
      built-in listing has no CUDA kernels.

    Tables are cached per EP for the life of the process.

    Raises:
        LiveTableUnavailableError: the EP cannot be listed here; the message says why.
    """
    return _live_table(canonical_ep_name(ep))


@functools.cache
def _live_table(canonical: str) -> KernelTable:
    try:
        import onnxruntime as ort
        from onnxruntime.capi import _pybind_state as capi
    except ImportError as e:  # pragma: no cover - onnxruntime is a dependency
        raise LiveTableUnavailableError(f"onnxruntime is not importable: {e}") from e
    version = str(ort.__version__)

    if canonical == "WebGpuExecutionProvider":
        from onnxscript_ep_passes.ep import webgpu

        ok, reason = webgpu.webgpu_available(run_probe=False)
        if not ok:
            raise LiveTableUnavailableError(f"WebGPU EP unavailable: {reason}")
        try:
            defs = capi.get_registered_ep_kernel_defs(canonical)
        except Exception as e:
            raise LiveTableUnavailableError(f"cannot list WebGPU kernels: {e}") from e
        rows = _rows_from_defs(defs, canonical)
        return KernelTable.from_rows(
            canonical,
            version,
            "live:get_registered_ep_kernel_defs",
            rows,
            ep_version=webgpu.plugin_version(),
        )

    available = ort.get_available_providers()
    rows = []
    if canonical in available:
        try:
            rows = _rows_from_defs(capi.get_all_opkernel_def(), canonical)
        except Exception as e:
            raise LiveTableUnavailableError(
                f"get_all_opkernel_def() failed while listing {canonical} (its library must "
                f"load, e.g. a GPU machine for CUDA): {e}"
            ) from e
        if rows:
            return KernelTable.from_rows(canonical, version, "live:get_all_opkernel_def", rows)
    if hasattr(capi, "get_registered_ep_kernel_defs"):
        try:
            rows = _rows_from_defs(capi.get_registered_ep_kernel_defs(canonical), canonical)
        except Exception as e:
            logger.debug("get_registered_ep_kernel_defs(%s) failed: %s", canonical, e)
            rows = []
        if rows:
            return KernelTable.from_rows(
                canonical, version, "live:get_registered_ep_kernel_defs", rows
            )
    raise LiveTableUnavailableError(
        f"{canonical} is not available in the installed onnxruntime {version} "
        f"(available providers: {available}); its kernels can only be listed where its "
        "library loads (for CUDA: onnxruntime-gpu on a machine with a GPU)"
    )


# -- choosing a table ---------------------------------------------------------------

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


def _release_line(version: str) -> tuple[int, int]:
    """``"1.24.3"`` -> ``(1, 24)``."""
    m = _VERSION_RE.match(version)
    if not m:
        raise ValueError(f"Unrecognised ORT version {version!r} (expected e.g. '1.24' or '1.24.2')")
    return int(m.group(1)), int(m.group(2))


def _snapshot_order(info: SnapshotInfo) -> tuple[int, int, int, str]:
    """Order snapshots by release line; a ``main-*`` snapshot sorts right after the release
    named by its ``after_release`` field (e.g. Sept 2026 main after 1.27)."""
    if _VERSION_RE.match(info.ort_version):
        return (*_release_line(info.ort_version), 0, info.ort_version)
    if info.after_release:
        return (*_release_line(info.after_release), 1, info.ort_version)
    return (10**6, 0, 1, info.ort_version)


def _same_release(requested: str, installed: str) -> bool:
    """``requested`` names the installed release ("1.32" and "1.32.0" both match 1.32.0)."""
    req = requested.split(".")
    inst = installed.split("+")[0].split(".")
    return inst[: len(req)] == req


def get_table(ep: str, ort_version: str | None = None, *, prefer_live: bool = True) -> KernelTable:
    """The kernel table to predict placement with.

    Resolution:

    1. ``ep`` aliases are resolved (:func:`canonical_ep_name`).
    2. If ``prefer_live`` and ``ort_version`` is None or names the installed ORT release,
       a live table is used when the EP can be listed here (:func:`live_table`).
    3. Otherwise a shipped snapshot of that EP: one whose ``ort_version`` equals the
       requested string (e.g. ``"main-2026-09"``); else the newest snapshot whose release
       line is not newer than the requested one (``"1.24.2"`` -> the ``1.24`` snapshot;
       ``"1.26"`` -> ``1.24``; a ``main-*`` snapshot counts as newer than every release
       up to its ``after_release``); when every snapshot is newer, the oldest. ORT almost
       only ever adds kernels, so an older table errs on the side of predicting fallback.
       Without ``ort_version``, the installed ORT version is the requested one.

    Raises:
        ValueError: no live table and no snapshot for the EP (the message lists the
            shipped tables), or an unparsable ``ort_version``.
    """
    canonical = canonical_ep_name(ep)
    installed = _installed_ort_version()
    if prefer_live and (ort_version is None or _same_release(ort_version, installed)):
        try:
            return live_table(canonical)
        except LiveTableUnavailableError as e:
            logger.info("No live %s table (%s); using a shipped snapshot", canonical, e)
    wanted = ort_version or installed
    shipped = available_snapshots()
    snaps = sorted((s for s in shipped if s.ep == canonical), key=_snapshot_order)
    if not snaps:
        listing = ", ".join(f"{s.name} ({s.ep}, ORT {s.ort_version})" for s in shipped)
        raise ValueError(
            f"No kernel table for {canonical}: it cannot be listed live here and no snapshot "
            f"is shipped for it. Shipped snapshots: {listing}"
        )
    exact = [s for s in snaps if s.ort_version == wanted]
    if exact:
        return load_snapshot(exact[-1].name)
    line = _release_line(wanted)
    not_newer = [s for s in snaps if _snapshot_order(s)[:3] <= (*line, 0)]
    chosen = not_newer[-1] if not_newer else snaps[0]
    if _snapshot_order(chosen)[:2] != line:
        logger.warning(
            "No %s kernel table for ORT %s; using the nearest snapshot %s (ORT %s)",
            canonical,
            wanted,
            chosen.name,
            chosen.ort_version,
        )
    return load_snapshot(chosen.name)
