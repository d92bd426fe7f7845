"""Loading models from untrusted files and saving them atomically, weights held once.

Loading (:func:`load_model`):

* Only a regular, non-empty file of at most 2 GiB is read, and it must parse as an ONNX
  ModelProto that passes :func:`~onnxscript_ep_passes.model_checks.check_model_proto`;
  every external-data reference must pass
  :func:`~onnxscript_ep_passes.external_data_checks.check_external_data` (regular files inside the
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
* A proto saved without building the IR (:func:`save_proto`, the plain lowering's fast
  path) is saved the same way; :class:`ProtoSave` starts its weights copy in a thread
  as soon as the proto is loaded, so that copying and flushing the weights overlaps the
  lowering of its nodes.
"""

from __future__ import annotations

__all__ = [
    "ProtoSave",
    "WeightsMode",
    "check_output_path",
    "data_files",
    "has_external_data",
    "load_graph_proto",
    "load_model",
    "proto_source_file",
    "reference_problem",
    "save_model",
    "save_proto",
]

import logging
import math
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from onnxscript_ep_passes._atomic import Stage as _Stage
from onnxscript_ep_passes._onnx import iter_graphs
from onnxscript_ep_passes.errors import InvalidModelError
from onnxscript_ep_passes.external_data_checks import check_external_data
from onnxscript_ep_passes.model_checks import check_model_proto

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
    proto = load_graph_proto(path)
    label, source = os.fspath(path), Path(os.path.abspath(path))
    try:
        model = ir.serde.deserialize_model(proto)
    except Exception as error:
        raise InvalidModelError(f"{label}: cannot be read as a model: {_one_line(error)}") from None
    for tensor in _all_tensors(model):
        if isinstance(tensor, ir.ExternalTensor):
            tensor.base_dir = str(source.parent)
    model.meta[_SOURCE_KEY] = os.path.realpath(source)
    return model


def load_graph_proto(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """``path``'s proto, checked as :func:`load_model` checks it; no weight is read."""
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
    return proto


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
                # attr.value, not as_tensor(): its Protocol isinstance check took seconds
                # on a model with tens of thousands of Constant nodes.
                if attr.type == ir.AttributeType.TENSOR:
                    yield attr.value
                elif attr.type == ir.AttributeType.TENSORS:
                    yield from attr.value


def _initializer_tensors(model: ir.Model) -> list[ir.TensorProtocol]:
    return [
        value.const_value
        for graph in (model.graph, *model.graph.subgraphs())
        for value in graph.initializers.values()
        if value.const_value is not None
    ]


def _file_of(tensor: ir.ExternalTensor, seen: dict[tuple[str, str], Path]) -> Path:
    """The resolved file of ``tensor``; ``seen`` memoises it per (directory, location) for
    one walk over a model's tensors (a lowered 40k-node decoder has 11k of them, and one
    ``realpath`` each took 0.15 s per walk)."""
    key = (str(tensor.base_dir), str(tensor.location))
    path = seen.get(key)
    if path is None:
        path = seen[key] = Path(os.path.realpath(os.path.join(*key)))
    return path


def has_external_data(model: ir.Model) -> bool:
    return any(isinstance(t, ir.ExternalTensor) for t in _initializer_tensors(model))


def data_files(model: ir.Model) -> set[Path]:
    """The files (resolved) that the model's external tensors are read from."""
    seen: dict[tuple[str, str], Path] = {}
    return {_file_of(t, seen) for t in _all_tensors(model) if isinstance(t, ir.ExternalTensor)}


def check_output_path(
    model: ir.Model, path: str | os.PathLike[str], weights: WeightsMode = "copy_file"
) -> str | None:
    """Refuse (ValueError, OSError) an output path that is a directory or a file ``model``'s
    weights are read from; return why ``weights`` cannot be used for it (None if it can)."""
    out = Path(os.path.abspath(path))
    if out.is_dir():
        raise IsADirectoryError(f"output '{path}' is a directory")
    if Path(os.path.realpath(out)) in data_files(model):
        raise ValueError(
            f"refusing to write '{path}': the input's weights are read from that file; "
            "choose another output path"
        )
    return reference_problem(model, out) if weights == "reference" else None


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


# -- saving -------------------------------------------------------------------------


def _single_source(tensors: list[ir.TensorProtocol]) -> Path | None:
    """The one data file holding every large tensor, or None when there is no such file."""
    sources: set[Path] = set()
    seen: dict[tuple[str, str], Path] = {}
    for tensor in tensors:
        if isinstance(tensor, ir.ExternalTensor):
            sources.add(_file_of(tensor, seen))
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
    stage.create()
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
    name = stage.data_name(read)
    if source is not None:
        seen: dict[tuple[str, str], Path] = {}
        end = max(
            (t.offset or 0) + t.nbytes
            for t in tensors
            if isinstance(t, ir.ExternalTensor) and _file_of(t, seen) == source
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


# -- the graph proto alone (the plain lowering's fast path) ------------------------------


def _external_location(tensor: onnx.TensorProto) -> str | None:
    for entry in tensor.external_data:
        if entry.key == "location":
            return entry.value
    return None


def _nbytes(tensor: onnx.TensorProto) -> float:
    """The tensor's data bytes, as ``ir.TensorProtocol.nbytes`` counts them."""
    try:
        itemsize = ir.DataType(tensor.data_type).itemsize
    except ValueError:
        return tensor.ByteSize()
    if tensor.data_type == onnx.TensorProto.STRING:
        return tensor.ByteSize()
    return math.prod(tensor.dims) * itemsize


def proto_source_file(
    proto: onnx.ModelProto,
    model_path: str | os.PathLike[str],
    *,
    external_data: bool | None = None,
    weights: WeightsMode = "copy_file",
) -> Path | Literal[False] | None:
    """How :func:`save_proto` would save ``proto`` as :func:`save_model` saves its IR.

    The one data file to copy (a plain file inside the model's directory), None when the
    model has no external data and stays inline, False when only :func:`save_model` can
    save it (several data files, large inline weights, ``weights`` other than copy_file, a
    location that is absolute, leaves the directory or is a link).
    """
    if weights != "copy_file":
        return False
    tensors = [t for g in iter_graphs(proto.graph) for t in g.initializer]
    external = [t for t in tensors if t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        inline = sum(t.ByteSize() for t in tensors)
        if external_data or (external_data is None and inline > _INLINE_WEIGHTS_LIMIT):
            return False
        return None
    large_inline = any(
        _nbytes(t) > _INLINE_TENSOR_LIMIT
        for t in tensors
        if t.data_location != onnx.TensorProto.EXTERNAL
    )
    if external_data is False or large_inline:
        return False
    locations = {_external_location(t) for t in external}
    if len(locations) != 1:
        return False
    (location,) = locations
    if not location or Path(location).is_absolute() or ".." in Path(location).parts:
        return False
    directory = Path(model_path).parent
    source = directory / location
    if source.is_symlink() or not source.is_file():
        return False
    if source.resolve().parent != directory.resolve():
        return False
    return source


def save_proto(proto: onnx.ModelProto, out: str | os.PathLike[str], source: Path | None) -> None:
    """Write ``proto`` to ``out`` atomically, as :func:`save_model` does; its external data
    (``source``, see :func:`proto_source_file`) copied up to its last declared tensor."""
    with ProtoSave(proto, out, source) as saving:
        saving.commit(proto)


class ProtoSave:
    """:func:`save_proto` begun early: the weights are copied while the caller still works.

    Copying the data file (and flushing it to disk) is most of saving a large model, and
    it needs only the proto's external-data references. Creating a ``ProtoSave`` stages
    the output and starts that copy in a thread; the caller rewrites the proto's nodes
    meanwhile (never its initializers) and calls :meth:`commit`, which waits for the copy,
    writes the graph and moves both into place as :func:`save_proto` does. Leaving the
    ``with`` block without a commit (the caller declined, or an error or an interrupt)
    stops the copy at its next chunk and removes everything staged.
    """

    def __init__(self, proto: onnx.ModelProto, out: str | os.PathLike[str], source: Path | None):
        target = Path(os.path.abspath(out))
        if target.is_dir():
            raise IsADirectoryError(f"output '{out}' is a directory")
        read = set() if source is None else {Path(os.path.realpath(source))}
        if Path(os.path.realpath(target)) in read:
            raise ValueError(
                f"refusing to write '{out}': the input's weights are read from that file; "
                "choose another output path"
            )
        self._stage = _Stage(target, None)
        self._stage.create()
        self._keep: set[str] = set()
        self._name: str | None = None  # the staged data file
        self._stop = threading.Event()
        self._copier: threading.Thread | None = None
        self._failure: BaseException | None = None
        if source is None:
            return
        try:
            real = Path(os.path.realpath(source))
            if real.parent == self._stage.directory:
                self._keep = {real.name}
                if real.name == self._stage.preferred:
                    return  # the data file already is this output's
            self._name = self._stage.data_name(read)
            end = check_external_data(proto, real.parent, os.fspath(source))[real]
        except BaseException:
            self._stage.cleanup()
            raise
        self._copier = threading.Thread(
            target=self._copy, args=(real, end, self._name), name="weights copy", daemon=True
        )
        self._copier.start()

    def _copy(self, real: Path, end: int, name: str) -> None:
        try:
            self._stage.copy_range(real, end, name, self._stop)
        except BaseException as error:  # raised again by commit(), in the caller's thread
            self._failure = error

    def _wait(self) -> None:
        if self._copier is not None:
            self._copier.join()
            self._copier = None

    def commit(self, proto: onnx.ModelProto) -> None:
        """Wait for the copy, write ``proto`` pointing at it, move both into place."""
        self._wait()
        if self._failure is not None:
            raise self._failure
        if self._name is not None:
            for graph in iter_graphs(proto.graph):
                for tensor in graph.initializer:
                    for entry in tensor.external_data:
                        if entry.key == "location":
                            entry.value = self._name
        self._stage.write_graph(proto)
        self._stage.commit(self._name, self._keep)

    def __enter__(self) -> ProtoSave:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()  # a committed save has nothing left to stop
        self._wait()
        self._stage.cleanup()
