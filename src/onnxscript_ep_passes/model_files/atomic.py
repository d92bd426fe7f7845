"""Atomic output: a private staging directory next to OUT, moved into place under a lock.

Rules (see ``model_files.io``'s docstring for the whole contract):

* New files are written and flushed in ``.OUT.<random>.tmp/`` in OUT's directory.
* The commit, under an exclusive flock on the directory, moves the data file first (under
  a name the old OUT does not use), then the graph, then removes data files named after
  OUT that the new graph does not use. A clean failure leaves nothing behind.
* Copies never read past the end they are given.
* The staging directory is private (mode 0700) and each file leaves it with at most the
  permissions of the files it was made from (:func:`permission_mask`): a 0600 input gives
  a 0600 OUT and data file, whatever the umask allows.
* An interrupt (SIGINT, SIGTERM, SIGHUP; :mod:`~onnxscript_ep_passes.core.signals`) runs the clean-up: nothing
  staged is left; one that arrives during the commit's renames waits until they are done.
* A side output (``--report-json``) is written by :func:`write_file`: a temporary file
  beside it, flushed, then ``os.replace``; removed on any failure or interrupt.
* **Every graph written is checked** (:func:`~onnxscript_ep_passes.model_files.output_check.check_output`: onnx's
  checker with ``full_check``) before it is staged, so an OUT that fails the checker is
  never moved into place.
* A staging directory is flock'ed by its writer for its whole life. A run killed before
  its cleanup leaves its directory unlocked; the next writer to the same OUT removes such
  abandoned ``.OUT.<8 hex>.tmp/`` directories (creation and the scan both happen under the
  directory lock, so a live writer's fresh directory is never taken for abandoned).
"""

from __future__ import annotations

__all__ = ["Stage", "is_data_name", "permission_mask", "write_file"]

import contextlib
import logging
import os
import re
import secrets
import shutil
import stat
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import onnx

from onnxscript_ep_passes.core.onnx_utils import point_external_data
from onnxscript_ep_passes.core.signals import deferred
from onnxscript_ep_passes.model_files.output_check import check_output, check_serialized
from onnxscript_ep_passes.model_files.serialize import SerializedModel

_PROTOBUF_LIMIT = 2**31 - 2**24  # near protobuf's 2 GB: the proto path, which refuses as it does

logger = logging.getLogger(__name__)

_COPY_CHUNK = 64 * 1024 * 1024


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _data_pattern(out_name: str) -> re.Pattern[str]:
    return re.compile(re.escape(out_name) + r"(\.[0-9a-f]{8})?\.data")


def is_data_name(out: Path, path: Path) -> bool:
    """Whether ``path`` is named as a data file of OUT may be (``OUT.data``,
    ``OUT.<8 hex>.data`` in OUT's directory): saving OUT writes and removes such files."""
    directory = os.path.realpath(out.parent)
    if os.path.realpath(path.parent) != directory:
        return False
    return _data_pattern(out.name).fullmatch(path.name) is not None


def permission_mask(paths: Iterable[str | os.PathLike[str]]) -> int:
    """The permission bits every file of ``paths`` grants (read and write bits only);
    an output made from them gets at most these. 0o666 when ``paths`` is empty."""
    mask = 0o666
    for path in paths:
        with contextlib.suppress(OSError):
            mask &= stat.S_IMODE(os.stat(path).st_mode)
    return mask


def _restrict(path: Path, mask: int) -> None:
    """Take from ``path`` the permission bits ``mask`` does not grant."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & ~mask:
        os.chmod(path, mode & mask)


def write_file(path: Path, data: bytes, mask: int = 0o666) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file in its directory (created
    with at most ``mask``'s permissions, flushed), then ``os.replace``. On any failure or
    interrupt the temporary file is removed and ``path`` is as it was."""
    temporary = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temporary, flags, 0o666 & mask)
    try:
        with open(fd, "wb", closefd=True) as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_directory(path.parent)


class Stage:
    """A private directory next to OUT where the new files are written before the commit.

    ``mask``: the permission bits the committed files may keep (:func:`permission_mask`
    of the files they were made from).
    """

    def __init__(self, out: Path, source: str | None, mask: int = 0o666) -> None:
        self.out = out
        self.directory = out.parent
        self.mask = mask
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
            os.mkdir(self.path, 0o700)
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

    def write_graph(self, proto: onnx.ModelProto | SerializedModel, *, spent: bool = False) -> None:
        """Write the graph file, checked first (:mod:`.output_check`); a
        :class:`~.serialize.SerializedModel` is written from its bytes (one of protobuf's
        2 GB or more from its proto, which refuses it as protobuf does). ``spent``: the
        caller needs a ``proto`` no more, so the check may change it."""
        if isinstance(proto, SerializedModel):
            data = proto.data()
            if len(data) < _PROTOBUF_LIMIT:
                check_serialized(proto, data, self.out)
                self._write_bytes(data)
                return
            proto, spent = proto.proto(), True  # made here: no one else holds it
        try:
            data = proto.SerializeToString()
        except ValueError as error:  # protobuf's 2 GB limit
            raise ValueError(f"cannot serialize the model: {_one_line(error)}") from None
        check_output(proto, self.out, data, spent=spent)
        self._write_bytes(data)

    def _write_bytes(self, data: bytes) -> None:
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
        """Move the staged data file (if any) and then the graph into place; an interrupt
        meanwhile waits until both are in place (:func:`~onnxscript_ep_passes.core.signals.deferred`)."""
        with deferred(), _directory_lock(self.directory) as locked:
            taken = self.out.exists() and (self.directory / self.preferred).exists()
            if data_name == self.preferred and taken:  # another writer took the name
                new_name = self._fresh_name()
                _relocate(self.graph, data_name, new_name)
                os.replace(self.path / data_name, self.path / new_name)
                data_name = new_name
            if data_name is not None:
                _restrict(self.path / data_name, self.mask)
                os.replace(self.path / data_name, self.directory / data_name)
                keep = keep | {data_name}
            _restrict(self.graph, self.mask)
            os.replace(self.graph, self.out)
            _sync_directory(self.directory)
            if locked:
                self._remove_stale(keep)

    def _remove_stale(self, keep: set[str]) -> None:
        """Remove data files named after OUT that the new OUT does not use."""
        pattern = _data_pattern(self.out.name)
        for entry in os.scandir(self.directory):
            if pattern.fullmatch(entry.name) and entry.name not in keep:
                logger.debug("removing %s, which the old %s used", entry.name, self.out.name)
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)

    def cleanup(self) -> None:
        try:
            shutil.rmtree(self.path, ignore_errors=True)
        finally:  # cut short by an interrupt: finish (later ones are ignored meanwhile)
            if os.path.lexists(self.path):
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
