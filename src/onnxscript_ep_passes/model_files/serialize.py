"""An onnx-ir model to its ModelProto, writing each repeated node and type once.

A lowered model repeats itself: expanding 1,000 identical Attention nodes writes 1,000
copies of one function body, whose nodes differ only in their names and whose outputs'
types are equal. onnx-ir's serializer builds every NodeProto and TypeProto field by
field; :func:`serialize_model` builds the same proto, byte for byte, building each
distinct one once and copying it (in C) for the others. Rules:

* Everything but the main graph's nodes and the value_info of their outputs is written
  by onnx-ir's own serializer (a view of the model whose main graph yields no node), so
  the model, graph inputs, initializers, outputs and functions are onnx-ir's.
* A main-graph node's proto is its op, domain, overload, doc string and attributes
  (memoized) plus its name, input and output names (set per node). The memo key holds
  an int, ints or string attribute's value itself (equal values write equal bytes), any
  other by identity: the model is neither changed nor freed while it is serialized, so
  an identity names one value throughout. A node with metadata, device
  configurations or a subgraph attribute is written by onnx-ir.
* A node output gets a ValueInfoProto when onnx-ir gives it one (a type, shape, doc
  string or metadata, and a name; never for a graph output). With a plain tensor type
  and no doc string or metadata, its TypeProto is memoized by the type's fields and the
  shape's dims and denotations; anything else is written by onnx-ir.
* Where the entries would land in another order than onnx-ir writes them (a node
  output with a quantization annotation, functions in a model below IR version 10,
  whose value_info onnx-ir appends to the main graph's), the whole model is written by
  onnx-ir instead.
* Given a ``location``, the external initializers of every graph point at it afterwards,
  as :func:`~onnxscript_ep_passes.core.onnx_utils.point_external_data` points them; the
  nodes written here hold no subgraph, so only the main graph and the subgraphs of the
  nodes onnx-ir wrote are read for it.
* :func:`serialize_parts` keeps the main graph's node and value_info entries as bytes
  beside the rest of the model's proto (a :class:`SerializedModel`; none of them holds a
  subgraph), so the graph file is written without building their proto:
  :meth:`SerializedModel.data` splices them into the rest's serialized bytes where
  protobuf writes those fields (it writes a message's fields in the order of their
  numbers), the same bytes as the merged proto's; bytes it cannot place (fields out of
  that order) are left to protobuf. The output check reads the same parts
  (:func:`~onnxscript_ep_passes.model_files.output_check.check_serialized`).
"""

from __future__ import annotations

__all__ = ["SerializedModel", "serialize_model", "serialize_parts", "splice_graph_entries"]

from typing import Any, cast

import onnx
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import iter_graphs, point_external_data

# What onnx-ir's serializer reads (onnx_ir.serde): a value's quantization annotation is
# this metadata field; functions keep their value_info from this IR version on.
_QUANT_FIELD = "quant_parameter_tensor_names"
_FUNCTION_VALUE_INFO_IR_VERSION = 10

_SUBGRAPH = (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
# Attribute values the memo key holds by value (equal values write equal bytes): an int,
# a tuple of ints, a string; any other by identity.
_BY_VALUE = frozenset((ir.AttributeType.INT, ir.AttributeType.INTS, ir.AttributeType.STRING))
_HASHED = (int, tuple, str)
# onnx-ir makes a node's or value's ``meta`` store and ``metadata_props`` dict on their
# first read; unread (its slot still None) is empty. They are read from the slots
# (where this onnx-ir has them), so that writing 240k nodes makes no empty store.
_NO_SLOT = object()


class _FallbackError(Exception):
    """The model must be written by onnx-ir alone (module rules)."""


class _GraphWithoutNodes:
    """The main graph as onnx-ir's serializer reads it, its nodes left out."""

    def __init__(self, graph: ir.Graph) -> None:
        self._graph = graph

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph, name)

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0


class _ModelWithoutNodes:
    """The model with :class:`_GraphWithoutNodes` as its graph."""

    def __init__(self, model: ir.Model) -> None:
        self._model = model
        self.graph = _GraphWithoutNodes(model.graph)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


def serialize_model(model: ir.Model, location: str | None = None) -> onnx.ModelProto:
    """``ir.serde.serialize_model(model)``, byte for byte (module rules); with
    ``location``, every graph's external initializers then point at that file, as
    :func:`~onnxscript_ep_passes.core.onnx_utils.point_external_data` points them (only the
    main graph and the subgraphs of the nodes that hold one are read for it, not every
    node)."""
    return serialize_parts(model, location).proto()


def serialize_parts(model: ir.Model, location: str | None = None) -> SerializedModel:
    """:func:`serialize_model`'s result as a :class:`SerializedModel`: its bytes, without
    the proto of its main graph's nodes built where that can be (module rules)."""
    if not (model.functions and model.ir_version < _FUNCTION_VALUE_INFO_IR_VERSION):
        proto = onnx.ModelProto()
        ir.serde.serialize_model_into(proto, from_=cast(Any, _ModelWithoutNodes(model)))
        writer = _Writer(model.ir_version)
        try:
            nodes, value_info = writer.write_nodes(model.graph)
        except _FallbackError:
            pass
        else:
            if writer.holders:  # the subgraphs' initializers are read in the nodes' protos
                proto.graph.MergeFromString(nodes + value_info)
                if location is not None:
                    _point_at(proto, location, writer.holders)
                return SerializedModel(proto)
            if location is not None:
                _point_at(proto, location, [])
            return SerializedModel(proto, nodes, value_info, writer.ops)
    proto = ir.serde.serialize_model(model)
    if location is not None:
        point_external_data(proto, location)
    return SerializedModel(proto)


class SerializedModel:
    """A serialized model: a ModelProto (``shell``) whose main graph's nodes and their
    value_info are held apart, as protobuf wire bytes of GraphProto entries.

    The model is the shell with ``nodes`` put in front of its graph's nodes (it has none)
    and ``value_info`` after its graph's value_info. :meth:`data` is that model's
    serialized bytes, byte for byte ``proto().SerializeToString()``: the shell is
    serialized (protobuf writes fields in the order of their numbers) and the entries
    spliced in where those fields go; :meth:`proto` builds the whole proto.

    Attributes:
        shell: The model without the nodes held apart (all of it when none are).
        nodes: GraphProto ``node`` entries (field 1), in the graph's order.
        value_info: GraphProto ``value_info`` entries (field 13), in order.
        ops: The (domain, op_type) of every node held apart.
    """

    def __init__(
        self,
        shell: onnx.ModelProto,
        nodes: bytes = b"",
        value_info: bytes = b"",
        ops: frozenset[tuple[str, str]] = frozenset(),
    ) -> None:
        self.shell = shell
        self.nodes = nodes
        self.value_info = value_info
        self.ops = ops

    def proto(self) -> onnx.ModelProto:
        """The whole model's proto (the shell itself, the entries merged into it)."""
        if self.nodes or self.value_info:
            self.shell.graph.MergeFromString(self.nodes + self.value_info)
            self.nodes = self.value_info = b""
            self.ops = frozenset()
        return self.shell

    def data(self, shell: onnx.ModelProto | None = None) -> bytes:
        """The model serialized; with ``shell``, the model made of that shell (one like
        :attr:`shell`, changed) and the entries held apart."""
        data = (self.shell if shell is None else shell).SerializeToString()
        if not (self.nodes or self.value_info):
            return data
        spliced = splice_graph_entries(data, self.nodes, self.value_info)
        if spliced is None:  # fields out of order: protobuf's own merge and serialization
            return self.proto().SerializeToString()
        return spliced


def splice_graph_entries(model: bytes, nodes: bytes, value_info: bytes) -> bytes | None:
    """``model`` (a serialized ModelProto whose graph has no node) with ``nodes`` before
    its graph's fields and ``value_info`` after its graph's value_info (before field 14):
    the bytes protobuf writes for the merged message; None when ``model``'s fields or its
    graph's are not in the order of their numbers, or its graph is not there once."""
    fields = _wire_fields(model)
    if fields is None or fields != sorted(fields):
        return None
    graphs = [f for f in fields if f[0] == _MODEL_GRAPH]
    if len(graphs) != 1:
        return None
    _, start, payload, end = graphs[0]
    inner = _wire_fields(model[payload:end])
    if inner is None or inner != sorted(inner) or (inner and inner[0][0] <= 1):
        return None
    split = next((f[1] for f in inner if f[0] > 13), end - payload)
    graph = model[payload:end]
    body = b"".join((nodes, graph[:split], value_info, graph[split:]))
    return b"".join((model[:start], b"\x3a", _varint(len(body)), body, model[end:]))


_MODEL_GRAPH = 7  # ModelProto.graph


def _wire_fields(data: bytes) -> list[tuple[int, int, int, int]] | None:
    """The top-level fields of the message ``data``: (number, start, payload start, end)
    each; None when ``data`` is not well formed."""
    fields: list[tuple[int, int, int, int]] = []
    position, size = 0, len(data)
    while position < size:
        start = position
        tag, position = _read_varint(data, position)
        kind = tag & 7
        if kind == 0:
            _, position = _read_varint(data, position)
            payload = start
        elif kind == 2:
            length, payload = _read_varint(data, position)
            position = payload + length
        elif kind in (1, 5):
            payload, position = start, position + (8 if kind == 1 else 4)
        else:
            return None
        if position > size or tag >> 3 == 0:
            return None
        fields.append((tag >> 3, start, payload, position))
    return fields


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while position < len(data):
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
    return -1, len(data) + 1  # cut short: the caller sees a field past the end


def _point_at(proto: onnx.ModelProto, location: str, holders: list[int]) -> None:
    """Point the external initializers of the main graph and of the subgraphs of its
    nodes ``holders`` (the indices of those with a subgraph attribute) at ``location``."""
    graphs = [proto.graph]
    nodes = proto.graph.node
    for index in holders:
        for attr in nodes[index].attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                graphs.extend(iter_graphs(attr.g))
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    graphs.extend(iter_graphs(sub))
    for graph in graphs:
        for tensor in graph.initializer:
            for entry in tensor.external_data:
                if entry.key == "location":
                    entry.value = location


def _varint(number: int) -> bytes:
    """``number`` (>= 0) as a protobuf varint."""
    out = bytearray()
    while number > 0x7F:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


_VARINTS = [_varint(n) for n in range(1 << 14)]


def _length(number: int) -> bytes:
    return _VARINTS[number] if number < 16384 else _varint(number)


# Wire tags (field number << 3 | 2, length-delimited) of the fields written here.
_GRAPH_NODE = b"\x0a"  # GraphProto.node = 1
_GRAPH_VALUE_INFO = b"\x6a"  # GraphProto.value_info = 13
_NODE_INPUT = b"\x0a"  # NodeProto.input = 1
_NODE_OUTPUT = b"\x12"  # NodeProto.output = 2
_NODE_NAME = b"\x1a"  # NodeProto.name = 3
_VALUE_NAME = b"\x0a"  # ValueInfoProto.name = 1
_VALUE_TYPE = b"\x12"  # ValueInfoProto.type = 2


class _Writer:
    """The main graph's nodes and their outputs' value_info, as protobuf's wire bytes of
    GraphProto entries: names encoded per node, the rest memoized (module rules)."""

    def __init__(self, ir_version: int) -> None:
        self._ir_version = ir_version
        self._nodes: dict[tuple[object, ...], bytes] = {}
        self._types_by_shape: dict[tuple[object, ...], bytes] = {}
        self._types: dict[tuple[object, ...], bytes] = {}
        self.holders: list[int] = []  # the nodes written with a subgraph attribute
        self._ops: set[tuple[str, str]] = set()  # those of the nodes written by onnx-ir

    @property
    def ops(self) -> frozenset[tuple[str, str]]:
        """The (domain, op_type) of every node written."""
        memoized = {(cast(str, key[1]), cast(str, key[0])) for key in self._nodes}
        return frozenset(self._ops | memoized)

    def write_nodes(self, graph: ir.Graph) -> tuple[bytes, bytes]:
        """The GraphProto entries of ``graph``'s nodes and of their value_info."""
        chunk: list[bytes] = []
        infos: list[bytes] = []
        add_node = chunk.append
        add = infos.append
        lengths = _VARINTS
        limit = len(lengths)
        node_part = self._node_part
        by_shape = self._types_by_shape
        for index, node in enumerate(graph):
            cached = node_part(node)
            if cached is None:
                data = self._proto_bytes(node, index)
            else:  # the names per node, the rest memoized
                parts: list[bytes] = []
                add_part = parts.append
                for value in node.inputs:
                    if value is None:
                        add_part(b"\x0a\x00")
                        continue
                    name = value.name
                    if name is None:
                        raise _FallbackError  # onnx-ir's own error
                    encoded = name.encode()
                    size = len(encoded)
                    add_part(_NODE_INPUT + (lengths[size] if size < limit else _varint(size)))
                    add_part(encoded)
                outputs = node.outputs
                end = len(outputs)
                while end and not outputs[end - 1].name:  # trailing unnamed ones left out
                    end -= 1
                for out in outputs[:end] if end < len(outputs) else outputs:
                    name = out.name
                    if name is None:
                        raise _FallbackError
                    encoded = name.encode()
                    size = len(encoded)
                    add_part(_NODE_OUTPUT + (lengths[size] if size < limit else _varint(size)))
                    add_part(encoded)
                if node.name:
                    encoded = node.name.encode()
                    size = len(encoded)
                    add_part(_NODE_NAME + (lengths[size] if size < limit else _varint(size)))
                    add_part(encoded)
                add_part(cached)
                data = b"".join(parts)
            size = len(data)
            add_node(_GRAPH_NODE + (lengths[size] if size < limit else _varint(size)))
            add_node(data)
            for out in node.outputs:
                if out.is_graph_output():
                    continue
                store: Any = getattr(out, "_metadata", _NO_SLOT)  # None: meta never read
                if store is _NO_SLOT:
                    store = out.meta
                if store is not None and store.data.get(_QUANT_FIELD):
                    raise _FallbackError
                props = getattr(out, "_metadata_props", _NO_SLOT)  # None: empty
                if props is _NO_SLOT:
                    props = out.metadata_props
                name = out.name
                type_ = out.type
                shape = out.shape
                if not name or (
                    type_ is None and shape is None and not props and not out.doc_string
                ):
                    continue  # onnx-ir writes no value_info for it
                if props or out.doc_string or type(type_) is not ir.TensorType:
                    data = self._value_proto_bytes(out)
                else:  # a plain tensor type: its TypeProto memoized (_type_bytes)
                    cached = by_shape.get((type_.dtype, type_.denotation, id(shape)))
                    if cached is None:
                        cached = self._type_bytes(type_, shape)
                    encoded = name.encode()
                    size = len(encoded)
                    data = b"".join(
                        (
                            _VALUE_NAME,
                            lengths[size] if size < limit else _varint(size),
                            encoded,
                            cached,
                        )
                    )
                size = len(data)
                add(_GRAPH_VALUE_INFO + (lengths[size] if size < limit else _varint(size)))
                add(data)
        return b"".join(chunk), b"".join(infos)

    def _proto_bytes(self, node: ir.Node, index: int) -> bytes:
        """``node``'s bytes as onnx-ir writes them (a node :meth:`_node_part` declines)."""
        self._ops.add((node.domain, node.op_type))
        if any(a.type in _SUBGRAPH for a in node.attributes.data.values()):
            self.holders.append(index)
        proto = onnx.NodeProto()
        ir.serde.serialize_node_into(proto, from_=node, model_ir_version=self._ir_version)
        return proto.SerializeToString()

    def _node_part(self, node: ir.Node) -> bytes | None:
        """The node's bytes but its names (memoized); None: onnx-ir writes it."""
        props = getattr(node, "_metadata_props", _NO_SLOT)  # None: empty
        if props is _NO_SLOT:
            props = node.metadata_props
        if props or getattr(node, "device_configurations", None):
            return None
        attributes: list[object] = []
        for attr in node.attributes.data.values():  # a dict: read as walk() reads it
            if attr.type in _SUBGRAPH:
                return None
            kind = attr.type
            value = attr.value
            attributes.append(
                (
                    attr.name,
                    kind,
                    attr.doc_string,
                    attr.ref_attr_name,
                    value if kind in _BY_VALUE and type(value) in _HASHED else id(value),
                )
            )
        key = (node.op_type, node.domain, node.overload, node.doc_string, *attributes)
        cached = self._nodes.get(key)
        if cached is None:
            proto = onnx.NodeProto()
            ir.serde.serialize_node_into(proto, from_=node, model_ir_version=self._ir_version)
            proto.ClearField("name")
            proto.ClearField("input")
            proto.ClearField("output")
            cached = self._nodes[key] = proto.SerializeToString()
        return cached

    def _value_proto_bytes(self, value: ir.Value) -> bytes:
        """``value``'s ValueInfoProto as onnx-ir writes it (not a plain tensor type)."""
        proto = onnx.ValueInfoProto()
        ir.serde.serialize_value_into(proto, value)
        return proto.SerializeToString()

    def _type_bytes(self, type_: ir.TensorType, shape: ir.Shape | None) -> bytes:
        """The ValueInfoProto ``type`` entry of a plain tensor type and ``shape``
        (memoized by the type's fields and the shape's dims and denotations, and by the
        shape object's identity: a shape shared by many values is read once)."""
        key: tuple[object, ...] = (type_.dtype, type_.denotation)
        if shape is not None:
            dims = tuple(d if isinstance(d, int) else ("sym", d.value) for d in shape.dims)
            denotations = tuple(shape.get_denotation(i) for i in range(len(dims)))
            key = (*key, dims, denotations)
        cached = self._types.get(key)
        if cached is None:
            proto = onnx.TypeProto()
            ir.serde.serialize_type_into(proto, type_)
            if shape is not None:
                ir.serde.serialize_shape_into(proto, shape)
            data = proto.SerializeToString()
            cached = self._types[key] = _VALUE_TYPE + _length(len(data)) + data
        self._types_by_shape[(type_.dtype, type_.denotation, id(shape))] = cached
        return cached
