"""Output types of one node built in a model, from ONNX's per-node inference.

Rules:

* :func:`infer_node_output_types` fills in only outputs that have no type (and a shape
  only where there is none), from ``onnx.shape_inference.infer_node_outputs`` given the
  node's input types and shapes and its small constant inputs (:mod:`.types`); a failed
  inference leaves them untyped (an unknown type is refused later).
* With a memo (a :class:`.TypeOracle`'s ``node_types``), what inference gave is kept per
  node signature (:func:`_signature`): everything per-node inference reads, so a node
  with a kept signature gets equal, fresh type objects and equal shapes (a frozen shape,
  as inference gives, shared) without inferring; the adapters that build the same nodes
  for every node like theirs (Attention-24's mask padding) then infer once per shape.
  Nodes with an attribute other than ints and strings, an input type other than a
  plain tensor type, or a small constant not held as an ``ir.Tensor`` are not memoized.
"""

from __future__ import annotations

__all__ = ["infer_node_output_types"]

import logging
from collections.abc import Callable

import onnx
import onnx.shape_inference
import onnx_ir as ir

from onnxscript_ep_passes.lowering import schemas
from onnxscript_ep_passes.lowering.types import (
    holds_small_constant,
    known_type,
    small_constant_proto,
    value_type_proto,
)

logger = logging.getLogger(__name__)


def infer_node_output_types(
    node: ir.Node,
    opset: int,
    type_of: Callable[[ir.Value], ir.TypeProtocol | None] = lambda value: value.type,
    memo: dict[object, _Inferred] | None = None,
) -> None:
    """Fill in the type and shape of ``node``'s outputs that have none, when inferable.

    ``type_of`` gives the types of inputs that declare none (e.g. a TypeOracle's).
    ``memo`` keeps what inference gave per node signature (:func:`_signature`: all that
    ONNX's per-node inference reads); a node with a kept signature gets equal, fresh
    types and equal shapes without inferring.
    """
    if all(known_type(out.type) for out in node.outputs):
        return
    key = None if memo is None else _signature(node, opset, type_of)
    inferred = None if key is None or memo is None else memo.get(key)
    if inferred is None:
        inferred = _infer_outputs(node, opset, type_of)
        if key is not None and memo is not None:
            memo[key] = inferred
    for value, result in zip(node.outputs, inferred):
        if result is None or known_type(value.type):
            continue
        value.type = _copy_type(result[0])
        if value.shape is None:
            value.shape = _copy_shape(result[1])


# Per output of a node: the type and shape inference gave it (None: none inferred).
_Inferred = tuple[tuple[ir.TypeProtocol, ir.Shape | None] | None, ...]

_PLAIN_ATTRIBUTES = frozenset(
    (ir.AttributeType.INT, ir.AttributeType.INTS, ir.AttributeType.STRING, ir.AttributeType.STRINGS)
)


def _infer_outputs(
    node: ir.Node, opset: int, type_of: Callable[[ir.Value], ir.TypeProtocol | None]
) -> _Inferred:
    """What ONNX's per-node inference gives ``node``'s outputs."""
    nothing: _Inferred = (None,) * len(node.outputs)
    schema = schemas.get_schema(node.op_type, opset, node.domain)
    if schema is None:
        return nothing
    node_proto = ir.serde.serialize_node(node)
    input_types: dict[str, onnx.TypeProto] = {}
    input_data: dict[str, onnx.TensorProto] = {}
    for value, name in zip(node.inputs, node_proto.input):
        if value is None or not name:
            continue
        type_proto = value_type_proto(value, type_of)
        if type_proto is not None:
            input_types[name] = type_proto
        data = small_constant_proto(value)
        if data is not None:
            input_data[name] = data
    try:
        inferred = onnx.shape_inference.infer_node_outputs(
            schema,
            node_proto,
            input_types,
            input_data,
            opset_imports=[onnx.helper.make_opsetid("", opset)],
        )
    except Exception as error:  # inference is best effort: an unknown type is refused later
        logger.debug("no type inference for %s: %s", node.op_type, error)
        return nothing
    results: list[tuple[ir.TypeProtocol, ir.Shape | None] | None] = []
    for name in node_proto.output:
        proto = inferred.get(name)
        type_ = None if proto is None else ir.serde.deserialize_type_proto_for_type(proto)
        if proto is None or type_ is None:
            results.append(None)
        else:
            results.append((type_, ir.serde.deserialize_type_proto_for_shape(proto)))
    return tuple(results)


def _signature(
    node: ir.Node, opset: int, type_of: Callable[[ir.Value], ir.TypeProtocol | None]
) -> object | None:
    """All that per-node inference reads of ``node`` (None: a node not memoized).

    The schema (domain, op, opset), the output count, the attributes (plain ones only:
    ints and strings), and per input whether it is given, its type (a plain tensor type
    only) and shape with their denotations, and the value of a small constant (an
    ``ir.Tensor`` only, not of strings). Names are not read: inference gives the same
    types whatever the values are called.

    A small constant held in a data file (an ``ir.ExternalTensor``: a decoder's norm
    scales) reaches inference as a reference (``small_constant_proto``): its type and
    dims, a name and where its bytes lie, never the bytes. ONNX's inference refuses to
    read the data of such a tensor ("Cannot parse data from external tensors"), which
    gives no inferred type, so what it gives cannot depend on the name or the place:
    the key holds the element type and dims only (the 1,249 RMSNormalization scales of
    the 40k-node decoder, each in its own place, share one inference).
    """
    attributes = []
    for attr in node.attributes.values():
        if attr.type not in _PLAIN_ATTRIBUTES or attr.is_ref():
            return None
        value = attr.value
        attributes.append(
            (attr.name, attr.type, tuple(value) if isinstance(value, list) else value)
        )
    inputs: list[object] = []
    for value in node.inputs:
        if value is None or not value.name:
            inputs.append(None)
            continue
        type_ = value.type if known_type(value.type) else type_of(value)
        if type_ is not None and type(type_) is not ir.TensorType:
            return None
        shape = value.shape
        shape_key = None
        if type_ is not None and shape is not None:
            shape_key = (
                tuple(d if isinstance(d, int) else d.value for d in shape.dims),
                tuple(shape.get_denotation(i) for i in range(len(shape))),
            )
        data: object = None
        tensor = value.const_value
        if tensor is not None and holds_small_constant(value):
            if tensor.dtype == ir.DataType.STRING:
                return None
            if type(tensor) is ir.ExternalTensor:  # inference is given a reference (below)
                data = ("external", tensor.dtype, tuple(tensor.shape.numpy()))
            elif type(tensor) is ir.Tensor:
                data = (tensor.dtype, tuple(tensor.shape.numpy()), tensor.tobytes())
            else:
                return None
        type_key = None if type_ is None else (type_.dtype, type_.denotation)
        inputs.append((type_key, shape_key, data))
    return (
        node.domain,
        node.op_type,
        opset,
        len(node.outputs),
        tuple(attributes),
        tuple(inputs),
    )


def _copy_type(type_: ir.TypeProtocol) -> ir.TypeProtocol:
    """An equal type object of its own (``Value.dtype = ...`` changes a type in place)."""
    if type(type_) is ir.TensorType:
        return ir.TensorType(type_.dtype, denotation=type_.denotation)
    copy = ir.serde.deserialize_type_proto_for_type(_type_proto(type_))
    assert copy is not None
    return copy


def _type_proto(type_: ir.TypeProtocol) -> onnx.TypeProto:
    proto = onnx.TypeProto()
    ir.serde.serialize_type_into(proto, type_)
    return proto


def _copy_shape(shape: ir.Shape | None) -> ir.Shape | None:
    """A frozen shape is shared (onnx-ir's frozen shapes are for sharing); others copied."""
    if shape is None or shape.frozen:
        return shape
    return shape.copy()
