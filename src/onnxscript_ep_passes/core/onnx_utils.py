"""Small ONNX helpers shared by graph rewriting (``lowering``) and EP knowledge (``ep``).

- walking protos into subgraphs (:func:`iter_graphs`, :func:`iter_nodes`), and IR graphs
  (:func:`walk`: nodes and subgraphs, for lowering's steps and the EP search);
- ONNX type strings of IR types (:func:`type_string`);
- the schema in force for an op at an opset (:func:`get_schema`);
- the function body ONNX's schema defines for a node (:func:`schema_function_body`);
- a node's attribute values as a hashable key (:func:`attributes_key`), for caches keyed
  by what a computation reads (placement's, and the lowering's expansion templates).

The proto walker remains hand-written: onnx-ir's ``RecursiveGraphIterator`` walks IR
graphs, and its callers hold protos they must not deserialize (the optimized model ORT
saves, a model being checked before it is loaded, a graph handed to ONNX shape
inference). For IR graphs, :func:`walk` lists what ``RecursiveGraphIterator`` and
``Graph.subgraphs`` yield, in their order, without their generators per node.
"""

from __future__ import annotations

__all__ = [
    "attributes_key",
    "built_outputs",
    "get_schema",
    "is_onnx_op",
    "iter_graphs",
    "iter_nodes",
    "point_external_data",
    "schema_function_body",
    "tensor_array",
    "type_string",
    "walk",
]

import functools
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import Any, TypeGuard

import numpy as np
import onnx
import onnx.defs
import onnx_ir as ir


def is_onnx_op(node: ir.Node | None, op_type: str) -> TypeGuard[ir.Node]:
    """Whether ``node`` is the ai.onnx op ``op_type`` (domain "" or "ai.onnx"); a type
    guard, so a caller that returns when it is not reads ``node`` as a node."""
    return node is not None and node.op_type == op_type and node.domain in ("", "ai.onnx")


@functools.cache
def get_schema(op_type: str, opset: int, domain: str = "") -> onnx.defs.OpSchema | None:
    """The schema of ``op_type`` in force at ``opset``, or None if there is none.

    ``"ai.onnx"`` and ``""`` name the same domain.
    """
    try:
        return onnx.defs.get_schema(op_type, opset, "" if domain == "ai.onnx" else domain)
    except onnx.defs.SchemaError:
        return None


def iter_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every subgraph of its nodes' attributes, at any depth."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from iter_graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from iter_graphs(sub)


def point_external_data(proto: onnx.ModelProto, location: str, old: str | None = None) -> None:
    """Point the external data of ``proto``'s initializers (every graph's) at the file
    ``location``: every reference, or only those to ``old`` when given."""
    for graph in iter_graphs(proto.graph):
        for tensor in graph.initializer:
            for entry in tensor.external_data:
                if entry.key == "location" and (old is None or entry.value == old):
                    entry.value = location


def iter_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``graph`` and of its subgraphs."""
    for sub in iter_graphs(graph):
        yield from sub.node


_GRAPH = ir.AttributeType.GRAPH
_GRAPHS = ir.AttributeType.GRAPHS


def walk(graph: ir.Graph | ir.Function | Iterable[ir.Node]) -> tuple[list[ir.Node], list[ir.Graph]]:
    """Every node of ``graph`` (or of a sequence of nodes) and its subgraphs, and every
    subgraph, in traversal order:
    onnx-ir's ``RecursiveGraphIterator`` order for the nodes (each node, then the nodes of
    its subgraphs, depth first), ``Graph.subgraphs()`` order for the graphs. A node's
    attribute dict is read directly and only GRAPH/GRAPHS attributes are entered, so a
    model of 200k nodes is walked without a generator per node."""
    nodes: list[ir.Node] = []
    subgraphs: list[ir.Graph] = []
    _walk(graph, nodes, subgraphs)
    return nodes, list(dict.fromkeys(subgraphs))


def _walk(graph: Iterable[ir.Node], nodes: list[ir.Node], subgraphs: list[ir.Graph]) -> None:
    for node in graph:
        nodes.append(node)
        for attr in node.attributes.data.values():
            kind = attr.type
            if (kind is not _GRAPH and kind is not _GRAPHS) or attr.is_ref():
                continue
            for sub in attr.value if kind is _GRAPHS else (attr.value,):
                subgraphs.append(sub)
                _walk(sub, nodes, subgraphs)


_TENSOR_STRINGS: dict[ir.DataType, str | None] = {
    dtype: None if dtype == ir.DataType.UNDEFINED else f"tensor({dtype.name.lower()})"
    for dtype in ir.DataType
}


def type_string(type_: ir.TypeProtocol | None) -> str | None:
    """The ONNX type string ('tensor(float)', 'seq(tensor(int64))', ...) of an IR type."""
    if type_ is None:
        return None
    if type(type_) is ir.TensorType:  # the common case, read from a table (a hot path)
        return _TENSOR_STRINGS.get(type_.dtype)
    if isinstance(type_, ir.TensorType):
        if type_.dtype == ir.DataType.UNDEFINED:
            return None
        return f"tensor({type_.dtype.name.lower()})"
    if isinstance(type_, ir.SparseTensorType):
        return f"sparse_tensor({type_.dtype.name.lower()})"
    if isinstance(type_, ir.SequenceType):
        inner = type_string(type_.elem_type)
        return None if inner is None else f"seq({inner})"
    if isinstance(type_, ir.OptionalType):
        inner = type_string(type_.elem_type)
        return None if inner is None else f"optional({inner})"
    return None


def schema_function_body(
    schema: onnx.defs.OpSchema,
    version: int,
    node: ir.Node,
    input_types: Sequence[onnx.TypeProto | None],
) -> onnx.FunctionProto | None:
    """The function body ``schema`` defines for ``node``, written for opset ``version``.

    A fixed body, or a context-dependent one built from the node's attributes and
    ``input_types`` (one per node input; None for an absent input). None when the schema
    defines no body.
    """
    defs: Any = schema
    if defs.has_function:
        data = defs.get_function_with_opset_version(version)
    elif defs.has_context_dependent_function:
        types = [(t or onnx.TypeProto()).SerializeToString() for t in input_types]
        data = defs.get_context_dependent_function_with_opset_version(
            version, ir.serde.serialize_node(node).SerializeToString(), types
        )
    else:
        return None
    function = onnx.FunctionProto()
    function.ParseFromString(data)
    return function


def built_outputs(function: onnx.FunctionProto) -> list[str]:
    """The body's outputs, ``""`` for those it declares but never builds, trailing ones cut.

    Attention's context-dependent body lists all four outputs and builds only those the
    node has.
    """
    built = {name for inner in function.node for name in inner.output} | set(function.input)
    names = [name if name in built else "" for name in function.output]
    while names and not names[-1]:
        names.pop()
    return names


_SCALARS = frozenset(
    {ir.AttributeType.INT, ir.AttributeType.STRING, ir.AttributeType.INTS, ir.AttributeType.STRINGS}
)


def _attribute_key(attr: ir.Attr) -> Hashable | None:
    kind = attr.type
    if attr.is_ref():
        return (attr.name, kind, "ref", attr.ref_attr_name)
    if kind in _SCALARS:
        return (attr.name, kind, attr.value)
    if kind == ir.AttributeType.FLOAT:  # float.hex: -0.0 and 0.0 differ, NaN equals itself
        return (attr.name, kind, float(attr.value).hex())
    if kind == ir.AttributeType.FLOATS:
        return (attr.name, kind, tuple(float(v).hex() for v in attr.value))
    if kind in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
        return None
    try:
        return (attr.name, kind, ir.serde.serialize_attribute(attr).SerializeToString())
    except Exception:  # an attribute serde cannot write: no key
        return None


def attributes_key(node: ir.Node) -> tuple[Hashable, ...] | None:
    """The values of ``node``'s attributes, in order, as a hashable key.

    Values, never identities, so an in-place edit changes the key. None when an attribute
    cannot be spelled exactly (a subgraph, or one serde cannot write): the caller then
    computes without its cache."""
    keys = []
    for attr in node.attributes.data.values():
        if not isinstance(attr, ir.Attr):
            return None
        key = _attribute_key(attr)
        if key is None:
            return None
        keys.append(key)
    return tuple(keys)


def tensor_array(tensor: ir.TensorProtocol) -> np.ndarray:
    """``tensor``'s data as an array; an external tensor's bytes read from its file.

    onnx-ir's ``ExternalTensor.numpy()`` maps the whole data file, once per tensor, and
    keeps the map while the tensor lives: reading the small weights of a 1,000-layer
    decoder (its norm scales) mapped its 120 MB data file 2,500 times (300 GB of address
    space: a ``MemoryError`` under an address-space limit). Here a plain external tensor
    (whole bytes per element) is read with one ``read`` of its own bytes, little-endian
    as ONNX stores them; any other tensor gives ``numpy()``."""
    if isinstance(tensor, ir.ExternalTensor) and tensor.size:
        dtype = np.dtype(tensor.dtype.numpy()).newbyteorder("<")
        nbytes = tensor.size * dtype.itemsize
        if tensor.nbytes == nbytes and (tensor.length is None or tensor.length >= nbytes):
            with open(tensor.path, "rb") as f:
                f.seek(tensor.offset or 0)
                data = f.read(nbytes)
            if len(data) == nbytes:
                return np.frombuffer(data, dtype=dtype).reshape(tensor.shape.numpy())
    return tensor.numpy()
