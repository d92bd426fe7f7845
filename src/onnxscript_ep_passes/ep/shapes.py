"""Shapes for values a model leaves without one, inferred node by node (model untouched).

Exports declare the shape of nearly every value, but nodes built by a rewrite (a lowering,
a function-body expansion) or hand-made models often do not. The cost estimate needs
those shapes; this module infers them without changing the model. Rules:

1. Nodes are visited in graph order (subgraphs included); a node with an output of
   unknown shape (or type) whose inputs all have a known type gets ONNX's per-node
   inference (``onnx.shape_inference.infer_node_outputs``) from its schema at the
   graph's opset, with symbolic dimensions kept as names.
2. Constant inputs of at most ``max_elements`` elements (initializers, ``Constant``
   outputs) are passed as data, so ``Reshape``/``Expand``/``Slice`` with constant
   arguments get exact shapes.
3. What inference cannot tell stays unknown (the estimate then guesses, see
   :mod:`~onnxscript_ep_passes.ep.compute`). Nodes with graph attributes and ops without
   a schema are skipped. Inference is best effort: a failure is logged at DEBUG.
4. A node's inference is cached by everything it reads (:mod:`~onnxscript_ep_passes.ep.memo`):
   op, domain, opset, attribute values, and each input's type, shape and constant bytes
   (a SHA-256 of them for constants over 256 bytes).
   Inferred shapes are frozen, and shared by the values inferred alike.
"""

from __future__ import annotations

__all__ = ["infer_missing_shapes", "small_constant"]

import hashlib
import logging
from collections.abc import Hashable, Mapping

import onnx
import onnx.defs
import onnx.helper
import onnx.shape_inference
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import attributes_key, get_schema
from onnxscript_ep_passes.ep.memo import BoundedCache, shape_key
from onnxscript_ep_passes.ep.placement import opset_reads

logger = logging.getLogger(__name__)

Inferred = tuple[ir.DataType | None, ir.Shape | None]
# Per output: None (no tensor type inferred), else (element type or None, shape or None).
_Outputs = tuple[tuple[ir.DataType | None, ir.Shape | None] | None, ...]
_INFERRED: BoundedCache[Hashable, _Outputs] = BoundedCache(limit=1 << 14)
_INLINE_BYTES = 256
# An input: its type, shape and, for a small constant, its tensor.
_Input = tuple[ir.DataType, ir.Shape | None, ir.TensorProtocol | None]
_GRAPH_ATTRIBUTES = (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)


def _type_proto(dtype: ir.DataType, shape: ir.Shape | None) -> onnx.TypeProto:
    proto = onnx.helper.make_tensor_type_proto(int(dtype), None)
    if shape is not None:
        ir.serde.serialize_shape_into(proto, shape)
    return proto


def small_constant(value: ir.Value | None, max_elements: int) -> ir.TensorProtocol | None:
    """The constant ``value`` holds (an initializer, a ``Constant`` output), when it has
    at most ``max_elements`` elements; else None."""
    if value is None:
        return None
    tensor = value.const_value
    if tensor is None:
        tensor = _constant_node_tensor(value)
    if tensor is None or tensor.size > max_elements:
        return None
    return tensor


def _constant_node_tensor(value: ir.Value) -> ir.TensorProtocol | None:
    """The tensor of the ``Constant`` node producing ``value``, as
    ``ir.convenience.get_const_tensor`` reads it; the common ``value`` attribute is read
    directly (``Attr.as_tensor`` checks a runtime protocol: slow in a loop over a model)."""
    node = value.producer()
    if node is None or node.op_type != "Constant" or node.domain != "":
        return None
    attr = node.attributes.get("value")
    if (
        len(node.attributes) == 1
        and len(node.outputs) == 1
        and isinstance(attr, ir.Attr)
        and not attr.is_ref()
        and attr.type == ir.AttributeType.TENSOR
    ):
        tensor: ir.TensorProtocol = attr.value
        return tensor
    try:
        return ir.convenience.get_const_tensor(value)
    except ValueError:
        return None


def _infer_node(
    node: ir.Node, opsets: Mapping[str, int], known: dict[ir.Value, Inferred], max_elements: int
) -> None:
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    opset = opsets.get(domain)
    if opset is None:
        return
    schema = get_schema(node.op_type, opset, domain)
    if schema is None:
        return
    inputs: list[_Input | None] = []
    spelled: list[Hashable] = []  # each input as the cache key reads it
    for value in node.inputs:
        if value is None:
            inputs.append(None)
            spelled.append(None)
            continue
        found = known.get(value)
        dtype, shape = (value.dtype, value.shape) if found is None else found
        if dtype is None:
            return
        const = small_constant(value, max_elements)
        inputs.append((dtype, shape, const))
        spelled.append((dtype, shape_key(shape), None if const is None else _tensor_key(const)))
    attrs = attributes_key(node)
    key = (
        None
        if attrs is None
        else (node.op_type, node.domain, opset, len(node.outputs), attrs, tuple(spelled))
    )
    outputs = _INFERRED.fetch(key, lambda: _run_inference(node, schema, opset, inputs))
    reads = opset_reads.active()
    if reads is not None:
        reads.note("cost", key, lambda: _cost_call(node, domain, inputs, outputs))
    for value, inferred in zip(node.outputs, outputs):
        if inferred is None:
            continue
        elem_type, inferred_shape = inferred
        dtype = elem_type if elem_type is not None else value.dtype
        shape = value.shape if value.shape is not None else inferred_shape
        known[value] = (dtype, shape)


def _tensor_key(tensor: ir.TensorProtocol | None) -> Hashable:
    """What ONNX reads of a constant input: its type, shape and bytes (past
    ``_INLINE_BYTES``, their SHA-256, so that the cache stays small)."""
    if tensor is None:
        return None
    if tensor.dtype == ir.DataType.STRING:  # the bytes of strings do not tell their bounds
        data = ir.serde.serialize_tensor(tensor).SerializeToString()
    else:
        data = tensor.tobytes()
    if len(data) > _INLINE_BYTES:
        data = hashlib.sha256(data).digest()
    return (tensor.dtype, tuple(tensor.shape), data)


def _cost_call(
    node: ir.Node, domain: str, inputs: list[_Input | None], outputs: _Outputs
) -> opset_reads.Call:
    """:func:`_infer_node`'s call, on these inputs (their shapes copied: a value's shape
    may be replaced later), to be made again at another opset (:mod:`.placement.opset_reads`)."""
    kept = [
        None if i is None else (i[0], None if i[1] is None else ir.Shape(i[1].dims), i[2])
        for i in inputs
    ]

    def again(opset: int, schema: onnx.defs.OpSchema, since: int) -> _Outputs:
        return _run_inference(node, schema, opset, list(kept))

    return opset_reads.Call(node.op_type, domain, outputs, again)


def _run_inference(
    node: ir.Node, schema: onnx.defs.OpSchema, opset: int, inputs: list[_Input | None]
) -> _Outputs:
    """ONNX's per-node inference of ``node`` with these input types, shapes and data."""
    names: list[str] = []
    types: dict[str, onnx.TypeProto] = {}
    data: dict[str, onnx.TensorProto] = {}
    for index, known_input in enumerate(inputs):
        if known_input is None:
            names.append("")
            continue
        dtype, shape, const = known_input
        name = f"in{index}"
        names.append(name)
        types[name] = _type_proto(dtype, shape)
        if const is not None:
            data[name] = ir.serde.serialize_tensor(const)
    outputs = [f"out{i}" for i in range(len(node.outputs))]
    proto = onnx.helper.make_node(node.op_type, names, outputs, domain=node.domain)
    for attr in node.attributes.values():
        if isinstance(attr, ir.Attr) and not attr.is_ref():
            proto.attribute.append(ir.serde.serialize_attribute(attr))
    try:
        result = onnx.shape_inference.infer_node_outputs(
            schema,
            proto,
            types,
            data,
            opset_imports=[onnx.helper.make_opsetid(node.domain, opset)],
        )
    except Exception as error:  # best effort (rule 3)
        logger.debug("no shape inference for %s (%s): %s", node.name, node.op_type, error)
        return tuple(None for _ in outputs)
    found: list[tuple[ir.DataType | None, ir.Shape | None] | None] = []
    for name in outputs:
        inferred = result.get(name)
        if inferred is None or not inferred.HasField("tensor_type"):
            found.append(None)
            continue
        tensor_type = inferred.tensor_type
        shape = None
        if tensor_type.HasField("shape"):
            shape = ir.Shape(
                [
                    d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                    for d in tensor_type.shape.dim
                ],
                frozen=True,
            )
        elem_type = tensor_type.elem_type
        found.append((ir.DataType(elem_type) if elem_type else None, shape))
    return tuple(found)


def infer_missing_shapes(
    model: ir.Model, *, max_elements: int = 1024
) -> dict[ir.Value, tuple[ir.DataType | None, ir.Shape | None]]:
    """``{value: (dtype, shape)}`` for the values of ``model`` left without a shape.

    The model is not modified (module docstring).
    """
    known: dict[ir.Value, Inferred] = {}
    opsets = {("" if k == "ai.onnx" else k): v for k, v in model.opset_imports.items()}
    _infer_graph(model.graph, opsets, known, max_elements)
    return known


def _infer_graph(
    graph: ir.Graph, opsets: Mapping[str, int], known: dict[ir.Value, Inferred], max_elements: int
) -> None:
    """Rule 1 on ``graph``: its nodes in order, a node's subgraphs right after it."""
    for node in graph:
        attributes = node.attributes.data
        graphs = (
            [a for a in attributes.values() if a.type in _GRAPH_ATTRIBUTES] if attributes else None
        )
        if graphs:  # the node itself is skipped (rule 3)
            for attr in graphs:
                if isinstance(attr, ir.Attr) and attr.value is not None:
                    subgraphs = attr.value if attr.type == ir.AttributeType.GRAPHS else [attr.value]
                    for subgraph in subgraphs:
                        _infer_graph(subgraph, opsets, known, max_elements)
            continue
        for out in node.outputs:
            if out.shape is None or out.dtype is None:
                _infer_node(node, opsets, known, max_elements)
                break
