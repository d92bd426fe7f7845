"""Loading models from untrusted files and saving them atomically, weights held once.

Loading (:func:`load_model`):

* Only a regular, non-empty file of at most 2 GiB is read, and it must parse as an ONNX
  ModelProto that passes :func:`~onnxscript_ep_passes.model_checks.check_model_proto`;
  every external-data reference must pass
  :func:`~onnxscript_ep_passes.model_checks.check_external_data` (regular files inside the
  model's directory, declared ranges inside them). Anything else raises
  :class:`~onnxscript_ep_passes.errors.InvalidModelError` with a one-line message.
* The model is then deserialized with onnx-ir; its external tensors stay memory-mapped
  and are read only within their declared ranges.

Saving (:func:`save_model`):

* A model is saved with external data when its source had external data or when its
  initializers are too large for one protobuf (2 GB).
* ``weights`` says where the weights of an external-data output live. ``"copy_file"``
  (default): when every large tensor still lives in one data file (the input's), that
  file's declared range is copied (a reflink where the file system supports it, never a
  hard link, which onnx refuses; never a byte past the last declared tensor) and the graph
  points at the copy at the same offsets; otherwise every tensor is written anew.
  ``"rewrite"``: every tensor is written anew (the output then holds only what it uses).
  ``"reference"``: the output's tensors point at the input's data file itself (the output
  must be in that file's directory); tensors the lowering built are stored in the graph.
  The output is self-contained with copy_file and rewrite, and shares the input's file
  with reference (which then must not be changed, moved or deleted while it is in use).
* Atomic: the graph and any new data file are first written, and flushed to disk, in a
  private temporary directory next to OUT, then moved into place with ``os.replace`` under
  a lock on the directory: the data file first, under a name the old OUT does not use
  (``OUT.data``, or ``OUT.<8 hex>.data`` when that name is taken), then the graph. A crash
  at any moment leaves the complete old OUT (with its data) or the complete new one;
  after a clean failure nothing is left behind. Afterwards the data files named after OUT
  that the new graph does not use are removed (the old OUT's).
* OUT may be the input itself; OUT may never be a file the model's tensors are read from.
"""

from __future__ import annotations

__all__ = [
    "WeightsMode",
    "check_output_path",
    "data_files",
    "has_external_data",
    "load_model",
    "reference_problem",
    "save_model",
]

import contextlib
import logging
import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from onnxscript_ep_passes._onnx import iter_graphs
from onnxscript_ep_passes.errors import InvalidModelError
from onnxscript_ep_passes.model_checks import check_external_data, check_model_proto

logger = logging.getLogger(__name__)

_INLINE_WEIGHTS_LIMIT = 1_800_000_000  # leave room for the graph itself in 2 GB
_INLINE_TENSOR_LIMIT = 1024  # bytes: in-memory tensors up to this stay in the proto
_MAX_PROTO_BYTES = 2**31 - 1
_SOURCE_KEY = "onnxscript_ep_passes.source_path"
_COPY_CHUNK = 64 * 1024 * 1024

WeightsMode = Literal["copy_file", "rewrite", "reference"]


def _one_line(error: BaseException) -> str:
    while error.__cause__ is not None:
        error = error.__cause__
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def load_model(path: str | os.PathLike[str]) -> ir.Model:
    """Load ``path`` (see module docstring); external data is mapped lazily."""
    label = os.fspath(path)
    source = Path(os.path.abspath(path))
    try:
        info = os.stat(source)
    except OSError as error:
        raise InvalidModelError(f"{label}: cannot read: {error.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise InvalidModelError(f"{label}: not a regular file")
    if info.st_size == 0:
        raise InvalidModelError(f"{label}: empty file (0 bytes), not an ONNX model")
    if info.st_size > _MAX_PROTO_BYTES:
        raise InvalidModelError(
            f"{label}: {info.st_size} bytes, more than one protobuf can hold (2 GiB); "
            "large weights belong in an external data file"
        )
    with open(source, "rb") as file:
        data = file.read(_MAX_PROTO_BYTES + 1)
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except DecodeError as error:
        reason = "subgraphs nested too deeply" if "Depth" in str(error) else "not valid protobuf"
        raise InvalidModelError(f"{label}: not an ONNX model ({reason})") from None
    del data
    check_model_proto(proto, label)
    check_external_data(proto, source.parent, label)
    try:
        model = ir.serde.deserialize_model(proto)
    except Exception as error:
        raise InvalidModelError(f"{label}: cannot be read as a model: {_one_line(error)}") from None
    for tensor in _all_tensors(model):
        if isinstance(tensor, ir.ExternalTensor):
            tensor.base_dir = str(source.parent)
    model.meta[_SOURCE_KEY] = os.path.realpath(source)
    return model


def _graphs(model: ir.Model) -> Iterator[ir.Graph | ir.Function]:
    yield model.graph
    yield from model.graph.subgraphs()
    for function in model.functions.values():
        yield function
        yield from function.graph.subgraphs()


def _all_tensors(model: ir.Model) -> Iterator[ir.TensorProtocol]:
    """Initializers of every graph, and tensors held in node attributes."""
    for graph in _graphs(model):
        if isinstance(graph, ir.Graph):
            for value in graph.initializers.values():
                if value.const_value is not None:
                    yield value.const_value
        for node in graph:
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.TENSOR:
                    yield attr.as_tensor()
                elif attr.type == ir.AttributeType.TENSORS:
                    yield from attr.as_tensors()


def _initializer_tensors(model: ir.Model) -> list[ir.TensorProtocol]:
    return [
        value.const_value
        for graph in (model.graph, *model.graph.subgraphs())
        for value in graph.initializers.values()
        if value.const_value is not None
    ]


def _file_of(tensor: ir.ExternalTensor) -> Path:
    return Path(os.path.realpath(os.path.join(tensor.base_dir, tensor.location)))


def has_external_data(model: ir.Model) -> bool:
    return any(isinstance(t, ir.ExternalTensor) for t in _initializer_tensors(model))


def data_files(model: ir.Model) -> set[Path]:
    """The files (resolved) that the model's external tensors are read from."""
    return {_file_of(t) for t in _all_tensors(model) if isinstance(t, ir.ExternalTensor)}


def check_output_path(model: ir.Model, path: str | os.PathLike[str]) -> None:
    """Refuse an output path that is a directory or a file ``model``'s weights are read from."""
    out = Path(os.path.abspath(path))
    if out.is_dir():
        raise IsADirectoryError(f"output '{path}' is a directory")
    if Path(os.path.realpath(out)) in data_files(model):
        raise ValueError(
            f"refusing to write '{path}': the input's weights are read from that file; "
            "choose another output path"
        )


def reference_problem(model: ir.Model, path: str | os.PathLike[str]) -> str | None:
    """Why ``weights="reference"`` cannot save ``model`` to ``path`` (None when it can)."""
    directory = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    for tensor in _all_tensors(model):
        if isinstance(tensor, ir.ExternalTensor) and os.path.realpath(tensor.base_dir) != directory:
            return (
                f"--weights reference needs the output in the input's directory "
                f"('{tensor.base_dir}'), where its data file is"
            )
    return None


# -- the staging directory and the commit --------------------------------------------


class _Stage:
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

    def data_name(self, model: ir.Model) -> str:
        """``OUT.data`` unless the model reads it or the existing OUT may use it."""
        preferred = self.directory / self.preferred
        taken = Path(os.path.realpath(preferred)) in data_files(model) or (
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
        with open(self.graph, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())

    def copy_range(self, source: Path, end: int, name: str) -> None:
        """Copy bytes [0, end) of ``source`` to the staged data file ``name``."""
        target = self.path / name
        with open(source, "rb") as src, open(target, "wb") as dst:
            info = os.fstat(src.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size < end:
                raise OSError(f"'{source}' changed while it was being read")
            if not (info.st_size == end and _reflink(src, dst)):
                _bounded_copy(src, dst, end)
            dst.flush()
            os.fsync(dst.fileno())

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


def _bounded_copy(src: object, dst: object, count: int) -> None:
    """Copy exactly ``count`` bytes from the start of ``src``; never read past them."""
    src_fd, dst_fd = src.fileno(), dst.fileno()  # type: ignore[attr-defined]
    offset = 0
    copy_range = getattr(os, "copy_file_range", None)
    while offset < count:
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


def _relocate(graph_path: Path, old: str, new: str) -> None:
    """Point the saved graph's external references to data file ``old`` at ``new``."""
    proto = onnx.load(graph_path, load_external_data=False)
    for graph in iter_graphs(proto.graph):
        for tensor in graph.initializer:
            for entry in tensor.external_data:
                if entry.key == "location" and entry.value == old:
                    entry.value = new
    with open(graph_path, "wb") as file:
        file.write(proto.SerializeToString())
        file.flush()
        os.fsync(file.fileno())


# -- saving -------------------------------------------------------------------------


def _single_source(tensors: list[ir.TensorProtocol]) -> Path | None:
    """The one data file holding every large tensor, or None when there is no such file."""
    sources: set[Path] = set()
    for tensor in tensors:
        if isinstance(tensor, ir.ExternalTensor):
            sources.add(_file_of(tensor))
        elif tensor.nbytes > _INLINE_TENSOR_LIMIT:
            return None  # an in-memory weight must be written
    return next(iter(sources)) if len(sources) == 1 else None


def _serialize_pointing_at(model: ir.Model, location: str | None) -> onnx.ModelProto:
    """The model's proto; external references renamed to ``location`` when given."""
    proto = ir.serde.serialize_model(model)
    if location is not None:
        for graph in iter_graphs(proto.graph):
            for tensor in graph.initializer:
                if tensor.data_location == onnx.TensorProto.EXTERNAL:
                    for entry in tensor.external_data:
                        if entry.key == "location":
                            entry.value = location
    return proto


def save_model(
    model: ir.Model,
    path: str | os.PathLike[str],
    *,
    external_data: bool | None = None,
    weights: WeightsMode = "copy_file",
) -> None:
    """Save ``model`` to ``path`` atomically (see module docstring).

    Raises:
        ValueError: ``path`` is a file the model's weights are read from, ``reference``
            is asked for an output outside the data file's directory, or the model does
            not fit in one protobuf without external data.
        OSError: the output cannot be written (nothing is left behind then).
    """
    out = Path(os.path.abspath(path))
    check_output_path(model, out)
    if weights == "reference":
        problem = reference_problem(model, out)
        if problem is not None:
            raise ValueError(problem)
    tensors = _initializer_tensors(model)
    external = any(isinstance(t, ir.ExternalTensor) for t in tensors)
    if external_data is None:
        external_data = external or sum(t.nbytes for t in tensors) > _INLINE_WEIGHTS_LIMIT
    source = model.meta.get(_SOURCE_KEY)
    stage = _Stage(out, source if isinstance(source, str) else None)
    os.mkdir(stage.path)
    try:
        data_name, keep = _write(model, stage, external_data=external_data, weights=weights)
        stage.commit(data_name, keep)
    finally:
        stage.cleanup()


def _write(
    model: ir.Model, stage: _Stage, *, external_data: bool, weights: WeightsMode
) -> tuple[str | None, set[str]]:
    """Write the staged files; return the staged data file's name (if any) and the names
    of existing data files in OUT's directory that the new graph uses."""
    out = stage.out
    read = data_files(model)
    in_place = stage.source == os.path.realpath(out)
    # Files the model reads are kept, except the old OUT's own when OUT is the input.
    keep = set() if in_place else {f.name for f in read if f.parent == stage.directory}
    if not external_data:
        if any(isinstance(t, ir.ExternalTensor) for t in _all_tensors(model)):
            ir.external_data.load_to_model(model)
        logger.debug("saving %s with the weights inline", out)
        stage.write_graph(ir.serde.serialize_model(model))
        return None, keep
    if weights == "reference":
        logger.debug("saving %s; weights referenced in place", out)
        stage.write_graph(_serialize_pointing_at(model, None))
        return None, keep | {f.name for f in read}
    tensors = _initializer_tensors(model)
    source = _single_source(tensors) if weights == "copy_file" else None
    if (
        source is not None
        and source.parent == stage.directory
        and source.name
        in (
            stage.preferred,
            *(f.name for f in read if in_place),
        )
    ):
        # The source data file already is this output's: the new graph points at it.
        logger.debug("saving %s; its data file %s is kept as it is", out, source.name)
        stage.write_graph(_serialize_pointing_at(model, None))
        return None, keep | {source.name}
    name = stage.data_name(model)
    if source is not None:
        end = max(
            (t.offset or 0) + t.nbytes
            for t in tensors
            if isinstance(t, ir.ExternalTensor) and _file_of(t) == source
        )
        logger.debug("saving %s; weights copied from %s (%d bytes)", out, source, end)
        stage.copy_range(source, end, name)
        stage.write_graph(_serialize_pointing_at(model, name))
        return name, keep
    logger.debug("saving %s with external data %s", out, name)
    ir.save(model, stage.graph, external_data=name)
    stage.sync(name)
    stage.sync(out.name)
    return name, keep
