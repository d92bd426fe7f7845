"""The tools that list ORT releases' kernel tables: their mechanisms, on small built inputs.

The tools themselves download release wheels (hundreds of MB), so CI does not run them;
these tests build the inputs they read (an ELF provider library importing versioned CUDA
symbols, a PE image holding a registration array) and check what the tools make of them.
"""

from __future__ import annotations

import importlib.util
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def _tool(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    if name in sys.modules:
        return sys.modules[name]
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


def _gcc(source: Path, output: Path, *args: str) -> None:
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(output), str(source), *args], check=True)


def test_cuda_stand_ins_let_a_provider_load_and_see_one_device(tmp_path: Path) -> None:
    """A provider library linked against a versioned libcudart.so.12 (whose real functions
    fail) and opening libcuda.so.1 by name loads against the stand-ins, which report one
    device and success."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "cudart.c").write_text(
        "int cudaGetDeviceCount(int *c) { *c = 0; return 100; }\n"
        "int cudaSetDevice(int d) { return 101; }\n"
    )
    (real / "cudart.map").write_text("libcudart.so.12 { global: *; };\n")
    _gcc(
        real / "cudart.c",
        real / "libcudart.so.12",
        "-Wl,-soname,libcudart.so.12",
        f"-Wl,--version-script={real / 'cudart.map'}",
    )
    capi = tmp_path / "capi"
    capi.mkdir()
    (capi / "provider.c").write_text(
        textwrap.dedent(
            """\
            #include <dlfcn.h>
            int cudaGetDeviceCount(int *c);
            int cudaSetDevice(int d);
            int probe(void) {
              int count = -1;
              if (cudaGetDeviceCount(&count) != 0 || cudaSetDevice(0) != 0) return -1;
              void *driver = dlopen("libcuda.so.1", RTLD_NOW);
              if (!driver || !dlsym(driver, "cuLaunchKernel")) return -2;
              return count;
            }
            """
        )
    )
    provider = capi / "libonnxruntime_providers_fake.so"
    _gcc(capi / "provider.c", provider, f"-L{real}", "-l:libcudart.so.12", "-ldl")

    stubs = tmp_path / "stubs"
    _tool("dump_release_kernel_table").make_stubs(capi, stubs)
    assert sorted(p.name for p in stubs.iterdir() if p.suffix not in (".c", ".map")) == [
        "libcuda.so.1",
        "libcudart.so.12",
    ]
    probe = f"import ctypes; print(ctypes.CDLL({str(provider)!r}).probe())"
    env = dict(os.environ, LD_LIBRARY_PATH=str(stubs))
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "1"
    # against the real (failing) library the same probe fails: the stand-ins were used
    env["LD_LIBRARY_PATH"] = str(real)
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "-1"


def _pe_image(entries: list[tuple[str, int, str]], stride: int) -> bytes:
    """A PE32+ image with one .rdata section: the op and domain strings, then the entries
    (op pointer, since version, padding, domain pointer) at ``stride`` bytes."""
    base, rva, raw = 0x180000000, 0x1000, 0x400
    strings = b""
    where: dict[str, int] = {}
    for text in sorted({op for op, _, _ in entries} | {d for _, _, d in entries}):
        where[text] = len(strings)
        strings += text.encode() + b"\0"
    table_at = (len(strings) + 7) // 8 * 8
    body = bytearray(strings.ljust(table_at, b"\0"))
    for op, since, domain in entries:
        entry = struct.pack("<QiiQ", base + rva + where[op], since, 0, base + rva + where[domain])
        body += entry.ljust(stride, b"\xff")
    body += b"\0" * 32
    header = bytearray(raw)
    struct.pack_into("<I", header, 0x3C, 0x40)
    header[0x40:0x44] = b"PE\0\0"
    struct.pack_into("<HH", header, 0x44, 0x8664, 1)  # machine, one section
    struct.pack_into("<H", header, 0x54, 240)  # size of the optional header
    struct.pack_into("<Q", header, 0x58 + 24, base)  # image base
    section = 0x58 + 240
    header[section : section + 8] = b".rdata\0\0"
    struct.pack_into("<IIII", header, section + 8, len(body), rva, len(body), raw)
    return bytes(header) + bytes(body)


def test_dml_reader_finds_the_registration_array() -> None:
    entries = [("Conv", 11, ""), ("Relu", 14, ""), ("Gelu", 1, "com.microsoft")]
    entries += [("DmlFusedConv", 1, "com.microsoft.dml"), ("Transpose", 21, "")]
    image = _tool("dump_dml_release_table").PeImage(_pe_image(entries, stride=48))
    assert image.registrations() == [(d, op, v) for op, v, d in entries]


def test_dml_reader_ignores_what_is_not_an_entry() -> None:
    # A domain pointer to a string that is no domain, or a version out of range: no entry.
    entries = [("Conv", 11, "Arabic"), ("Relu", 99, "")]
    assert _tool("dump_dml_release_table").PeImage(_pe_image(entries, 48)).registrations() == []


@pytest.mark.parametrize("tool", ["dump_release_kernel_table", "dump_dml_release_table"])
def test_tools_say_what_they_do(tool: str) -> None:
    done = subprocess.run(
        [sys.executable, str(TOOLS / f"{tool}.py"), "--help"],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONPATH=str(TOOLS.parent / "src")),
    )
    assert "versions" in done.stdout and "--out" in done.stdout
