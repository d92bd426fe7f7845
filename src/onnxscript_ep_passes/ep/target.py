"""The target of a run: the EP, its kernel table, the ORT release, and where the table came from.

:func:`resolve_target` is the one way a pass or a command turns what the user asked
(``--ep``, ``--ort-version``, ``--kernel-table``, ``--measure``) into an :class:`EpTarget`.
Rules:

1. ``ep`` aliases are resolved (:func:`~onnxscript_ep_passes.ep.profiles.resolve_ep`).
2. ``kernel_table=FILE`` (:func:`read_kernel_table`): the file is read in the snapshot
   format (``ep/data/README.md``: tab-separated ``domain op start end
   [type_constraints]`` with that header line, ``inf`` for an open range, ``#``
   comments); its EP is the one asked for, its ORT version the one named (else the
   installed one), its source ``file:<path>``, kind ``FILE``. It is read as strictly as
   a model: a regular file (never a FIFO, device or directory, opened without blocking),
   not empty, at most :data:`MAX_TABLE_BYTES`, UTF-8 text, every row validated
   (:func:`~onnxscript_ep_passes.ep.snapshots.parse_snapshot`) and at least one; each
   error is one line naming the file (and the line).
3. Otherwise a live table (:mod:`~onnxscript_ep_passes.ep.live_tables`) when the
   requested ORT version is the installed release (or none is requested) and the EP can
   be listed here; kind ``LIVE``.
4. Otherwise a shipped snapshot (:mod:`~onnxscript_ep_passes.ep.snapshots`): the one for
   exactly the requested version string, else the newest not newer than the requested
   release line, else the oldest. A ``main-*`` snapshot sorts right after the release
   named by its ``after_release``. ORT almost only ever adds kernels, so an older table
   errs on the side of predicting fallback. Kind ``SNAPSHOT``.
5. An EP with neither, when the caller measures (``measure=True``): an empty table with
   source :data:`MEASURED_ONLY`, kind ``NONE``: the search measures every reachable opset.
   Without measuring: a :class:`ValueError` naming both options.
6. A prediction made with a shipped snapshot *assumes* an ORT release
   (:func:`release_assumed`) when the caller named none, or named one whose release line
   the snapshot is not (``--ort-version 1.32`` with only tables up to 1.31); a table the
   caller gave (a file, or ``table=``) assumes nothing.

Versions are parsed with ``packaging.version``; only the snapshot names of ORT's main
branch (``main-2026-09``), which are not versions, are ordered by hand (rule 4).
"""

from __future__ import annotations

__all__ = [
    "MAX_TABLE_BYTES",
    "MEASURED_ONLY",
    "EpTarget",
    "TableKind",
    "TargetRequest",
    "lookup_table",
    "profile_of",
    "read_kernel_table",
    "release_assumed",
    "resolve_target",
    "target_of",
]

import dataclasses
import logging
import os
from pathlib import Path

from packaging.version import InvalidVersion, Version

from onnxscript_ep_passes.ep.kernel_table import KernelTable, TableKind
from onnxscript_ep_passes.ep.live_tables import (
    LiveTableUnavailableError,
    installed_ort_version,
    live_table,
)
from onnxscript_ep_passes.ep.profiles import EpProfile, canonical_ep_name, profile_for, resolve_ep
from onnxscript_ep_passes.ep.snapshots import (
    NOT_A_RELEASE,
    SnapshotInfo,
    available_snapshots,
    load_snapshot,
    parse_snapshot,
)
from onnxscript_ep_passes.model_files.paths import read_regular_file

logger = logging.getLogger(__name__)

MEASURED_ONLY = "none: measured"
"""The source of the empty table of an EP that only measuring can choose for (rule 5)."""
MAX_TABLE_BYTES = 16 * 1024 * 1024
"""The largest kernel-table file read (the shipped tables are under 40 KB)."""


@dataclasses.dataclass(frozen=True)
class EpTarget:
    """What a run targets (module docstring).

    Attributes:
        profile: The EP.
        table: Its kernel table.
        ort_version_requested: The ORT release the caller named (None when none was).
        ort_version_assumed: The table is a shipped snapshot of another release than the
            caller named, or the caller named none (rule 6).
    """

    profile: EpProfile
    table: KernelTable
    ort_version_requested: str | None = None
    ort_version_assumed: bool = False

    @classmethod
    def of_table(cls, table: KernelTable, ort_version: str | None = None) -> EpTarget:
        """The target of a table the caller gave (it assumes no release)."""
        return cls(profile_for(table.ep), table, ort_version, False)

    @property
    def ep(self) -> str:
        """ORT's name of the EP."""
        return self.profile.ort_name

    @property
    def ort_version(self) -> str:
        """The ORT version the table describes."""
        return self.table.ort_version

    @property
    def kind(self) -> TableKind:
        """Where the table came from."""
        return self.table.kind

    @property
    def detail(self) -> str:
        """The table's provenance after its kind: the listing API (live), the snapshot's
        file (snapshot), the path (file), ``"measured"`` (none)."""
        return self.kind.detail(self.table.source).replace(NOT_A_RELEASE, "").strip()

    @property
    def from_release(self) -> bool:
        """False for a shipped snapshot whose provenance names no release."""
        return self.table.from_release


def resolve_target(
    ep: str | EpProfile,
    ort_version: str | None = None,
    *,
    kernel_table: str | os.PathLike[str] | None = None,
    measure: bool = False,
) -> EpTarget:
    """The target for ``ep`` at ``ort_version`` (module docstring, rules 1-6).

    Raises:
        ValueError: the kernel-table file is bad; no table for the EP and no measuring
            (the message names ``--kernel-table`` and ``--measure``); an unparsable
            ``ort_version``.
    """
    profile = resolve_ep(ep)
    if kernel_table is not None:
        table = read_kernel_table(kernel_table, profile.ort_name, ort_version)
        return EpTarget(profile, table, ort_version, False)
    try:
        table = lookup_table(profile, ort_version)
    except ValueError as error:
        if not measure:
            raise ValueError(
                f"{error}. Either pass --kernel-table FILE (API: kernel_table=) with the EP's "
                "kernels in the snapshot format (see ep/data/README.md; "
                "tools/dump_kernel_table.py writes one where the EP loads), or --measure "
                "(API: measure=True) to run each reachable opset in a real session on the EP "
                "and keep the fastest"
            ) from error
        version = ort_version or installed_ort_version()
        table = KernelTable.from_rows(
            profile.ort_name, version, MEASURED_ONLY, [], kind=TableKind.NONE
        )
    return EpTarget(profile, table, ort_version, release_assumed(table, ort_version))


def read_kernel_table(
    path: str | os.PathLike[str], ep: str, ort_version: str | None = None
) -> KernelTable:
    """Read a kernel table for ``ep`` from a snapshot-format file (rule 2).

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
        kind=TableKind.FILE,
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


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _release_line(version: str) -> tuple[int, int]:
    """``"1.24.3"`` -> ``(1, 24)``."""
    parsed = _version(version)
    if parsed is None:
        raise ValueError(f"Unrecognised ORT version {version!r} (expected e.g. '1.24' or '1.24.2')")
    major, minor = (*parsed.release, 0)[:2]
    return major, minor


def _snapshot_order(info: SnapshotInfo) -> tuple[int, int, int, str]:
    """Order snapshots by release line; a ``main-*`` snapshot sorts right after the release
    named by its ``after_release`` field (e.g. Sept 2026 main after 1.27)."""
    if _version(info.ort_version) is not None:
        return (*_release_line(info.ort_version), 0, info.ort_version)
    if info.after_release:
        return (*_release_line(info.after_release), 1, info.ort_version)
    return (10**6, 0, 1, info.ort_version)


def _same_release(requested: str, installed: str) -> bool:
    """``requested`` names the installed release ("1.32" and "1.32.0" both match 1.32.0)."""
    wanted, have = _version(requested), _version(installed)
    if wanted is None or have is None:
        return False
    return have.release[: len(wanted.release)] == wanted.release


def release_assumed(table: KernelTable, requested: str | None) -> bool:
    """Whether predicting with ``table`` assumes an ORT release the caller did not name
    (rule 6): ``table`` is a shipped snapshot and ``requested`` is None, or names another
    release line than the snapshot's (``"1.24.3"`` is the ``1.24`` line; a ``main-*``
    snapshot is only the release it is named for)."""
    if table.kind is not TableKind.SNAPSHOT:
        return False
    if requested is None:
        return True
    if requested == table.ort_version:
        return False
    if _version(requested) is None or _version(table.ort_version) is None:
        return True
    return _release_line(requested) != _release_line(table.ort_version)


def lookup_table(
    ep: str | EpProfile, ort_version: str | None = None, *, prefer_live: bool = True
) -> KernelTable:
    """A live table or the nearest shipped snapshot (rules 3-4; ``prefer_live=False``
    skips rule 3). Without ``ort_version``, the installed ORT version is the requested one.

    Raises:
        ValueError: no live table and no snapshot for the EP (the message lists the
            shipped tables), or an unparsable ``ort_version``.
    """
    canonical = resolve_ep(ep).ort_name
    installed = installed_ort_version()
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


def target_of(
    ep: str | EpProfile | EpTarget,
    ort_version: str | None = None,
    *,
    table: KernelTable | None = None,
    kernel_table: str | os.PathLike[str] | None = None,
    measure: bool = False,
) -> EpTarget:
    """The target a pass was given: ``ep`` itself when it is an :class:`EpTarget`; the
    target of ``table`` when one is given (it assumes no release); else
    :func:`resolve_target`.

    Raises:
        ValueError: ``ep`` is a target and ``ort_version``, ``table`` or ``kernel_table``
            is given too.
    """
    if isinstance(ep, EpTarget):
        if ort_version is not None or table is not None or kernel_table is not None:
            raise ValueError("pass an EpTarget or ort_version/table/kernel_table, not both")
        return ep
    if table is not None:  # the table names its EP
        return EpTarget.of_table(table, ort_version)
    return resolve_target(ep, ort_version, kernel_table=kernel_table, measure=measure)


def profile_of(ep: str | EpProfile | EpTarget) -> EpProfile:
    """The EP a pass targets (an alias resolved, a target's profile)."""
    return ep.profile if isinstance(ep, EpTarget) else resolve_ep(ep)


@dataclasses.dataclass(frozen=True)
class TargetRequest:
    """What a pass was given to target, resolved when it runs (:func:`target_of`)."""

    ep: str | EpProfile | EpTarget
    ort_version: str | None = None
    table: KernelTable | None = None
    kernel_table: str | os.PathLike[str] | None = None

    @property
    def profile(self) -> EpProfile:
        return profile_of(self.ep)

    def resolve(self, *, measure: bool = False) -> EpTarget:
        return target_of(
            self.ep,
            self.ort_version,
            table=self.table,
            kernel_table=self.kernel_table,
            measure=measure,
        )
