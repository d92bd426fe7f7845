"""Loading and saving models without holding their weights in memory twice.

Rules:

* Models are loaded with onnx-ir, whose external-data tensors stay memory-mapped.
* A model is saved with external data when its source had external data or when its
  initializers are too large for one protobuf (2 GB); the data file is named after the
  output (``OUT.onnx.data``), next to it.
* Lowering never changes a weight. When every large tensor of the model still lives in
  one external data file (the input's), that file is copied whole to the output's data
  file (a reflink where the file system supports it, else one kernel-side copy; never a
  hard link, which onnx refuses) and only the graph is serialized, its external
  references pointing at the new file, at the same offsets. ``weights="rewrite"`` writes
  every tensor anew through onnx-ir instead (the output then holds only the tensors it
  uses).
* The source data file is never overwritten while it is mapped.
"""

from __future__ import annotations

__all__ = ["WeightsMode", "has_external_data", "load_model", "save_model"]

import logging
import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import onnx
import onnx_ir as ir

from onnxscript_ep_passes._onnx import iter_graphs

logger = logging.getLogger(__name__)

_INLINE_WEIGHTS_LIMIT = 1_800_000_000  # leave room for the graph itself in 2 GB
_INLINE_TENSOR_LIMIT = 1024  # bytes: in-memory tensors up to this stay in the proto

WeightsMode = Literal["copy_file", "rewrite"]


def load_model(path: str | os.PathLike[str]) -> ir.Model:
    """Load ``path`` with its external data mapped lazily."""
    return ir.load(path)


def _graphs(model: ir.Model) -> Iterator[ir.Graph]:
    yield model.graph
    yield from model.graph.subgraphs()


def _initializer_tensors(model: ir.Model) -> list[ir.TensorProtocol]:
    return [
        value.const_value
        for graph in _graphs(model)
        for value in graph.initializers.values()
        if value.const_value is not None
    ]


def has_external_data(model: ir.Model) -> bool:
    return any(isinstance(t, ir.ExternalTensor) for t in _initializer_tensors(model))


def _single_source(tensors: list[ir.TensorProtocol]) -> Path | None:
    """The one data file holding every large tensor, or None when there is no such file."""
    sources: set[Path] = set()
    for tensor in tensors:
        if isinstance(tensor, ir.ExternalTensor):
            sources.add(Path(tensor.base_dir) / tensor.location)
        elif tensor.nbytes > _INLINE_TENSOR_LIMIT:
            return None  # an in-memory weight must be written
    return next(iter(sources)) if len(sources) == 1 else None


_FICLONE = 0x40049409  # Linux ioctl: share the extents of another file (btrfs, xfs)


def _clone_or_copy(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target``: a reflink where the file system has them, else a
    kernel-side copy. Never a hard link: onnx refuses external data with several links."""
    tmp = target.with_name(target.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        import fcntl

        with open(source, "rb") as src, open(tmp, "wb") as dst:
            fcntl.ioctl(dst.fileno(), _FICLONE, src.fileno())
    except (ImportError, OSError):
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)


def _save_with_copied_file(model: ir.Model, out: Path, source: Path) -> None:
    _write_with_copied_file(ir.serde.serialize_model(model), out, source)


def _write_with_copied_file(proto: onnx.ModelProto, out: Path, source: Path) -> None:
    data_name = out.name + ".data"
    location = {"location": data_name}
    for graph in iter_graphs(proto.graph):
        for tensor in graph.initializer:
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                for entry in tensor.external_data:
                    if entry.key in location:
                        entry.value = location[entry.key]
    target = out.parent / data_name
    if target.exists() and target.resolve() == source.resolve():
        pass  # the output's data file is the source itself (same path)
    else:
        _clone_or_copy(source, target)
    out.write_bytes(proto.SerializeToString())


def save_model(
    model: ir.Model,
    path: str | os.PathLike[str],
    *,
    external_data: bool | None = None,
    weights: WeightsMode = "copy_file",
) -> None:
    """Save ``model`` to ``path``; with external data when needed (see module docstring)."""
    out = Path(path)
    tensors = _initializer_tensors(model)
    external = any(isinstance(t, ir.ExternalTensor) for t in tensors)
    if external_data is None:
        external_data = external or sum(t.nbytes for t in tensors) > _INLINE_WEIGHTS_LIMIT
    if not external_data:
        ir.save(model, out)
        return
    data_path = (out.parent / (out.name + ".data")).resolve()
    source = _single_source(tensors) if weights == "copy_file" else None
    if source is not None:
        logger.debug("saving %s; weights copied whole from %s", out, source)
        _save_with_copied_file(model, out, source)
        return
    sources = {
        (Path(t.base_dir) / t.location).resolve()
        for t in tensors
        if isinstance(t, ir.ExternalTensor)
    }
    if data_path in sources:
        raise ValueError(
            f"refusing to overwrite '{data_path}', which holds the weights being saved; "
            "choose another output path"
        )
    logger.debug("saving %s with external data %s", out, data_path.name)
    ir.save(model, out, external_data=data_path.name)


# -- the graph proto alone (the plain lowering's fast path) ------------------------------


def load_graph_proto(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """``path``'s proto with its external tensors left as references (nothing read)."""
    return onnx.load(path, load_external_data=False)


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
    save it (several data files, large inline weights, ``weights="rewrite"``, a location
    that is absolute, leaves the directory or is a link: ``load_model`` judges those).
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
    """Write ``proto`` to ``out``; its external data (``source``) copied whole to
    ``OUT.data`` (see :func:`proto_source_file`)."""
    out = Path(out)
    if source is None:
        out.write_bytes(proto.SerializeToString())
        return
    logger.debug("saving %s; weights copied whole from %s", out, source)
    _write_with_copied_file(proto, out, source)
