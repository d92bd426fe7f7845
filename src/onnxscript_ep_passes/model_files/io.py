"""Loading models from untrusted files and saving them atomically, weights held once.

Loading (:func:`load_model`):

* Only a regular, non-empty file of at most 2 GiB is read, and it must parse as an ONNX
  ModelProto that passes :func:`~onnxscript_ep_passes.model_files.model_checks.check_model_proto`;
  every external-data reference must pass
  :func:`~onnxscript_ep_passes.model_files.external_data_checks.check_external_data` (regular files inside the
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
* OUT and its data file get at most the permissions of the files the model was made from
  (the model file and its data files): a private (0600) input gives a private output.
* OUT may be the input itself; OUT may never be a file the model's tensors are read from
  (compared by resolved path and by inode).
* :mod:`~onnxscript_ep_passes.model_files.proto_save` saves the same way while starting the weights
  copy as soon as the proto is loaded (:func:`copy_file_source` says whether the model
  that is finally saved can use that copy). ``lower`` begins it once the external-data
  references have passed their checks (:func:`parse_graph_proto`), before the structural
  checks, which then run while it copies; a refusal removes what was staged.
"""

from __future__ import annotations

__all__ = [
    "INLINE_TENSOR_LIMIT",
    "INLINE_WEIGHTS_LIMIT",
    "WeightsMode",
    "check_output_path",
    "copy_file_source",
    "data_files",
    "has_external_data",
    "load_graph_proto",
    "load_model",
    "model_from_proto",
    "parse_graph_proto",
    "reference_problem",
    "save_model",
    "serialize_pointing_at",
    "tensor_nbytes",
]

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from onnxscript_ep_passes.core.onnx_utils import walk
from onnxscript_ep_passes.errors import InvalidModelError
from onnxscript_ep_passes.model_files.atomic import Stage as _Stage
from onnxscript_ep_passes.model_files.atomic import permission_mask
from onnxscript_ep_passes.model_files.external_data_checks import check_external_data
from onnxscript_ep_passes.model_files.model_checks import check_model_proto
from onnxscript_ep_passes.model_files.paths import read_regular_file, same_file
from onnxscript_ep_passes.model_files.serialize import SerializedModel, serialize_parts

logger = logging.getLogger(__name__)

INLINE_WEIGHTS_LIMIT = 1_800_000_000
"""Bytes of initializers above which a model is saved with external data (room is left for
the graph itself in protobuf's 2 GB)."""
INLINE_TENSOR_LIMIT = 1024
"""Bytes: an in-memory tensor up to this size stays in the graph proto."""
_MAX_PROTO_BYTES = 2**31 - 1
_SOURCE_KEY = "onnxscript_ep_passes.source_path"

WeightsMode = Literal["copy_file", "rewrite", "reference"]


def _one_line(error: BaseException) -> str:
    while error.__cause__ is not None:
        error = error.__cause__
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def load_model(path: str | os.PathLike[str]) -> ir.Model:
    """Load ``path`` (see module docstring); external data is mapped lazily."""
    return model_from_proto(load_graph_proto(path), path)


def model_from_proto(proto: onnx.ModelProto, path: str | os.PathLike[str]) -> ir.Model:
    """The model of ``proto``, which :func:`load_graph_proto` read and checked from ``path``
    (its external tensors are read from ``path``'s directory)."""
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
    proto, _ = parse_graph_proto(path)
    check_model_proto(proto, os.fspath(path))
    return proto


def parse_graph_proto(path: str | os.PathLike[str]) -> tuple[onnx.ModelProto, dict[Path, int]]:
    """``path``'s proto and its external-data references checked
    (:func:`check_external_data`, whose extents come with it), so that its weights copy
    can begin; the caller runs :func:`check_model_proto` on it before anything else reads
    it (:func:`load_graph_proto` does). No weight is read. When the external data is
    refused, the structural checks run first: a model that breaks both is refused for
    its structure, as when they ran in that order."""
    label = os.fspath(path)
    source = Path(os.path.abspath(path))
    data = read_regular_file(
        source,
        label,
        _MAX_PROTO_BYTES,
        kind="an ONNX model",
        too_large="more than one protobuf can hold (2 GiB); "
        "large weights belong in an external data file",
        error=InvalidModelError,
    )
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except DecodeError as error:
        reason = "subgraphs nested too deeply" if "Depth" in str(error) else "not valid protobuf"
        raise InvalidModelError(f"{label}: not an ONNX model ({reason})") from None
    del data
    try:
        extents = check_external_data(proto, source.parent, label)
    except Exception:
        check_model_proto(proto, label)  # its refusal, when there is one, comes first
        raise
    return proto, extents


def _graphs(model: ir.Model) -> Iterator[ir.Graph | ir.Function]:
    """The main graph, the functions and the subgraphs of each, in ``Graph.subgraphs()``
    order (read with :func:`~onnxscript_ep_passes.core.onnx_utils.walk`, which costs a
    fraction of onnx-ir's recursive iterator on a lowered model's 240k nodes)."""
    yield model.graph
    yield from walk(model.graph)[1]
    for function in model.functions.values():
        yield function
        yield from walk(function.graph)[1]


def _all_tensors(model: ir.Model) -> Iterator[ir.TensorProtocol]:
    """Initializers of every graph, and tensors held in node attributes."""
    for graph in _graphs(model):
        if isinstance(graph, ir.Graph):
            for value in graph.initializers.values():
                if value.const_value is not None:
                    yield value.const_value
        for node in graph:
            for attr in node.attributes.data.values():  # the dict itself, as walk() reads it
                # attr.value, not as_tensor(): its Protocol isinstance check took seconds
                # on a model with tens of thousands of Constant nodes.
                if attr.type == ir.AttributeType.TENSOR:
                    yield attr.value
                elif attr.type == ir.AttributeType.TENSORS:
                    yield from attr.value


def tensor_nbytes(tensor: ir.TensorProtocol) -> int:
    """Bytes of ``tensor``'s data; a string tensor's are its strings' lengths (onnx-ir's
    ``nbytes`` has no size for string tensors)."""
    if tensor.dtype == ir.DataType.STRING:
        return sum(len(s) for s in tensor.numpy().ravel())
    return int(tensor.nbytes)


def _initializer_tensors(model: ir.Model) -> list[ir.TensorProtocol]:
    return [
        value.const_value
        for graph in (model.graph, *walk(model.graph)[1])
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
    if any(same_file(out, weights_file) for weights_file in data_files(model)):
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
        elif tensor_nbytes(tensor) > INLINE_TENSOR_LIMIT:
            return None  # an in-memory weight must be written
    return next(iter(sources)) if len(sources) == 1 else None


def serialize_pointing_at(model: ir.Model, location: str | None) -> SerializedModel:
    """The model serialized (:func:`~.serialize.serialize_parts`); external references
    renamed to ``location`` when given."""
    return serialize_parts(model, location)


def copy_file_source(model: ir.Model, external_data: bool | None = None) -> tuple[Path, int] | None:
    """The data file :func:`save_model` (``weights="copy_file"``) would copy ``model``'s
    weights from, and how many of its bytes (up to the end of the last tensor the model
    uses); None when it would not copy one file (inline weights, several files, a large
    tensor held in memory)."""
    tensors = _initializer_tensors(model)
    return _copied_range(tensors) if _with_external_data(tensors, external_data) else None


def _with_external_data(tensors: list[ir.TensorProtocol], asked: bool | None) -> bool:
    """Whether :func:`save_model` writes external data: as ``asked``, or (None) when the
    model has external tensors or its initializers do not fit in one protobuf."""
    if asked is not None:
        return asked
    external = any(isinstance(t, ir.ExternalTensor) for t in tensors)
    return external or sum(tensor_nbytes(t) for t in tensors) > INLINE_WEIGHTS_LIMIT


def _copied_range(tensors: list[ir.TensorProtocol]) -> tuple[Path, int] | None:
    """The one data file holding every large tensor of ``tensors`` and the end of the last
    of them in it (what ``copy_file`` copies); None when there is no such file."""
    source = _single_source(tensors)
    if source is None:
        return None
    seen: dict[tuple[str, str], Path] = {}
    end = max(
        (t.offset or 0) + t.nbytes
        for t in tensors
        if isinstance(t, ir.ExternalTensor) and _file_of(t, seen) == source
    )
    return source, end


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
    external_data = _with_external_data(tensors, external_data)
    source = model.meta.get(_SOURCE_KEY)
    source = source if isinstance(source, str) else None
    stage = _Stage(out, source, permission_mask(_input_files(model)))
    try:
        stage.create()
        data_name, keep = _write(
            model, stage, tensors, external_data=external_data, weights=weights
        )
        stage.commit(data_name, keep)
    finally:
        stage.cleanup()


def _input_files(model: ir.Model) -> set[Path]:
    """The files ``model`` was made from: the model file it was loaded from (if known)
    and the data files its weights are read from."""
    source = model.meta.get(_SOURCE_KEY)
    return data_files(model) | ({Path(source)} if isinstance(source, str) else set())


def _write(
    model: ir.Model,
    stage: _Stage,
    tensors: list[ir.TensorProtocol],
    *,
    external_data: bool,
    weights: WeightsMode,
) -> tuple[str | None, set[str]]:
    """Write the staged files (``tensors``: the model's initializers); return the staged
    data file's name (if any) and the names of existing data files in OUT's directory
    that the new graph uses."""
    out = stage.out
    read = data_files(model)
    in_place = stage.source == os.path.realpath(out)
    # Files the model reads are kept, except the old OUT's own when OUT is the input.
    keep = set() if in_place else {f.name for f in read if f.parent == stage.directory}
    if not external_data:
        if any(isinstance(t, ir.ExternalTensor) for t in _all_tensors(model)):
            ir.external_data.load_to_model(model)
        logger.debug("saving %s with the weights inline", out)
        stage.write_graph(serialize_parts(model))
        return None, keep
    if weights == "reference":
        logger.debug("saving %s; weights referenced in place", out)
        stage.write_graph(serialize_pointing_at(model, None), spent=True)
        return None, keep | {f.name for f in read}
    found = _copied_range(tensors) if weights == "copy_file" else None
    source = None if found is None else found[0]
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
        stage.write_graph(serialize_pointing_at(model, None), spent=True)
        return None, keep | {source.name}
    name = stage.data_name(read)
    if found is not None:
        source, end = found
        logger.debug("saving %s; weights copied from %s (%d bytes)", out, source, end)
        stage.copy_range(source, end, name)
        stage.write_graph(serialize_pointing_at(model, name), spent=True)
        return name, keep
    logger.debug("saving %s with external data %s", out, name)
    ir.save(model, stage.graph, external_data=name)
    stage.check_graph()
    stage.sync(name)
    stage.sync(out.name)
    return name, keep
