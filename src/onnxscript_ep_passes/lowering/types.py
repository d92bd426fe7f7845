"""Knowing the types of values: declared, inferred for the whole model, or per new node.

Rules:

* A value's declared type (``value.type``) is trusted first.
* When a rule needs a type that is not declared, ONNX shape inference runs once over a
  copy of the model whose large initializers are replaced by typed graph inputs, so no
  weight is serialized; the caller's model is never changed by it.
* Inference must see the model as the user wrote it: a half-lowered model (a replaced
  node left without output names until commit, nodes built at a lower opset than the
  model declares) makes ONNX's inference fail as a whole. A pass that will change the
  model calls :meth:`TypeOracle.prepare` with the values it may ask about first (those
  whose type it reads, and those whose type and shape it reads); the inference then
  runs before the first change, and only when one of them lacks what is read. After
  that no model-wide inference runs: values built later get theirs from per-node
  inference.
* Model-local function bodies carry no types: they are inferred per call site, from the
  types at the call site's inputs; a value gets a type only when every call site agrees.
* Nodes built by adapters get their output types from ONNX's per-node inference
  (:mod:`.node_types`).
* Memory stays bounded on hostile shapes: ONNX's data propagation materializes values
  computed from shapes (``Range(0, Size(x))``, ``ConstantOfShape(Shape(x))``, ...), so it
  is used only when no declared dimension product or small constant exceeds
  ``_DATA_PROP_LIMIT`` (a model declaring ``float[1000000000]`` is inferred without it),
  and inference that fails with it is retried without it.
"""

from __future__ import annotations

__all__ = [
    "TypeOracle",
    "holds_small_constant",
    "infer_model_types",
    "known_type",
    "small_constant_proto",
    "value_type_proto",
    "weight_free_model_proto",
]

import itertools
import logging
import math
from collections.abc import Callable, Iterable
from typing import Any

import onnx
import onnx.numpy_helper
import onnx.shape_inference
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import iter_graphs
from onnxscript_ep_passes.lowering import schemas

logger = logging.getLogger(__name__)

_SMALL_CONSTANT = 1024  # elements; constants this small feed inference's data propagation
_DATA_PROP_LIMIT = 1 << 24  # largest dimension product / constant that data propagation sees


def known_type(type_: ir.TypeProtocol | None) -> bool:
    """Whether ``type_`` is a type the rules can read (not None, no unknown element type)."""
    return schemas.type_string(type_) is not None


def holds_small_constant(value: ir.Value) -> bool:
    """Whether ``value`` holds a constant of at most ``_SMALL_CONSTANT`` elements: the
    constants :func:`small_constant_proto` serializes (it may still fail on an exotic
    tensor, so a caller choosing on this alone can only be more cautious), without
    serializing it."""
    tensor = value.const_value
    return tensor is not None and tensor.size <= _SMALL_CONSTANT


def small_constant_proto(value: ir.Value) -> onnx.TensorProto | None:
    """The constant ``value`` holds, as inference's data propagation sees it (small ones only)."""
    tensor = value.const_value
    if tensor is None or tensor.size > _SMALL_CONSTANT:
        return None
    try:
        return ir.serde.serialize_tensor(tensor)
    except Exception:  # pragma: no cover - exotic tensor kinds
        return None


def value_type_proto(
    value: ir.Value, type_of: Callable[[ir.Value], ir.TypeProtocol | None]
) -> onnx.TypeProto | None:
    """The type and shape of ``value`` as ONNX's inference reads them (None: type unknown).

    The declared type, else ``type_of``'s; the declared shape when the type is a tensor.
    """
    type_ = value.type if known_type(value.type) else type_of(value)
    if type_ is None:
        return None
    proto = onnx.TypeProto()
    ir.serde.serialize_type_into(proto, type_)
    if value.shape is not None and proto.HasField("tensor_type"):
        ir.serde.serialize_shape_into(proto, value.shape)
    return proto


class TypeOracle:
    """Answers "what is the type of this value?" for a model, inferring when needed."""

    def __init__(self, model: ir.Model) -> None:
        self._model = model
        self._graph_protos: dict[str, onnx.TypeProto] | None = None
        self._graph_types: dict[str, ir.TypeProtocol | None] = {}
        self._function_types: dict[ir.OperatorIdentifier, dict[str, ir.TypeProtocol | None]] = {}
        self._graph_owner: dict[ir.Graph, ir.Function] | None = None
        self._frozen = False  # set by prepare(): the model may change from now on
        # What per-node inference gave, by node signature (:mod:`.node_types`).
        self.node_types: dict[object, Any] = {}

    def prepare(self, typed: Iterable[ir.Value], shaped: Iterable[ir.Value] = ()) -> None:
        """Infer now (before the model changes) if a value of ``typed`` lacks a type, or
        one of ``shaped`` a type or a shape.

        Values of a model-local function prepare that function's per-call inference; the
        others the whole-model inference.
        """
        functions: dict[ir.OperatorIdentifier, ir.Function] = {}
        whole_model = False
        wanting = itertools.chain(
            (v for v in typed if not known_type(v.type)),
            (v for v in shaped if v.shape is None or not known_type(v.type)),
        )
        for value in wanting:
            producer = value.producer()
            function = self._owning_function(producer.graph if producer else value.graph)
            if function is not None:
                functions.setdefault(function.identifier(), function)
            else:
                whole_model = True
        if whole_model:
            self._inferred()
        for function in functions.values():
            self._types_in_function(function)
        self._frozen = True

    def type_of(self, value: ir.Value) -> ir.TypeProtocol | None:
        if known_type(value.type):
            return value.type
        producer = value.producer()
        graph = producer.graph if producer is not None else value.graph
        function = self._owning_function(graph)
        if function is not None:
            types = self._types_in_function(function)
            return types.get(value.name or "")
        name = value.name or ""
        if name not in self._graph_types:
            proto = self._inferred().get(name)
            type_ = None if proto is None else ir.serde.deserialize_type_proto_for_type(proto)
            self._graph_types[name] = type_ if known_type(type_) else None
        return self._graph_types[name]

    def shape_of(self, value: ir.Value) -> ir.Shape | None:
        """The declared shape, else the one shape inference gives (main graph only)."""
        if value.shape is not None:
            return value.shape
        producer = value.producer()
        graph = producer.graph if producer is not None else value.graph
        if self._owning_function(graph) is not None:
            return None
        proto = self._inferred().get(value.name or "")
        if proto is None or not proto.HasField("tensor_type"):
            return None
        return ir.serde.deserialize_type_proto_for_shape(proto)

    def _inferred(self) -> dict[str, onnx.TypeProto]:
        if self._graph_protos is None:
            self._graph_protos = {} if self._frozen else self._infer_model()
        return self._graph_protos

    def _owning_function(self, graph: ir.Graph | None) -> ir.Function | None:
        if graph is None:
            return None
        if self._graph_owner is None:
            self._graph_owner = {}
            for function in self._model.functions.values():
                self._graph_owner[function.graph] = function
                for node in ir.traversal.RecursiveGraphIterator(function):
                    if node.graph is not None:
                        self._graph_owner[node.graph] = function
        return self._graph_owner.get(graph)

    def _infer_model(self) -> dict[str, onnx.TypeProto]:
        """Shape inference over a weight-free serialization of the model.

        Large initializers become typed graph inputs, so no weight is read or copied; the
        model itself is not touched. Subgraphs that ONNX's inference does not enter (those
        of an op whose inference ignores its graph attribute, such as FlexAttention's
        ``score_mod`` in ai.onnx.preview) are then inferred on their own, with the
        outer-scope values they read as typed inputs.
        """
        model, graph = self._model, self._model.graph
        proto = self._model_proto(_weight_free_graph(graph, []))
        proto.functions.extend(ir.serde.serialize_function(f) for f in model.functions.values())
        data_prop = _data_propagation_is_bounded(proto)
        try:
            types = infer_model_types(proto, data_prop=data_prop)
        except Exception as error:
            logger.warning("ONNX shape inference failed: %s", error)
            return {}
        for node in ir.traversal.RecursiveGraphIterator(graph):
            for sub in _subgraphs(node):
                if any(v.name and v.name not in types for n in sub for v in n.outputs):
                    types.update(self._infer_subgraph(sub, types))
        return types

    def _model_proto(self, graph: onnx.GraphProto) -> onnx.ModelProto:
        proto = onnx.ModelProto(ir_version=self._model.ir_version, graph=graph)
        for domain, version in self._model.opset_imports.items():
            proto.opset_import.append(onnx.helper.make_opsetid(domain, version))
        return proto

    def _infer_subgraph(
        self, graph: ir.Graph, known: dict[str, onnx.TypeProto]
    ) -> dict[str, onnx.TypeProto]:
        inner: set[ir.Value] = set()  # values defined in the subgraph or one nested in it
        for sub in (
            graph,
            *(g for node in ir.traversal.RecursiveGraphIterator(graph) for g in _subgraphs(node)),
        ):
            inner.update(sub.inputs)
            inner.update(sub.initializers.values())
            inner.update(v for node in sub for v in node.outputs)
        outer: list[onnx.ValueInfoProto] = []
        seen: set[str] = set()
        for node in ir.traversal.RecursiveGraphIterator(graph):
            for value in node.inputs:
                if value is None or value in inner or not value.name or value.name in seen:
                    continue
                seen.add(value.name)
                type_proto = known.get(value.name)
                if type_proto is None and known_type(value.type):
                    type_proto = onnx.TypeProto()
                    ir.serde.serialize_type_into(type_proto, value.type)  # type: ignore[arg-type]
                if type_proto is not None:
                    outer.append(onnx.helper.make_value_info(value.name, type_proto))
        try:
            proto = self._model_proto(_weight_free_graph(graph, outer))
            inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
        except Exception as error:
            logger.debug("no inference for subgraph '%s': %s", graph.name, error)
            return {}
        return {
            info.name: info.type
            for info in _all_value_infos(inferred.graph)
            if info.type.WhichOneof("value") is not None and info.name not in known
        }

    def _types_in_function(self, function: ir.Function) -> dict[str, ir.TypeProtocol | None]:
        key = function.identifier()
        if key in self._function_types:
            return self._function_types[key]
        self._function_types[key] = {}  # guards recursion; and no inference once frozen
        if self._frozen:
            return {}
        merged: dict[str, ir.TypeProtocol | None] = {}
        for call in self._call_sites(key):
            types = self._infer_call(function, call)
            for name, type_ in types.items():
                if name in merged and merged[name] != type_:
                    merged[name] = None  # call sites disagree: unknown
                else:
                    merged.setdefault(name, type_)
        self._function_types[key] = merged
        return merged

    def _call_sites(self, key: ir.OperatorIdentifier) -> Iterable[ir.Node]:
        graphs: list[ir.Graph | ir.Function] = [self._model.graph]
        graphs.extend(self._model.functions.values())
        for graph in graphs:
            for node in ir.traversal.RecursiveGraphIterator(graph):
                if node.op_identifier() == key:
                    yield node

    def _infer_call(self, function: ir.Function, call: ir.Node) -> dict[str, ir.TypeProtocol]:
        inputs: list[onnx.ValueInfoProto] = []
        for formal, actual in zip(function.inputs, call.inputs):
            type_ = None if actual is None else self.type_of(actual)
            if type_ is None:
                continue
            info = onnx.ValueInfoProto(name=formal.name)
            ir.serde.serialize_type_into(info.type, type_)
            inputs.append(info)
        try:
            function_proto = ir.serde.serialize_function(function)
            graph = onnx.helper.make_graph(
                list(function_proto.node),
                "call",
                inputs,
                [onnx.ValueInfoProto(name=name) for name in function_proto.output],
            )
            attrs = {a.name: a for a in ir.serde.serialize_node(call).attribute}
            _bind_attribute_refs(graph, attrs)
            model = onnx.helper.make_model(graph, opset_imports=list(function_proto.opset_import))
            inferred = onnx.shape_inference.infer_shapes(model)
        except Exception as error:
            logger.debug("no inference for function %s: %s", function.name, error)
            return {}
        return _types_by_name(inferred.graph)


def infer_model_types(
    proto: onnx.ModelProto, *, subgraphs: bool = True, data_prop: bool | None = None
) -> dict[str, onnx.TypeProto]:
    """The types ONNX's shape inference gives the values of ``proto`` (a weight-free
    model: :func:`weight_free_model_proto`), by name, as :class:`TypeOracle` infers them:
    with data propagation when it is bounded (``data_prop``: the caller has told), retried
    without when that fails. ``subgraphs=False``: the caller knows that no node holds a
    graph (nothing is walked for them).

    Raises what inference raises when it fails without data propagation too, and what
    telling whether data propagation is bounded raises.
    """
    if data_prop is None:
        data_prop = _data_propagation_is_bounded(proto, subgraphs=subgraphs)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=data_prop)
    except Exception:
        if not data_prop:
            raise
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=False)
    return {
        info.name: info.type
        for info in _all_value_infos(inferred.graph, subgraphs=subgraphs)
        if info.type.WhichOneof("value") is not None
    }


def weight_free_model_proto(model: onnx.ModelProto) -> onnx.ModelProto:
    """The main graph of ``model`` as :class:`TypeOracle` hands it to inference, without
    building the IR: its inputs, nodes and outputs; initializers of at most
    ``_SMALL_CONSTANT`` elements as they are, larger ones as typed graph inputs (no weight
    is read or copied); no ``value_info``; the same opset imports and ``ir_version``.
    Model-local functions are left out (the caller handles models without them).
    """
    graph = model.graph
    proto = onnx.ModelProto(ir_version=model.ir_version)
    proto.opset_import.extend(model.opset_import)
    weight_free = proto.graph
    weight_free.CopyFrom(graph)  # in C, cheaper than copying the nodes one by one
    for field in _GRAPH_FIELDS_DROPPED:
        weight_free.ClearField(field)
    weight_free.name = graph.name or "graph"
    inputs = {info.name for info in graph.input}
    for tensor in graph.initializer:
        if math.prod(tensor.dims) <= _SMALL_CONSTANT:
            weight_free.initializer.append(tensor)
        elif tensor.name not in inputs:
            info = weight_free.input.add()
            info.name = tensor.name
            info.type.tensor_type.elem_type = tensor.data_type
            shape = info.type.tensor_type.shape
            for dim in tensor.dims:
                shape.dim.add().dim_value = dim
    return proto


# What weight_free_model_proto keeps of a graph: its inputs, nodes and outputs (its name
# is set, its small initializers added back).
_GRAPH_FIELDS_DROPPED = tuple(
    field.name
    for field in onnx.GraphProto.DESCRIPTOR.fields
    if field.name not in ("input", "node", "output")
)


def _data_propagation_is_bounded(model: onnx.ModelProto, *, subgraphs: bool = True) -> bool:
    """No declared dimension product and no small constant exceeds ``_DATA_PROP_LIMIT``."""
    for info in _all_value_infos(model.graph, subgraphs=subgraphs):
        if info.type.HasField("tensor_type"):
            product = 1
            for dim in info.type.tensor_type.shape.dim:
                if dim.HasField("dim_value"):
                    product *= max(dim.dim_value, 1)
            if product > _DATA_PROP_LIMIT:
                return False
    constants = list(model.graph.initializer)
    for graph in iter_graphs(model.graph) if subgraphs else (model.graph,):
        constants.extend(
            attr.t for node in graph.node if node.op_type == "Constant" for attr in node.attribute
        )
    for tensor in constants:
        if tensor.data_type in _INTEGER_TYPES and math.prod(tensor.dims) <= _SMALL_CONSTANT:
            values = onnx.numpy_helper.to_array(tensor)
            if values.size and abs(values).max() > _DATA_PROP_LIMIT:
                return False
    return True


_INTEGER_TYPES = frozenset({onnx.TensorProto.INT32, onnx.TensorProto.INT64})


def _types_by_name(graph: onnx.GraphProto) -> dict[str, ir.TypeProtocol]:
    types: dict[str, ir.TypeProtocol] = {}
    for info in _all_value_infos(graph):
        if info.type.WhichOneof("value") is None:
            continue
        type_ = ir.serde.deserialize_type_proto_for_type(info.type)
        if type_ is not None and known_type(type_):
            types[info.name] = type_
    return types


def _bind_attribute_refs(graph: onnx.GraphProto, attrs: dict[str, onnx.AttributeProto]) -> None:
    for node in graph.node:
        kept = []
        for attr in node.attribute:
            if attr.ref_attr_name:
                actual = attrs.get(attr.ref_attr_name)
                if actual is None:
                    continue
                bound = onnx.AttributeProto()
                bound.CopyFrom(actual)
                bound.name = attr.name
                kept.append(bound)
            else:
                kept.append(attr)
        del node.attribute[:]
        node.attribute.extend(kept)


def _weight_free_graph(graph: ir.Graph, extra_inputs: list[onnx.ValueInfoProto]) -> onnx.GraphProto:
    """``graph`` as a GraphProto whose large initializers are typed inputs instead."""
    proto = onnx.GraphProto(name=graph.name or "graph")
    proto.input.extend(ir.serde.serialize_value(v) for v in graph.inputs)
    proto.input.extend(extra_inputs)
    inputs = set(graph.inputs)
    for value in graph.initializers.values():
        data = small_constant_proto(value)
        if data is not None:
            proto.initializer.append(data)
        elif value not in inputs:
            proto.input.append(ir.serde.serialize_value(value))
    proto.node.extend(ir.serde.serialize_node(node) for node in graph)
    proto.output.extend(ir.serde.serialize_value(v) for v in graph.outputs)
    return proto


def _subgraphs(node: ir.Node) -> Iterable[ir.Graph]:
    for attr in node.attributes.values():
        if attr.type == ir.AttributeType.GRAPH:
            yield attr.as_graph()
        elif attr.type == ir.AttributeType.GRAPHS:
            yield from attr.as_graphs()


def _all_value_infos(
    graph: onnx.GraphProto, *, subgraphs: bool = True
) -> Iterable[onnx.ValueInfoProto]:
    for sub in iter_graphs(graph) if subgraphs else (graph,):
        yield from sub.input
        yield from sub.output
        yield from sub.value_info
