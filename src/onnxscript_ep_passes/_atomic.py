"""Atomic output: a private staging directory next to OUT, moved into place under a lock.

Rules (see ``model_io``'s docstring for the whole contract):

* New files are written and flushed in ``.OUT.<random>.tmp/`` in OUT's directory.
* The commit, under an exclusive flock on the directory, moves the data file first (under
  a name the old OUT does not use), then the graph, then removes data files named after
  OUT that the new graph does not use. A clean failure leaves nothing behind.
* Copies never read past the end they are given.
* **Every graph written is checked** (:func:`~.output_check.check_output`: onnx's
  checker with ``full_check``) before it is staged, so an OUT that fails the checker is
  never moved into place.
* A staging directory is flock'ed by its writer for its whole life. A run killed before
  its cleanup leaves its directory unlocked; the next writer to the same OUT removes such
  abandoned ``.OUT.<8 hex>.tmp/`` directories (creation and the scan both happen under the
  directory lock, so a live writer's fresh directory is never taken for abandoned).
"""

from __future__ import annotations

__all__ = ["Stage"]

import contextlib
import logging
import os
import re
import secrets
import shutil
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import onnx

from onnxscript_ep_passes._onnx import point_external_data
from onnxscript_ep_passes.output_check import check_output

logger = logging.getLogger(__name__)

_COPY_CHUNK = 64 * 1024 * 1024


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


class Stage:
    """A private directory next to OUT where the new files are written before the commit."""

    def __init__(self, out: Path, source: str | None) -> None:
        self.out = out
        self.directory = out.parent
        self.source = source  # resolved path the model was loaded from, if known
        self.path = Path(
            os.path.realpath(self.directory / f".{out.name}.{secrets.token_hex(4)}.tmp")
        )
        self.graph = self.path / out.name
        self.preferred = f"{out.name}.data"
        self._held: int | None = None  # fd holding the flock on the staging directory

    def create(self) -> None:
        """Make the staging directory, lock it, and remove abandoned ones of this OUT."""
        with _directory_lock(self.directory) as locked:
            os.mkdir(self.path)
            if locked:
                self._held = _try_lock(self.path)
                self._remove_abandoned()

    def _remove_abandoned(self) -> None:
        pattern = re.compile(r"\." + re.escape(self.out.name) + r"\.[0-9a-f]{8}\.tmp")
        for entry in os.scandir(self.directory):
            if not pattern.fullmatch(entry.name) or entry.path == str(self.path):
                continue
            if not entry.is_dir(follow_symlinks=False):
                continue
            fd = _try_lock(Path(entry.path))
            if fd is None:
                continue  # a live writer holds it
            try:
                logger.info("removing %s, left by an interrupted run", entry.name)
                shutil.rmtree(entry.path, ignore_errors=True)
            finally:
                os.close(fd)

    def data_name(self, read: set[Path]) -> str:
        """``OUT.data`` unless it is a file the input reads or the existing OUT may use."""
        preferred = self.directory / self.preferred
        taken = Path(os.path.realpath(preferred)) in read or (
            preferred.exists() and self.out.exists()
        )
        return self._fresh_name() if taken else self.preferred

    def _fresh_name(self) -> str:
        while True:
            name = f"{self.out.name}.{secrets.token_hex(4)}.data"
            if not (self.directory / name).exists():
                return name

    def write_graph(self, proto: onnx.ModelProto) -> None:
        try:
            data = proto.SerializeToString()
        except ValueError as error:  # protobuf's 2 GB limit
            raise ValueError(f"cannot serialize the model: {_one_line(error)}") from None
        check_output(proto, self.out)
        with open(self.graph, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())

    def copy_range(
        self, source: Path, end: int, name: str, stop: threading.Event | None = None
    ) -> bool:
        """Copy bytes [0, end) of ``source`` to the staged data file ``name``, flushed to
        disk; False when ``stop`` was set before the copy ended (the file is then partial)."""
        target = self.path / name
        with open(source, "rb") as src, open(target, "wb") as dst:
            info = os.fstat(src.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size < end:
                raise OSError(f"'{source}' changed while it was being read")
            copied = info.st_size == end and _reflink(src, dst)
            if not copied and not _bounded_copy(src, dst, end, stop):
                return False
            dst.flush()
            os.fsync(dst.fileno())
        return True

    def check_graph(self) -> None:
        """Check the staged graph written by another writer (:func:`check_output`)."""
        proto = onnx.ModelProto()
        proto.ParseFromString(self.graph.read_bytes())
        check_output(proto, self.out)

    def sync(self, name: str) -> None:
        fd = os.open(self.path / name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def commit(self, data_name: str | None, keep: set[str]) -> None:
        """Move the staged data file (if any) and then the graph into place."""
        with _directory_lock(self.directory) as locked:
            taken = self.out.exists() and (self.directory / self.preferred).exists()
            if data_name == self.preferred and taken:  # another writer took the name
                new_name = self._fresh_name()
                _relocate(self.graph, data_name, new_name)
                os.replace(self.path / data_name, self.path / new_name)
                data_name = new_name
            if data_name is not None:
                os.replace(self.path / data_name, self.directory / data_name)
                keep = keep | {data_name}
            os.replace(self.graph, self.out)
            _sync_directory(self.directory)
            if locked:
                self._remove_stale(keep)

    def _remove_stale(self, keep: set[str]) -> None:
        """Remove data files named after OUT that the new OUT does not use."""
        pattern = re.compile(re.escape(self.out.name) + r"(\.[0-9a-f]{8})?\.data")
        for entry in os.scandir(self.directory):
            if pattern.fullmatch(entry.name) and entry.name not in keep:
                logger.debug("removing %s, which the old %s used", entry.name, self.out.name)
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)

    def cleanup(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self._held is not None:
            os.close(self._held)
            self._held = None


def _try_lock(path: Path) -> int | None:
    """An fd holding a non-blocking exclusive flock on ``path``; None if another holds it."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def _directory_lock(directory: Path) -> Iterator[bool]:
    """An exclusive flock on the directory (serializes writers); False where unsupported."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield False
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield True
    finally:
        os.close(fd)  # releases the lock


def _sync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_FICLONE = 0x40049409  # Linux ioctl: share the extents of another file (btrfs, xfs)


def _reflink(src: object, dst: object) -> bool:
    try:
        import fcntl

        fcntl.ioctl(dst.fileno(), _FICLONE, src.fileno())  # type: ignore[attr-defined]
    except (ImportError, OSError):
        return False
    return True


def _bounded_copy(
    src: object, dst: object, count: int, stop: threading.Event | None = None
) -> bool:
    """Copy exactly ``count`` bytes from the start of ``src``; never read past them.
    False when ``stop`` is set between two chunks (the copy is then left partial)."""
    src_fd, dst_fd = src.fileno(), dst.fileno()  # type: ignore[attr-defined]
    offset = 0
    copy_range = getattr(os, "copy_file_range", None)
    while offset < count:
        if stop is not None and stop.is_set():
            return False
        size = min(_COPY_CHUNK, count - offset)
        done = 0
        if copy_range is not None:
            try:
                done = copy_range(src_fd, dst_fd, size, offset, offset)
            except OSError:
                copy_range = None
        if not done:
            chunk = os.pread(src_fd, size, offset)
            if not chunk:
                raise OSError("the data file ended before its declared range")
            os.pwrite(dst_fd, chunk, offset)
            done = len(chunk)
        offset += done
    return True


def _relocate(graph_path: Path, old: str, new: str) -> None:
    """Point the saved graph's external references to data file ``old`` at ``new``."""
    proto = onnx.load(graph_path, load_external_data=False)
    point_external_data(proto, new, old)
    with open(graph_path, "wb") as file:
        file.write(proto.SerializeToString())
        file.flush()
        os.fsync(file.fileno())
