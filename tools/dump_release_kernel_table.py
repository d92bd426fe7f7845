#!/usr/bin/env python3
"""Dump the CUDA kernel table of onnxruntime-gpu releases, on a machine without a GPU.

For each release line among the versions given (``1.24.1 1.24.4`` are one line), every
version's wheel is fetched from the package index with ``pip download``, unpacked into a
temporary folder and listed with ORT's own ``get_all_opkernel_def()``; the newest version
of the line is written as ``cuda-ort-<major.minor>.tsv`` with its provenance JSON (the
release, the commit ORT's build info names, the wheel and its sha256, and whether each
other version of the line lists the same kernels)::

    python tools/dump_release_kernel_table.py 1.24.1 1.24.4 1.25.1 \\
        --out src/onnxscript_ep_passes/ep/data

How it lists CUDA without a GPU: the CUDA provider library needs the CUDA, cuDNN and
TensorRT libraries to load, and a device to create the EP. The tool writes stand-ins for
them (every function the provider libraries import, returning success; the device count
is 1) into the temporary folder, so that the registrations compiled into the release are
listed as ORT lists them on a GPU machine. Nothing is run on a device and no kernel is
called. Needs ``pip`` (with access to the package index), ``gcc``, ``readelf`` and ``nm``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging.version import Version

from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.snapshots import write_snapshot

logger = logging.getLogger("dump_release_kernel_table")

_PACKAGE = "onnxruntime-gpu"
_CUDA_EP = "CUDAExecutionProvider"

# Stand-ins whose answers matter (the rest return 0, i.e. success, and leave outputs alone).
_SPECIAL = {
    "cudaGetDeviceCount": "int cudaGetDeviceCount(int *c) { *c = 1; return 0; }",
    "cudaGetDevice": "int cudaGetDevice(int *d) { *d = 0; return 0; }",
    "cudaRuntimeGetVersion": "int cudaRuntimeGetVersion(int *v) { *v = 12080; return 0; }",
    "cudaDriverGetVersion": "int cudaDriverGetVersion(int *v) { *v = 12080; return 0; }",
    "cudaGetErrorString": 'const char *cudaGetErrorString(int e) { return "stub"; }',
    "cudaGetErrorName": 'const char *cudaGetErrorName(int e) { return "stub"; }',
    "cudaGetDeviceProperties": "int cudaGetDeviceProperties(void *p, int d) "
    "{ memset(p, 0, 1000); return 0; }",
    "cudaGetDeviceProperties_v2": "int cudaGetDeviceProperties_v2(void *p, int d) "
    "{ memset(p, 0, 1000); return 0; }",
    "cudaDeviceGetAttribute": "int cudaDeviceGetAttribute(int *v, int a, int d) "
    "{ *v = 0; return 0; }",
    "cudaMalloc": "int cudaMalloc(void **p, size_t n) { *p = malloc(n ? n : 1); return 0; }",
    "cudnnGetVersion": "size_t cudnnGetVersion(void) { return 90000; }",
    "cudnnGetErrorString": 'const char *cudnnGetErrorString(int e) { return "stub"; }',
    "__cudaRegisterFatBinary": "static void *fat[4]; "
    "void **__cudaRegisterFatBinary(void *f) { return fat; }",
}
_NOT_STUBBED = ("_ITM", "__gmon", "Provider_", "__cxa", "_Unwind", "__gcc")

# Run in the unpacked release: list its CUDA kernels as JSON on stdout.
_CHILD = r"""
import json, onnxruntime as ort
from onnxruntime.capi import _pybind_state as C
info = C.get_build_info() if hasattr(C, "get_build_info") else ""
rows = []
for d in C.get_all_opkernel_def():
    if d.provider != "CUDAExecutionProvider":
        continue
    start, end = d.version_range
    types = {str(k): sorted(str(t) for t in v) for k, v in dict(d.type_constraints).items()}
    rows.append([str(d.domain), str(d.op_name), int(start), int(end), types])
print(json.dumps({"version": ort.__version__, "build_info": info, "rows": rows}))
"""


def _run(args: list[str], **kwargs: object) -> str:
    done = subprocess.run(args, capture_output=True, text=True, check=True, **kwargs)  # type: ignore[call-overload]
    return str(done.stdout)


def _needed(library: Path) -> list[str]:
    out = _run(["readelf", "-d", str(library)])
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def _undefined(library: Path) -> list[str]:
    out = _run(["nm", "-D", "--undefined-only", str(library)])
    return [line.split()[-1] for line in out.splitlines() if line.split()[:1] == ["U"]]


def _write_stub(folder: Path, soname: str, names: Iterable[str], versioned: bool) -> None:
    lines = ["#include <string.h>", "#include <stdlib.h>"]
    lines += [_SPECIAL.get(n, f"long {n}(void) {{ return 0; }}") for n in sorted(set(names))]
    source = folder / f"{soname}.c"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["gcc", "-shared", "-fPIC", "-o", str(folder / soname), str(source)]
    args.append(f"-Wl,-soname,{soname}")
    if versioned:  # the providers import e.g. cudaMalloc@libcudart.so.12
        script = folder / f"{soname}.map"
        script.write_text(f"{soname} {{ global: *; }};\n", encoding="utf-8")
        args.append(f"-Wl,--version-script={script}")
    _run(args)


def make_stubs(capi: Path, folder: Path) -> None:
    """Stand-ins for the CUDA, cuDNN, TensorRT and driver libraries the providers import."""
    folder.mkdir(parents=True, exist_ok=True)
    providers = sorted(capi.glob("libonnxruntime_providers_*.so"))
    sonames = sorted({n for p in providers for n in _needed(p) if n.startswith(("libcu", "libnv"))})
    versioned: dict[str, set[str]] = {n: set() for n in sonames}
    plain: set[str] = set()
    for provider in providers:
        for symbol in _undefined(provider):
            name, _, version = symbol.partition("@")
            if version in versioned:
                versioned[version].add(name)
            elif not version and not name.startswith(_NOT_STUBBED):
                plain.add(name)  # TensorRT's entry points carry no version
    for soname, names in versioned.items():
        _write_stub(folder, soname, names or plain, versioned=bool(names))
    # The CUDA driver is opened with dlopen (no import): its names are strings in the library.
    driver = {
        m.decode()
        for p in providers
        for m in re.findall(rb"(?<![A-Za-z0-9_])(cu[A-Z][A-Za-z0-9_]+)(?=\x00)", p.read_bytes())
    }
    _write_stub(folder, "libcuda.so.1", driver, versioned=False)


@dataclasses.dataclass(frozen=True)
class ReleaseListing:
    """The CUDA kernels of one onnxruntime-gpu release and where they came from."""

    version: str
    table: KernelTable
    build_info: str
    commit: str | None
    wheel: str
    sha256: str


def dump_release(version: str, work: Path) -> ReleaseListing:
    """Fetch, unpack and list one onnxruntime-gpu release (the table's ORT version is the
    release line, ``1.24``)."""
    wheels = work / f"wheel-{version}"
    pip = [sys.executable, "-m", "pip", "download", f"{_PACKAGE}=={version}", "--no-deps"]
    _run([*pip, "--only-binary", ":all:", "-q", "-d", str(wheels)])
    (wheel,) = wheels.glob("*.whl")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    unpacked = work / f"ort-{version}"
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.namelist() if m.startswith("onnxruntime/")]
        archive.extractall(unpacked, members)
    wheel.unlink()
    stubs = work / f"stubs-{version}"
    make_stubs(unpacked / "onnxruntime" / "capi", stubs)
    env = dict(os.environ, PYTHONPATH=str(unpacked), LD_LIBRARY_PATH=str(stubs))
    listed = json.loads(_run([sys.executable, "-c", _CHILD], env=env, cwd=str(work)))
    shutil.rmtree(unpacked)
    shutil.rmtree(stubs)
    if listed["version"] != version:
        raise RuntimeError(f"unpacked onnxruntime {listed['version']}, expected {version}")
    rows = [(str(d), str(o), int(a), int(b), t) for d, o, a, b, t in listed["rows"]]
    table = KernelTable.from_rows(_CUDA_EP, _line(version), f"release:{_PACKAGE} {version}", rows)
    match = re.search(r"git-commit-id=([0-9a-f]+)", listed["build_info"])
    return ReleaseListing(
        version=version,
        table=table,
        build_info=str(listed["build_info"]),
        commit=match.group(1) if match else None,
        wheel=wheel.name,
        sha256=digest,
    )


def _line(version: str) -> str:
    major, minor = Version(version).release[:2]
    return f"{major}.{minor}"


def _compare(other: KernelTable, table: KernelTable) -> str:
    if dict(other.ranges) == dict(table.ranges):
        return "same kernels"
    return f"differs: {len(other)} kernels against {len(table)}"


def write_line(listings: list[ReleaseListing], out: Path) -> Path:
    """Write the newest listing of one release line as ``cuda-ort-<line>``, comparing the
    line's other releases with it."""
    newest = listings[-1]
    line = newest.table.ort_version
    provenance = {
        "release": f"v{newest.version}",
        "commit": newest.commit,
        "package": f"{_PACKAGE}=={newest.version}",
        "wheel": newest.wheel,
        "wheel_sha256": newest.sha256,
        "build_info": newest.build_info,
        "other_releases": {o.version: _compare(o.table, newest.table) for o in listings[:-1]},
    }
    notes = (
        f"Listed with get_all_opkernel_def() from the {_PACKAGE} {newest.version} wheel "
        "(tools/dump_release_kernel_table.py: CUDA libraries replaced by stand-ins, no GPU); "
        "all domains, with type constraints."
    )
    return write_snapshot(newest.table, out, f"cuda-ort-{line}", notes, provenance=provenance)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="+", help="onnxruntime-gpu versions, e.g. 1.24.4")
    parser.add_argument("--out", type=Path, default=Path("."), help="output directory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    lines: dict[str, list[str]] = {}
    for version in sorted(set(args.versions), key=Version):
        lines.setdefault(_line(version), []).append(version)
    with tempfile.TemporaryDirectory(prefix="ort-release-") as tmp:
        for versions in lines.values():
            listings = []
            for version in versions:
                try:
                    listings.append(dump_release(version, Path(tmp)))
                except (subprocess.CalledProcessError, RuntimeError, ValueError) as error:
                    detail = getattr(error, "stderr", "") or ""
                    tail = detail.strip().splitlines()[-1:] or [str(error)]
                    logger.error("cannot list %s %s: %s", _PACKAGE, version, tail[0])
                    return 1
                logger.info("%s: %d CUDA kernels", version, len(listings[-1].table))
            path = write_line(listings, args.out)
            logger.info("wrote %s from %s (commit %s)", path, versions[-1], listings[-1].commit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
