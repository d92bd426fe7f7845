"""The last check before an output model is moved into place: onnx's own checker.

Rules (:func:`check_output`, called by :class:`~onnxscript_ep_passes.model_files.atomic.Stage` on
every graph it writes, whichever path built it: the proto fast path, the IR save, the
early weights copy):

* The model must pass ``onnx.checker.check_model(full_check=True)`` (the structural
  checks and strict shape inference). Otherwise ValueError, one line: OUT, the checker's
  message, "nothing was written"; the caller's staged files are removed.
* The main graph's inputs and outputs must each have a type, and a tensor type a shape
  (its rank; dimensions may be unknown), as the checker requires; the message names the
  value (the checker's own does not).
* What the checker cannot judge is set aside, in a copy made only when needed, never in
  the model written: external data files (written and checked by this package; given
  bytes, the checker would look for them relative to the working directory) are replaced
  by graph inputs of the same type and shape (an initializer in a subgraph is read from
  the main graph, names being unique across scopes), and an external tensor in an
  attribute by zeros of its type and shape; nodes in the ai.onnx domain that onnx has no
  schema for (ORT's own ops there, such as SimplifiedLayerNormalization, which ORT
  registers in that domain) are checked as nodes of an unregistered domain.
* Cost, on benchmarks/make_decoder.py's 5k-node model (CPU, median of 5 runs): ``lower
  --target-opset 23`` 1.10 s -> 1.18 s, ``--target-opset 22`` (its output has 30k nodes)
  3.11 s -> 3.43 s; the checker's full check itself is most of it.
"""

from __future__ import annotations

__all__ = ["ORT_DEFAULT_DOMAIN_STANDIN", "check_output"]

import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import onnx
import onnx.helper

from onnxscript_ep_passes.core.onnx_utils import get_schema, iter_graphs, iter_nodes

ORT_DEFAULT_DOMAIN_STANDIN = "onnxscript_ep_passes.ort_default_domain"
"""The domain the checked copy gives ai.onnx-domain nodes onnx has no schema for."""

_DEFAULT_DOMAINS = ("", "ai.onnx")
_EXTERNAL = onnx.TensorProto.EXTERNAL


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _default_opset(imports: list[onnx.OperatorSetIdProto]) -> int | None:
    return next((o.version for o in imports if o.domain in _DEFAULT_DOMAINS), None)


def _unknown_to_onnx(nodes: list[onnx.NodeProto], opset: int | None) -> list[onnx.NodeProto]:
    if opset is None:
        return []
    return [
        n
        for n in nodes
        if n.domain in _DEFAULT_DOMAINS and get_schema(n.op_type, opset, "") is None
    ]


def _external_tensors(node: onnx.NodeProto) -> list[onnx.TensorProto]:
    """The tensors with external data in ``node``'s attributes (only tensor attributes
    are read: touching every attribute's ``t`` field costs more than the checker)."""
    found = []
    for attr in node.attribute:
        kind = attr.type
        if kind == onnx.AttributeProto.TENSOR and attr.t.data_location == _EXTERNAL:
            found.append(attr.t)
        elif kind == onnx.AttributeProto.TENSORS:
            found.extend(t for t in attr.tensors if t.data_location == _EXTERNAL)
    return found


def _signature_problem(graph: onnx.GraphProto) -> str | None:
    for kind, values in (("input", graph.input), ("output", graph.output)):
        for value in values:
            label = f"{kind} '{value.name}' of graph '{graph.name}'"
            if not value.HasField("type"):
                return f"{label} has no type"
            if value.type.HasField("tensor_type") and not value.type.tensor_type.HasField("shape"):
                return f"{label} has no shape (the checker needs its rank at least)"
    return None


def _checkable(proto: onnx.ModelProto, data: bytes | None = None) -> onnx.ModelProto:
    """A copy of ``proto`` with what the checker cannot judge set aside (module rules).

    Copying (in C) costs less than a second walk over the graphs in Python, so the copy
    is made first and walked once. ``data``, ``proto`` serialized, spares walks over
    every node's attributes where its bytes show they would find nothing
    (:func:`_walks_needed`)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    subgraphs, attribute_tensors = _walks_needed(data)
    graphs = list(iter_graphs(copy.graph)) if subgraphs else [copy.graph]
    external = _set_external_aside(copy, graphs)
    if attribute_tensors and (data is None or data.count(_EXTERNAL_BYTES) > external):
        for graph in graphs:
            for node in graph.node:
                _zero_external(node)
    _set_ort_ops_aside(copy, [n for g in graphs for n in g.node])
    return copy


# Protobuf's encoding of fields set to these values, as every serializer writes them (the
# field's tag, then its varint). A value never set leaves no such bytes, whatever else
# the bytes hold: their absence proves it, their presence proves nothing.
_EXTERNAL_BYTES = bytes([14 << 3, onnx.TensorProto.EXTERNAL])  # TensorProto.data_location
_GRAPH_TYPE_BYTES = tuple(  # AttributeProto.type (field 20: a two-byte tag)
    bytes([(20 << 3) & 0x7F | 0x80, (20 << 3) >> 7, kind])
    for kind in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
)


def _walks_needed(data: bytes | None) -> tuple[bool, bool]:
    """Whether an attribute of the serialized model ``data`` may hold a graph, and
    whether one may hold a tensor with external data (both when ``data`` is None); the
    latter is then settled by counting external tensors against the initializers'."""
    if data is None:
        return True, True
    return any(b in data for b in _GRAPH_TYPE_BYTES), _EXTERNAL_BYTES in data


def _set_external_aside(proto: onnx.ModelProto, graphs: list[onnx.GraphProto]) -> int:
    """Replace the external initializers of ``graphs`` by graph inputs; their count."""
    main = proto.graph
    inputs = {i.name for i in main.input}
    count = 0
    for graph in graphs:
        kept: list[onnx.TensorProto] = []
        external: list[onnx.TensorProto] = []
        for tensor in graph.initializer:
            (external if tensor.data_location == _EXTERNAL else kept).append(tensor)
        count += len(external)
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
    return count


def _zero_external(node: onnx.NodeProto) -> None:
    """Replace the external tensors of ``node``'s attributes by zeros of their type."""
    for tensor in _external_tensors(node):
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


def check_output(proto: onnx.ModelProto, out: Path, data: bytes | None = None) -> None:
    """Raise ValueError (one line) when ``proto``, to be written to ``out``, fails the
    module's rules; ``data``: ``proto`` serialized, when the caller has it."""
    problem = _signature_problem(proto.graph)
    if problem is None:
        try:
            onnx.checker.check_model(_checkable(proto, data), full_check=True)
        except Exception as error:  # ValidationError, InferenceError (the C++ checker)
            problem = _one_line(error)
    if problem is not None:
        raise ValueError(
            f"refusing to write '{out}': the result fails onnx's checker ({problem}); "
            "nothing was written"
        )
