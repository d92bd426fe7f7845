#!/usr/bin/env python3
"""Read the DirectML kernel table of onnxruntime-directml releases from their Windows DLL.

The DirectML EP ships only in Windows wheels, which cannot be loaded here. Most of its
kernels are declared in one static array (``OperatorRegistration.cpp``: op name, since
version, domain, ...), which the compiler lays out as initialised data: each entry starts
with a pointer to the op name, the since version and a pointer to the domain. This tool
fetches each release's wheel with ``pip download``, finds that array in the library (the
longest run of such entries at one stride) and writes ``dml-ort-<major.minor>.tsv`` with
its provenance::

    python tools/dump_dml_release_table.py 1.24.4 --carry-from dml-ort-1.24 \\
        --out src/onnxscript_ep_passes/ep/data

A few kernels (If, the Sequence and Optional ops, DFT, STFT, GridSample) are registered by
code, not by the array, and cannot be read from the binary; ``--carry-from SNAPSHOT`` adds
the rows of those ops from a transcribed table, and the provenance lists them as carried.
Every range is open ("N+"), as DirectML registers them.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import itertools
import logging
import re
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.version import Version

from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.snapshots import available_snapshots, load_snapshot, write_snapshot

logger = logging.getLogger("dump_dml_release_table")

_PACKAGE = "onnxruntime-directml"
_DML_EP = "DmlExecutionProvider"
_DOMAINS = {b"": "", b"com.microsoft": "com.microsoft", b"com.microsoft.dml": "com.microsoft.dml"}
_OP_NAME = re.compile(rb"[A-Z][A-Za-z0-9]*")
# The library holding the EP: onnxruntime.dll, or (1.16) the Python extension itself.
_LIBRARIES = ("onnxruntime/capi/onnxruntime.dll", "onnxruntime/capi/onnxruntime_pybind11_state.pyd")


class PeImage:
    """The sections of a PE32+ image, to read what a pointer in it points at."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        header = struct.unpack_from("<I", data, 0x3C)[0]
        sections = struct.unpack_from("<H", data, header + 6)[0]
        optional_size = struct.unpack_from("<H", data, header + 20)[0]
        optional = header + 24
        self.base = struct.unpack_from("<Q", data, optional + 24)[0]
        self.sections: list[tuple[str, int, int, int]] = []  # name, rva, raw offset, raw size
        for i in range(sections):
            at = optional + optional_size + 40 * i
            name = data[at : at + 8].rstrip(b"\0").decode()
            _, rva, raw_size, raw = struct.unpack_from("<IIII", data, at + 8)
            self.sections.append((name, rva, raw, raw_size))

    def string(self, address: int, limit: int = 64) -> bytes | None:
        """The NUL-terminated bytes at virtual ``address`` (None outside the file's data)."""
        rva = address - self.base
        for _, start, raw, size in self.sections:
            if start <= rva < start + size:
                at = raw + rva - start
                end = self.data.find(b"\0", at, at + limit)
                return None if end < 0 else self.data[at:end]
        return None

    def registrations(self) -> list[tuple[str, str, int]]:
        """``(domain, op, since_version)`` of the longest run of registration entries."""
        found: list[tuple[int, str, str, int]] = []
        span = 0x10000000
        for name, _, raw, size in self.sections:
            if name not in (".rdata", ".data"):
                continue
            for at in range(raw, raw + size - 24, 8):
                op, since, _, domain = struct.unpack_from("<QiiQ", self.data, at)
                if not (1 <= since <= 40 and self.base <= op < self.base + span):
                    continue
                if not self.base <= domain < self.base + span:
                    continue
                op_name, domain_name = self.string(op), self.string(domain)
                if op_name is None or domain_name not in _DOMAINS:
                    continue
                if _OP_NAME.fullmatch(op_name):
                    found.append((at, _DOMAINS[domain_name], op_name.decode(), since))
        if not found:
            return []
        strides = collections.Counter(b[0] - a[0] for a, b in itertools.pairwise(found))
        stride = strides.most_common(1)[0][0]
        best: list[tuple[int, str, str, int]] = []
        run = [found[0]]
        for previous, entry in itertools.pairwise(found):
            if entry[0] - previous[0] == stride:
                run.append(entry)
                continue
            best = max(best, run, key=len)
            run = [entry]
        best = max(best, run, key=len)
        return [(domain, op, since) for _, domain, op, since in best]


def _fetch(version: str, work: Path) -> tuple[Path, bytes, str]:
    folder = work / version
    pip = [sys.executable, "-m", "pip", "download", f"{_PACKAGE}=={version}", "--no-deps", "-q"]
    pip += ["--only-binary", ":all:", "--platform", "win_amd64", "-d", str(folder)]
    subprocess.run(pip, check=True, capture_output=True, text=True)
    (wheel,) = folder.glob("*.whl")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        member = next(m for m in _LIBRARIES if m in names)
        return wheel, archive.read(member), digest


def dump_release(version: str, carry_from: str | None, work: Path, out: Path) -> Path:
    """Write ``dml-ort-<line>`` for one onnxruntime-directml release."""
    wheel, library, digest = _fetch(version, work)
    image = PeImage(library)
    rows = image.registrations()
    if len(rows) < 100:
        raise RuntimeError(f"{wheel.name}: no registration table found ({len(rows)} entries)")
    carried: list[str] = []
    origin = None
    if carry_from:
        transcribed = load_snapshot(carry_from)
        info = next(i for i in available_snapshots() if i.name == carry_from.removesuffix(".tsv"))
        origin = info.source
        read = {op for _, op, _ in rows}
        for domain, op in transcribed.ops():
            if op in read:
                continue
            for r in transcribed.registered(domain, op):
                rows.append((domain, op, r.start))
                carried.append(f"{op} {r.start}+")
    major, minor = Version(version).release[:2]
    line = f"{major}.{minor}"
    table = KernelTable.from_rows(
        _DML_EP, line, f"release:{_PACKAGE} {version}", [(d, o, s, None, None) for d, o, s in rows]
    )
    match = re.search(rb"git-commit-id=([0-9a-f]+)", library)
    provenance = {
        "release": f"v{version}",
        "commit": match.group(1).decode() if match else None,
        "package": f"{_PACKAGE}=={version}",
        "wheel": wheel.name,
        "wheel_sha256": digest,
        "carried_from": origin,
        "carried_rows": carried,
    }
    notes = (
        f"Read from the static registration table in the {_PACKAGE} {version} Windows "
        f"library (tools/dump_dml_release_table.py): {len(rows) - len(carried)} kernels. "
        + (
            f"{len(carried)} rows of ops the EP registers by code are carried from the "
            f"{carry_from} ({origin}; listed in carried_rows), not read from the release. "
            if carried
            else ""
        )
        + "No type constraints; DirectML registers every range as 'N+'."
    )
    return write_snapshot(table, out, f"dml-ort-{line}", notes, provenance=provenance)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="+", help="onnxruntime-directml versions")
    parser.add_argument("--carry-from", help="snapshot whose code-registered ops are carried")
    parser.add_argument("--out", type=Path, default=Path("."), help="output directory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory(prefix="dml-release-") as tmp:
        for version in args.versions:
            try:
                path = dump_release(version, args.carry_from, Path(tmp), args.out)
            except (subprocess.CalledProcessError, RuntimeError, StopIteration) as error:
                logger.error("cannot read %s %s: %s", _PACKAGE, version, error)
                return 1
            logger.info("wrote %s from %s", path, version)
    return 0


if __name__ == "__main__":
    sys.exit(main())
