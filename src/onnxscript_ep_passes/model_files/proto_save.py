"""Saving a model whose weights copy started as soon as its proto was loaded.

Copying a large data file and flushing it to disk is most of saving a large model, and it
needs only the proto's external-data references. So the copy can run in a thread while the
caller works on the graph:

* :func:`proto_source_file` says whether a loaded proto can be saved so: its external data
  in one plain file inside the model's directory, ``weights="copy_file"``, no large inline
  tensor (anything else is left to :func:`~onnxscript_ep_passes.model_files.io.save_model`).
* :class:`ProtoSave` stages the output and starts the copy (up to the last tensor the proto
  declares, as :func:`~onnxscript_ep_passes.model_files.io.save_model` copies, a reflink where
  the file system has them). Its commit writes and checks the graph pointing at it while
  the copy still runs, then waits for the copy and moves both into place with the same
  atomic protocol (:mod:`~onnxscript_ep_passes.model_files.atomic`):
  :meth:`ProtoSave.commit` for a proto whose initializers were not changed (the plain
  lowering's fast path), :meth:`ProtoSave.commit_model` for an onnx-ir model built from
  the proto (the EP search): it commits only when
  :func:`~onnxscript_ep_passes.model_files.io.copy_file_source` says
  :func:`~onnxscript_ep_passes.model_files.io.save_model` would copy the same file, and cuts the
  copy to the end of the last tensor the model still uses, so the files are byte for byte
  those :func:`~onnxscript_ep_passes.model_files.io.save_model` writes; otherwise it stops the
  copy and declines.
* Leaving the ``with`` block without a commit (declined, nothing to do, an error, an
  interrupt) stops the copy at its next 64 MB chunk and removes everything staged.
"""

from __future__ import annotations

__all__ = ["ProtoSave", "early_save", "proto_source_file", "save_proto"]

import contextlib
import math
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import onnx
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import iter_graphs, point_external_data
from onnxscript_ep_passes.model_files.atomic import Stage as _Stage
from onnxscript_ep_passes.model_files.atomic import permission_mask
from onnxscript_ep_passes.model_files.external_data_checks import check_external_data
from onnxscript_ep_passes.model_files.io import (
    INLINE_TENSOR_LIMIT,
    INLINE_WEIGHTS_LIMIT,
    WeightsMode,
    copy_file_source,
    serialize_pointing_at,
)
from onnxscript_ep_passes.model_files.paths import same_file
from onnxscript_ep_passes.model_files.serialize import SerializedModel


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
    """How :func:`save_proto` would save ``proto`` as
    :func:`~onnxscript_ep_passes.model_files.io.save_model` saves its IR.

    The one data file to copy (a plain file inside the model's directory), None when the
    model has no external data and stays inline, False when only
    :func:`~onnxscript_ep_passes.model_files.io.save_model` can save it (several data files,
    large inline weights, ``weights`` other than copy_file, a location that is absolute,
    leaves the directory or is a link).
    """
    if weights != "copy_file":
        return False
    tensors = [t for g in iter_graphs(proto.graph) for t in g.initializer]
    external = [t for t in tensors if t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        inline = sum(t.ByteSize() for t in tensors)
        if external_data or (external_data is None and inline > INLINE_WEIGHTS_LIMIT):
            return False
        return None
    large_inline = any(
        _nbytes(t) > INLINE_TENSOR_LIMIT
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


def save_proto(
    proto: onnx.ModelProto,
    out: str | os.PathLike[str],
    source: Path | None,
    model_path: str | os.PathLike[str] | None = None,
) -> None:
    """Write ``proto`` to ``out`` atomically, as
    :func:`~onnxscript_ep_passes.model_files.io.save_model` does; its external data (``source``,
    see :func:`proto_source_file`) copied up to its last declared tensor. The files get at
    most the permissions of ``source`` and of ``model_path`` (the file ``proto`` was read
    from), when given."""
    with ProtoSave(proto, out, source, model_path) as saving:
        saving.commit(proto)


class ProtoSave:
    """:func:`save_proto` begun early: the weights are copied while the caller still works.

    Copying the data file (and flushing it to disk) is most of saving a large model, and
    it needs only the proto's external-data references. Creating a ``ProtoSave`` stages
    the output and starts that copy in a thread; the caller rewrites the proto's nodes
    meanwhile (never its initializers) and calls :meth:`commit`, which writes the graph,
    waits for the copy and moves both into place as :func:`save_proto` does; or it works on
    an onnx-ir model of the proto and calls :meth:`commit_model`. The files committed get at
    most the permissions of ``source`` and ``model_path`` (the model file). ``extents``: what
    :func:`~onnxscript_ep_passes.model_files.external_data_checks.check_external_data`
    returned for ``proto`` when the caller ran it (else it runs here). Leaving the ``with``
    block without a commit (the caller declined, or an error or an interrupt) stops the
    copy at its next chunk and removes everything staged.
    """

    def __init__(
        self,
        proto: onnx.ModelProto,
        out: str | os.PathLike[str],
        source: Path | None,
        model_path: str | os.PathLike[str] | None = None,
        *,
        extents: Mapping[Path, int] | None = None,
    ):
        target = Path(os.path.abspath(out))
        if target.is_dir():
            raise IsADirectoryError(f"output '{out}' is a directory")
        read = set() if source is None else {Path(os.path.realpath(source))}
        if source is not None and same_file(target, source):
            raise ValueError(
                f"refusing to write '{out}': the input's weights are read from that file; "
                "choose another output path"
            )
        inputs = [p for p in (source, model_path) if p is not None]
        self._stage = _Stage(target, None, permission_mask(inputs))
        self._keep: set[str] = set()
        self._name: str | None = None  # the staged data file
        self._stop = threading.Event()
        self._copier: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._source: Path | None = None  # the data file, resolved
        self._end = 0  # bytes of it staged under self._name
        try:  # an interrupt at any point here leaves nothing staged
            self._stage.create()
            if source is None:
                return
            real = self._source = Path(os.path.realpath(source))
            if real.parent == self._stage.directory:
                self._keep = {real.name}
                if real.name == self._stage.preferred:
                    return  # the data file already is this output's
            self._name = self._stage.data_name(read)
            if extents is None:
                extents = check_external_data(proto, real.parent, os.fspath(source))
            end = self._end = extents[real]
            self._copier = threading.Thread(
                target=self._copy, args=(real, end, self._name), name="weights copy", daemon=True
            )
            self._copier.start()
        except BaseException:
            self._stop.set()
            self._stage.cleanup()
            raise

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
        """Write ``proto`` pointing at the copy, wait for the copy, move both into place.

        The graph is serialized, checked (the checker's full check, most of writing it)
        and staged while the copy still runs: it needs only the staged data file's name.
        A copy that failed is what is raised, as when the graph came after it."""
        if self._name is not None:
            point_external_data(proto, self._name)
        self._commit_pointed(proto)

    def _commit_pointed(
        self, proto: onnx.ModelProto | SerializedModel, *, spent: bool = False
    ) -> None:
        """:meth:`commit` of a ``proto`` already pointing at the staged data file;
        ``spent``: one made here, which the check may change (its bytes are written)."""
        try:
            self._stage.write_graph(proto, spent=spent)
        except Exception:
            self._wait()
            if self._failure is not None:
                raise self._failure from None
            raise
        self._wait()
        if self._failure is not None:
            raise self._failure
        self._stage.commit(self._name, self._keep)

    def commit_model(self, model: ir.Model) -> bool:
        """Commit ``model`` (an onnx-ir model of the proto) as
        :func:`~onnxscript_ep_passes.model_files.io.save_model` would save it with
        ``weights="copy_file"``, onto the copy begun early: when it would copy this
        proto's data file, up to at most the bytes staged (then cut to the end of its
        last tensor). Otherwise stop the copy and return False: the caller saves
        ``model`` with :func:`~onnxscript_ep_passes.model_files.io.save_model`."""
        found = copy_file_source(model)
        if found is None or found[0] != self._source or found[1] > self._end:
            self._stop.set()
            self._wait()
            return False
        self._wait()
        if self._failure is None and self._name is not None and found[1] < self._end:
            data = self._stage.path / self._name
            os.truncate(data, found[1])
            self._stage.sync(self._name)
        self._commit_pointed(serialize_pointing_at(model, self._name), spent=True)
        return True

    def __enter__(self) -> ProtoSave:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()  # a committed save has nothing left to stop
        try:
            self._wait()
        finally:  # also when an interrupt cuts the wait short
            self._stage.cleanup()


def early_save(
    proto: onnx.ModelProto,
    model_path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    source: Path | Literal[False] | None,
    *,
    extents: Mapping[Path, int] | None = None,
) -> contextlib.AbstractContextManager[ProtoSave | None]:
    """A :class:`ProtoSave` of ``proto`` (read from ``model_path``) to ``out``, its weights
    copy begun now, for a caller that will build the onnx-ir model and save it with
    :meth:`ProtoSave.commit_model`; or a context holding None when no copy can be begun:
    ``source`` (:func:`proto_source_file`) is not a data file, or ``out`` is the model
    file itself (:func:`~onnxscript_ep_passes.model_files.io.save_model` keeps the data file of a
    model saved over itself, whatever its name)."""
    in_place = os.path.realpath(out) == os.path.realpath(model_path)
    if not isinstance(source, Path) or in_place:
        return contextlib.nullcontext()
    return ProtoSave(proto, out, source, model_path, extents=extents)
