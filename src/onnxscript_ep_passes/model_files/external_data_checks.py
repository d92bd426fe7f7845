"""Checks of a parsed ModelProto's external-data references, before any weight is read.

Rules (each violation raises :class:`~onnxscript_ep_passes.errors.InvalidModelError`
naming the tensor and its location): for every tensor stored outside the file, in the
main graph, subgraphs, attributes and sparse tensors, the location is relative, has no
``..``, and resolves (symbolic links followed) to a regular file inside the model's
directory with a single link; the declared ``offset`` (and ``length``, which must equal
the tensor's size) lie within the file. Nothing is read from the file here. Each
distinct location is resolved once per call (a model has one data file for thousands
of tensors).
"""

from __future__ import annotations

__all__ = ["check_external_data"]

import functools
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import onnx
import onnx_ir as ir

from onnxscript_ep_passes.errors import InvalidModelError
from onnxscript_ep_passes.model_files.model_checks import node_label, subgraphs


def _all_tensors(model: onnx.ModelProto) -> Iterator[tuple[onnx.TensorProto, str]]:
    graphs = [model.graph]
    graphs.extend(onnx.GraphProto(node=f.node) for f in model.functions)
    while graphs:
        graph = graphs.pop()
        for tensor in graph.initializer:
            yield tensor, tensor.name
        for sparse in graph.sparse_initializer:
            yield sparse.values, sparse.values.name
            yield sparse.indices, sparse.values.name + " (indices)"
        for node in graph.node:
            if not node.attribute:
                continue
            for attr in node.attribute:
                # Every field is looked at, whatever the attribute's declared type: a file
                # from a stranger may set one its type does not name.
                tensors = [attr.t] if attr.HasField("t") else []
                tensors.extend(attr.tensors)
                sparse = attr.HasField("sparse_tensor")
                if not tensors and not sparse:
                    continue
                where = f"attribute '{attr.name}' of {node_label(node)}"
                for tensor in tensors:
                    yield tensor, tensor.name or where
                if sparse:
                    yield attr.sparse_tensor.values, where
            graphs.extend(sub for _, sub in subgraphs(node.attribute))


_ABSOLUTE = re.compile(r"^([\\/]|[A-Za-z]:)")


@functools.cache
def _bitwidth(data_type: int) -> int | None:
    """Bits per element of ``data_type``; None when it has no fixed width (or is unknown)."""
    try:
        dtype = ir.DataType(data_type)
    except ValueError:
        return None
    if dtype in (ir.DataType.STRING, ir.DataType.UNDEFINED):
        return None
    return dtype.bitwidth


def _declared_bytes(tensor: onnx.TensorProto) -> int | None:
    bits = _bitwidth(tensor.data_type)
    return None if bits is None else math.ceil(math.prod(tensor.dims) * bits / 8)


def check_external_data(
    model: onnx.ModelProto, base_dir: str | os.PathLike[str], source: str
) -> dict[Path, int]:
    """Check every external-data reference of ``model`` (see module docstring).

    Returns, for each data file (resolved path), the end of the last byte range the
    model declares in it: nothing past it is ever read. Each distinct location is
    resolved and looked up once (a model has one data file for thousands of tensors).
    """
    base = Path(os.path.realpath(base_dir))
    files: dict[str, tuple[Path, int] | str] = {}  # location -> (file, size) or its problem
    extents: dict[Path, int] = {}
    for tensor, name in _all_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        entries = {entry.key: entry.value for entry in tensor.external_data}
        location = entries.get("location", "")

        def fail(problem: str, name: str = name, location: str = location) -> InvalidModelError:
            return InvalidModelError(
                f"{source}: tensor '{name}': external data location '{location}' {problem}"
            )

        found = files.get(location)
        if found is None:
            found = files[location] = _data_file(base, location)
        if isinstance(found, str):
            raise fail(found)
        real, size = found
        try:
            offset = int(entries.get("offset", "0"))
            length = int(entries["length"]) if "length" in entries else None
        except ValueError:
            raise fail("has a non-integer offset or length") from None
        need = _declared_bytes(tensor)
        if need is None:
            raise fail(f"holds a tensor of data type {tensor.data_type}, which cannot be external")
        if offset < 0 or (length is not None and length < 0):
            raise fail(f"declares a negative offset or length ({offset}, {length})")
        if length is not None and length != need:
            raise fail(f"declares length {length}, but the tensor needs {need} bytes")
        if offset + need > size:
            raise fail(f"declares bytes {offset}..{offset + need}, but the file holds {size}")
        extents[real] = max(extents.get(real, 0), offset + need)
    return extents


def _data_file(base: Path, location: str) -> tuple[Path, int] | str:
    """The regular file ``location`` names inside ``base`` and its size, or what is wrong."""
    if not location or "\x00" in location:
        return "is empty or not a file name"
    if _ABSOLUTE.match(location) or os.path.isabs(location):
        return "is an absolute path; only files in the model's directory are read"
    if ".." in re.split(r"[\\/]", location):
        return "leaves the model's directory ('..')"
    real = Path(os.path.realpath(base / location))
    if base not in real.parents:
        return f"resolves (through a symbolic link) to '{real}', outside '{base}'"
    try:
        info = os.stat(real)
    except OSError as error:
        return f"cannot be read: {error.strerror}"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file (a device, FIFO or directory)"
    if info.st_nlink > 1:
        return f"has {info.st_nlink} hard links; onnx refuses such files"
    return real, info.st_size
