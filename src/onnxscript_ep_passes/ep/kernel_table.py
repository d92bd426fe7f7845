"""Kernel registrations of one ONNX Runtime execution provider, and ORT's matching rule.

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

- **Tables are immutable**: answers that depend only on the table and a key (a version
  match, a caller's kernel decision) are kept in the table's :meth:`KernelTable.memo`.

Where tables come from is elsewhere: shipped snapshots in
:mod:`~onnxscript_ep_passes.ep.snapshots`, live listings in
:mod:`~onnxscript_ep_passes.ep.live_tables`, and the choice between them in
:mod:`~onnxscript_ep_passes.ep.target`. Each of them sets :attr:`KernelTable.kind`, a
:class:`TableKind` (a table a caller builds from rows is ``FILE`` unless it says
otherwise); :attr:`KernelTable.source` is only the text reports show. Provenance is never
read back from that text: a report written as JSON carries the kind as a field of its own.
"""

from __future__ import annotations

__all__ = ["KernelRange", "KernelTable", "TableKind"]

import dataclasses
import enum
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from onnxscript_ep_passes.ep.names import normalize_domain, normalize_type

_INT_MAX = 2**31 - 1


class TableKind(enum.Enum):
    """Where a kernel table comes from (its provenance, as a value).

    - ``LIVE``: listed from the installed ORT (``source`` ``"live:<API>"``);
    - ``SNAPSHOT``: a shipped snapshot (``"snapshot:<file>"``, marked when not a release);
    - ``FILE``: a caller's table (``--kernel-table FILE``: ``"file:<path>"``, or built from
      rows);
    - ``NONE``: no table, only measuring can choose (``"none: measured"``).
    """

    LIVE = "live"
    SNAPSHOT = "snapshot"
    FILE = "file"
    NONE = "none"

    def detail(self, source: str) -> str:
        """What ``source`` says after this kind's ``"<kind>:"`` prefix: the listing API
        (live), the snapshot's file and marks (snapshot), the path (file), ``"measured"``
        (none); ``source`` itself, stripped, when it has no such prefix."""
        return source.removeprefix(f"{self.value}:").strip()


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
        ep: ORT's provider name (an EP profile's ``ort_name``).
        ort_version: The ORT version (or line, e.g. ``"main-2026-09"``) the table describes.
        source: Provenance: ``"snapshot:<file>"``, ``"live:get_all_opkernel_def"`` or
            ``"live:get_registered_ep_kernel_defs"``.
        ranges: ``(domain, op) -> kernel ranges`` in registration order; domain ``""`` is
            ai.onnx.
        ep_version: Version of a plugin EP library (e.g. onnxruntime-ep-webgpu), if any.
        kind: The provenance as a value; every loader sets it, a table a caller builds
            is ``FILE`` unless it says otherwise. Never derived from ``source``.
        from_release: False only for a shipped snapshot whose provenance names no ORT
            release (its ``source`` carries a mark saying so, for people to read).
    """

    ep: str
    ort_version: str
    source: str
    ranges: Mapping[tuple[str, str], tuple[KernelRange, ...]] = dataclasses.field(hash=False)
    ep_version: str | None = None
    kind: TableKind = dataclasses.field(default=TableKind.FILE, compare=False)
    from_release: bool = dataclasses.field(default=True, compare=False)
    # Answers of pure functions of this (immutable) table, by their callers' names.
    _memos: dict[str, dict[Hashable, Any]] = dataclasses.field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    @classmethod
    def from_rows(
        cls,
        ep: str,
        ort_version: str,
        source: str,
        rows: Iterable[tuple[str, str, int, int | None, Mapping[str, Iterable[str]] | None]],
        *,
        ep_version: str | None = None,
        kind: TableKind = TableKind.FILE,
    ) -> KernelTable:
        """Build a table from ``(domain, op, start, end, type_constraints)`` rows.

        ``end`` may be ``None`` or ORT's INT_MAX for an open range; domains and type
        names are normalised; ``kind`` is the table's provenance (a caller's table, ``FILE``,
        unless said otherwise).
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
            ep=ep,
            ort_version=ort_version,
            source=source,
            ranges={k: tuple(v) for k, v in grouped.items()},
            ep_version=ep_version,
            kind=kind,
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
        matched: dict[Hashable, KernelRange | None] = self.memo("match")
        key = (domain, op, since_version)
        if key in matched:
            return matched[key]
        found = next((r for r in self.registered(domain, op) if r.matches(since_version)), None)
        matched[key] = found
        return found

    def memo(self, name: str) -> dict[Hashable, Any]:
        """A cache for answers that depend only on this table and the caller's key.

        The table is immutable, so the cache lives as long as the table; each caller uses
        its own ``name`` and keys entries by everything its answer reads besides the table.
        """
        found = self._memos.get(name)
        if found is None:
            found = self._memos[name] = {}
        return found

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
            listed = ", ".join(dict.fromkeys(r.describe() for r in ranges))  # once each
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
