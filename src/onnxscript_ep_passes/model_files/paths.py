"""The files a command reads and writes: no output may destroy an input or another output.

Rules (``docs/safety.md``, "Paths a command reads and writes"):

* Two paths name the same file when they resolve (symbolic links followed) to the same
  path, or both exist with the same device and inode (hard links).
* Before any work, each path a command writes (``-o`` OUT, ``--report-json``) is compared
  with each path it reads (the model, ``--kernel-table``) and with the other outputs. A
  match is a usage error naming both options (:func:`path_conflicts`). OUT may be the model
  itself (it is replaced atomically), and only OUT.
* No other path the command reads or writes may be named as OUT's data file may be
  (``OUT.data``, ``OUT.<8 hex>.data`` in OUT's directory): saving OUT writes such a file and
  removes the ones the new OUT does not use.
* Each output must be creatable: its directory exists and it is not itself a directory
  (:func:`check_writable`, an I/O error: exit 1).
* Once the model is read, no output may be a file its weights are read from
  (:func:`check_not_weights`, exit 1, as for OUT in :mod:`~onnxscript_ep_passes.model_files.io`).
* An input file (the model, a kernel table) is read by :func:`read_regular_file`: opened
  without blocking, then only a regular, non-empty file of at most the caller's limit is
  read, and never more than that limit.
"""

from __future__ import annotations

__all__ = [
    "check_not_weights",
    "check_writable",
    "path_conflicts",
    "read_regular_file",
    "same_file",
]

import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

from onnxscript_ep_passes.model_files.atomic import is_data_name


def _identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether ``a`` and ``b`` name one file (resolved path, or device and inode)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    identity = _identity(a)
    return identity is not None and identity == _identity(b)


def path_conflicts(
    reads: Mapping[str, str | None],
    writes: Mapping[str, str | None],
    *,
    out: str = "-o",
    model: str = "MODEL",
) -> str | None:
    """Why the command's paths cannot work together (module docstring), or None.

    ``reads`` and ``writes`` map an option's name (``"MODEL"``, ``"--kernel-table"``,
    ``"-o"``, ``"--report-json"``) to its path (None when not given); ``out`` names the
    output whose data file is written beside it, which alone may be ``model``.
    """
    given_reads = {k: v for k, v in reads.items() if v is not None}
    given_writes = {k: v for k, v in writes.items() if v is not None}
    problems: list[str] = []
    written = list(given_writes.items())
    for i, (option, path) in enumerate(written):
        for read, source in given_reads.items():
            if (option, read) != (out, model) and same_file(path, source):
                problems.append(f"{option} '{path}' is the file {read} '{source}' it reads")
        for other, other_path in written[i + 1 :]:
            if same_file(path, other_path):
                problems.append(f"{option} '{path}' and {other} '{other_path}' are one file")
    out_path = given_writes.get(out)
    if out_path is not None:
        named = {**{k: v for k, v in given_writes.items() if k != out}, **given_reads}
        for option, path in named.items():
            if is_data_name(Path(os.path.abspath(out_path)), Path(os.path.abspath(path))):
                problems.append(
                    f"{option} '{path}' is named as a data file of {out} '{out_path}' "
                    "(saving it replaces or removes such files)"
                )
    if not problems:
        return None
    return "refusing to overwrite an input or an output: " + "; ".join(problems)


def check_writable(writes: Mapping[str, str | None]) -> None:
    """Refuse (OSError) an output that is a directory or whose directory does not exist."""
    for option, path in writes.items():
        if path is None:
            continue
        if os.path.isdir(path):
            raise IsADirectoryError(f"{option} '{path}' is a directory")
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise FileNotFoundError(
                f"cannot write {option} '{path}': directory '{directory}' does not exist"
            )


def check_not_weights(writes: Mapping[str, str | None], weights: Iterable[Path]) -> None:
    """Refuse (ValueError) an output that is a file the model's weights are read from."""
    files = list(weights)
    for option, path in writes.items():
        if path is not None and any(same_file(path, f) for f in files):
            raise ValueError(
                f"refusing to write {option} '{path}': the input's weights are read from "
                "that file; choose another path"
            )


def read_regular_file(
    path: str | os.PathLike[str],
    label: str,
    limit: int,
    *,
    kind: str,
    too_large: str,
    error: type[ValueError] = ValueError,
) -> bytes:
    """The bytes of ``path``, which must be a regular, non-empty file of at most ``limit``
    bytes; otherwise ``error`` with a one-line message starting with ``label``.

    ``kind`` names what an empty file is not ("an ONNX model"); ``too_large`` ends the
    message for a file over ``limit`` ("more than one protobuf can hold (2 GiB)"). The
    file is opened with ``O_NONBLOCK``, so a FIFO without a writer never blocks.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as failure:
        raise error(f"{label}: cannot read: {failure.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{label}: not a regular file")
        if info.st_size == 0:
            raise error(f"{label}: empty file (0 bytes), not {kind}")
        if info.st_size > limit:
            raise error(f"{label}: {info.st_size} bytes, {too_large}")
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as failure:
        raise error(f"{label}: cannot read: {failure.strerror}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise error(f"{label}: grew past {limit} bytes while being read")
    return b"".join(chunks)
