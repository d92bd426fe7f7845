"""Which kernel table to predict placement with: a live listing, or the nearest snapshot.

Rules (:func:`get_table`):

1. EP aliases are resolved (:func:`~onnxscript_ep_passes.ep.profiles.resolve_ep`).
2. A live table (:mod:`~onnxscript_ep_passes.ep.live_tables`) when the requested ORT
   version is the installed release (or none is requested) and the EP can be listed here.
3. Otherwise a shipped snapshot (:mod:`~onnxscript_ep_passes.ep.snapshots`): the one for
   exactly the requested version string, else the newest not newer than the requested
   release line, else the oldest. A ``main-*`` snapshot sorts right after the release
   named by its ``after_release``.

Versions are parsed with ``packaging.version``; only the snapshot names of ORT's main
branch (``main-2026-09``), which are not versions, are ordered by hand (rule 3).
"""

from __future__ import annotations

__all__ = ["get_table"]

import logging

from packaging.version import InvalidVersion, Version

from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.live_tables import (
    LiveTableUnavailableError,
    installed_ort_version,
    live_table,
)
from onnxscript_ep_passes.ep.profiles import EpProfile, resolve_ep
from onnxscript_ep_passes.ep.snapshots import SnapshotInfo, available_snapshots, load_snapshot

logger = logging.getLogger(__name__)


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


def get_table(
    ep: str | EpProfile, ort_version: str | None = None, *, prefer_live: bool = True
) -> KernelTable:
    """The kernel table to predict placement with.

    Resolution:

    1. ``ep`` aliases are resolved (:func:`resolve_ep`).
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
