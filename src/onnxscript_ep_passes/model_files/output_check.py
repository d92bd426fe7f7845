"""The last check before an output model is moved into place: onnx's own checker.

Rules (:func:`check_output`, called by :class:`~onnxscript_ep_passes.model_files.atomic.Stage` on
every graph it writes, whichever path built it: the proto fast path, the IR save, the
early weights copy):

* The model must pass ``onnx.checker.check_model(full_check=True)`` (the structural
  checks and strict shape inference; on a large model the two run at once,
  :mod:`.split_check`, with the same answer). Otherwise ValueError, one line: OUT, the
  checker's message, "nothing was written"; the caller's staged files are removed.
* The main graph's inputs and outputs must each have a type, and a tensor type a shape
  (its rank; dimensions may be unknown), as the checker requires; the message names the
  value (the checker's own does not).
* What the checker cannot judge is set aside, in a copy made only when needed (or in the
  proto itself when its caller needs it no more, having serialized it), never in the
  model written: external data files (written and checked by this package; given
  bytes, the checker would look for them relative to the working directory) are replaced
  by graph inputs of the same type and shape (an initializer in a subgraph is read from
  the main graph, names being unique across scopes), and an external tensor in an
  attribute by zeros of its type and shape; nodes in the ai.onnx domain that onnx has no
  schema for (ORT's own ops there, such as SimplifiedLayerNormalization, which ORT
  registers in that domain) are checked as nodes of an unregistered domain.
* A model serialized with its main graph's nodes held apart as bytes
  (:class:`~onnxscript_ep_passes.model_files.serialize.SerializedModel`) is checked the
  same way (:func:`check_serialized`), its copy made of the rest of the proto alone with
  those bytes spliced in, when their bytes show the copy keeps them as they are (no
  subgraph, no tensor with external data, a schema for each default-domain op):
  neither the nodes' proto nor its copy is built (on the 40k-node decoder lowered to
  opset 22, 242k nodes: 0.4 GB less peak memory); otherwise from the whole proto.
* Cost, on benchmarks/make_decoder.py's 5k-node model (CPU, median of 5 runs): ``lower
  --target-opset 23`` 1.10 s -> 1.18 s, ``--target-opset 22`` (its output has 30k nodes)
  3.11 s -> 3.43 s; the checker's full check itself is most of it.
"""

from __future__ import annotations

__all__ = ["ORT_DEFAULT_DOMAIN_STANDIN", "check_output", "check_serialized"]

import math
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import onnx
import onnx.helper

from onnxscript_ep_passes.core.onnx_utils import get_schema, iter_nodes
from onnxscript_ep_passes.model_files.serialize import SerializedModel
from onnxscript_ep_passes.model_files.split_check import full_check

ORT_DEFAULT_DOMAIN_STANDIN = "onnxscript_ep_passes.ort_default_domain"
"""The domain the checked copy gives ai.onnx-domain nodes onnx has no schema for."""

_DEFAULT_DOMAINS = ("", "ai.onnx")
_EXTERNAL = onnx.TensorProto.EXTERNAL
_TENSOR = onnx.AttributeProto.TENSOR
_TENSORS = onnx.AttributeProto.TENSORS
_GRAPH = onnx.AttributeProto.GRAPH
_GRAPHS = onnx.AttributeProto.GRAPHS


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _default_opset(imports: list[onnx.OperatorSetIdProto]) -> int | None:
    return next((o.version for o in imports if o.domain in _DEFAULT_DOMAINS), None)


def _unknown_to_onnx(nodes: list[onnx.NodeProto], opset: int | None) -> list[onnx.NodeProto]:
    if opset is None:
        return []
    known: dict[str, bool] = {}  # one schema look-up per op, not per node
    unknown = []
    for node in nodes:
        if node.domain not in _DEFAULT_DOMAINS:
            continue
        op_type = node.op_type
        has_schema = known.get(op_type)
        if has_schema is None:
            has_schema = known[op_type] = get_schema(op_type, opset, "") is not None
        if not has_schema:
            unknown.append(node)
    return unknown


def _walk(
    graph: onnx.GraphProto,
    graphs: list[onnx.GraphProto],
    nodes: list[onnx.NodeProto],
    external: list[onnx.TensorProto],
) -> None:
    """Collect ``graph`` and its subgraphs (as ``iter_graphs`` orders them), their nodes
    and the tensors with external data in the nodes' attributes, in one pass (only
    tensor attributes are read: touching every attribute's ``t`` field costs more than
    the checker)."""
    graphs.append(graph)
    for node in graph.node:
        nodes.append(node)
        for attr in node.attribute:
            kind = attr.type
            if kind == _TENSOR:
                if attr.t.data_location == _EXTERNAL:
                    external.append(attr.t)
            elif kind == _GRAPH:
                _walk(attr.g, graphs, nodes, external)
            elif kind == _GRAPHS:
                for sub in attr.graphs:
                    _walk(sub, graphs, nodes, external)
            elif kind == _TENSORS:
                external.extend(t for t in attr.tensors if t.data_location == _EXTERNAL)


def _signature_problem(graph: onnx.GraphProto) -> str | None:
    for kind, values in (("input", graph.input), ("output", graph.output)):
        for value in values:
            label = f"{kind} '{value.name}' of graph '{graph.name}'"
            if not value.HasField("type"):
                return f"{label} has no type"
            if value.type.HasField("tensor_type") and not value.type.tensor_type.HasField("shape"):
                return f"{label} has no shape (the checker needs its rank at least)"
    return None


def _checkable(
    proto: onnx.ModelProto, data: bytes | None = None, *, spent: bool = False
) -> onnx.ModelProto:
    """A copy of ``proto`` with what the checker cannot judge set aside (module rules);
    ``proto`` itself, so changed, when ``spent`` (its caller needs it no more).

    Copying (in C) costs less than a second walk over the graphs in Python, so the copy
    is made first and walked once. ``data``, ``proto`` serialized, spares walks over
    every node's attributes where its bytes show they would find nothing
    (:func:`_walks_needed`)."""
    if spent:
        copy = proto
    else:
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
    graphs: list[onnx.GraphProto] = []
    nodes: list[onnx.NodeProto] = []
    external: list[onnx.TensorProto] = []
    if _walk_needed(copy.graph, data):
        _walk(copy.graph, graphs, nodes, external)
    else:  # no attribute holds a graph or a tensor with external data
        graphs.append(copy.graph)
        nodes.extend(copy.graph.node)
    _set_external_aside(copy, graphs, external)
    _set_ort_ops_aside(copy, nodes)
    return copy


# Protobuf's encoding of fields set to these values, as every serializer writes them (the
# field's tag, then its varint). A value never set leaves no such bytes, whatever else
# the bytes hold: their absence proves it, their presence proves nothing.
_EXTERNAL_BYTES = bytes([14 << 3, onnx.TensorProto.EXTERNAL])  # TensorProto.data_location
_GRAPH_TYPE_BYTES = tuple(  # AttributeProto.type (field 20: a two-byte tag)
    bytes([(20 << 3) & 0x7F | 0x80, (20 << 3) >> 7, kind]) for kind in (_GRAPH, _GRAPHS)
)


def _walk_needed(graph: onnx.GraphProto, data: bytes | None) -> bool:
    """Whether :func:`_walk` over ``graph`` may find a subgraph or an external tensor in an
    attribute, as the serialized model ``data`` tells (always, without ``data``): only
    when an attribute's type is a graph's, or when ``data`` holds more tensors with
    external data than ``graph`` has initializers with it."""
    if data is None or any(b in data for b in _GRAPH_TYPE_BYTES):
        return True
    count = data.count(_EXTERNAL_BYTES)
    return count > 0 and count > sum(t.data_location == _EXTERNAL for t in graph.initializer)


def _set_external_aside(
    proto: onnx.ModelProto, graphs: list[onnx.GraphProto], in_attributes: list[onnx.TensorProto]
) -> None:
    """Initializers with external data become graph inputs; ``in_attributes`` (external
    tensors in nodes' attributes) zeros."""
    main = proto.graph
    inputs = {i.name for i in main.input}
    for graph in graphs:
        kept: list[onnx.TensorProto] = []
        external: list[onnx.TensorProto] = []
        for tensor in graph.initializer:
            (external if tensor.data_location == _EXTERNAL else kept).append(tensor)
        if external:
            del graph.initializer[:]
            graph.initializer.extend(kept)
        for tensor in external:
            if tensor.name not in inputs:
                inputs.add(tensor.name)
                value = main.input.add(name=tensor.name)
                value.type.tensor_type.elem_type = tensor.data_type
                shape = value.type.tensor_type.shape
                for dim in tensor.dims:
                    shape.dim.add(dim_value=dim)
    for tensor in in_attributes:
        size = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]
        tensor.raw_data = bytes(math.prod(tensor.dims) * size)


def _scope_nodes(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.NodeProto]:
    """``nodes`` and the nodes of their subgraphs, at any depth."""
    for node in nodes:
        yield node
        for attr in node.attribute:
            for graph in (attr.g, *attr.graphs) if attr.HasField("g") else attr.graphs:
                yield from iter_nodes(graph)


def _set_ort_ops_aside(proto: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> None:
    """Move ai.onnx-domain nodes without an ONNX schema (``nodes``: the graphs') to
    :data:`ORT_DEFAULT_DOMAIN_STANDIN`, in the graphs and in each function."""
    scopes: list[tuple[list[onnx.NodeProto], int | None, Any]] = [
        (nodes, _default_opset(list(proto.opset_import)), proto.opset_import)
    ]
    scopes += [
        (list(_scope_nodes(f.node)), _default_opset(list(f.opset_import)), f.opset_import)
        for f in proto.functions
    ]
    for scope, version, imports in scopes:
        unknown = _unknown_to_onnx(scope, version)
        for node in unknown:
            node.domain = ORT_DEFAULT_DOMAIN_STANDIN
        if unknown:
            imports.append(onnx.helper.make_opsetid(ORT_DEFAULT_DOMAIN_STANDIN, 1))


def check_output(
    proto: onnx.ModelProto, out: Path, data: bytes | None = None, *, spent: bool = False
) -> None:
    """Raise ValueError (one line) when ``proto``, to be written to ``out``, fails the
    module's rules; ``data``: ``proto`` serialized, when the caller has it. ``spent``:
    the caller needs ``proto`` no more (it writes ``data``): what the checker cannot
    judge is set aside in ``proto`` itself, not in a copy (the model checked is the same,
    without a second copy of the graph in memory)."""
    _check(proto.graph, lambda: _checkable(proto, data, spent=spent), out)


def _check(
    graph: onnx.GraphProto, checkable: Callable[[], onnx.ModelProto | bytes], out: Path
) -> None:
    """The module's rules: ``graph``'s signature, then the checker's full check of what
    ``checkable`` gives (the copy set aside, or its bytes)."""
    problem = _signature_problem(graph)
    if problem is None:
        try:
            full_check(checkable())  # the checker's full check (split on a large model)
        except Exception as error:  # ValidationError, InferenceError (the C++ checker)
            problem = _one_line(error)
    if problem is not None:
        raise ValueError(
            f"refusing to write '{out}': the result fails onnx's checker ({problem}); "
            "nothing was written"
        )


def check_serialized(model: SerializedModel, data: bytes, out: Path) -> None:
    """:func:`check_output` of ``model`` (``data``: its bytes), the same check, without
    the proto of the nodes it holds apart built where their bytes show that the copy
    checked keeps them as they are: none holds a subgraph or a tensor with external data,
    and onnx has a schema for each of their default-domain ops. The copy is then made of
    the shell alone (:func:`_checkable`) with those nodes spliced in, and checked as bytes."""
    shell = model.shell
    opset = _default_opset(list(shell.opset_import))
    entries = model.nodes
    if not entries or (
        _EXTERNAL_BYTES in entries
        or any(b in entries for b in _GRAPH_TYPE_BYTES)
        or (opset is not None and any(_lacks_schema(op, opset) for op in model.ops))
    ):
        full = onnx.ModelProto()
        full.ParseFromString(data)
        check_output(full, out, data, spent=True)  # made here: set aside in place
        return
    _check(shell.graph, lambda: model.data(_checkable(shell)), out)


def _lacks_schema(op: tuple[str, str], opset: int) -> bool:
    domain, op_type = op
    return domain in _DEFAULT_DOMAINS and get_schema(op_type, opset, "") is None
