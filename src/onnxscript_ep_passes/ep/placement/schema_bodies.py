"""The ONNX function bodies of schemas, as ORT inlines them for an op no EP has a kernel
for (:mod:`.flatten`'s rule).

Rules:

- A body is built from the node's schema at its version, its attributes, its inputs'
  types and shapes and which inputs and outputs it has; it is built once per distinct
  such key and shared by the calls that meet it (it is never edited).
- While :mod:`.opset_reads` records, each body built (or found) is noted with the body as
  placement reads it (its serialized function without its ai.onnx import, which the
  calling graph's overrides) and the ai.onnx ops of its nodes, to be built again with
  another schema.
"""

from __future__ import annotations

__all__ = ["cached_schema_body"]

import logging
from collections.abc import Hashable, Sequence

import onnx
import onnx.defs
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import (
    attributes_key,
    built_outputs,
    schema_function_body,
)
from onnxscript_ep_passes.ep.memo import BoundedCache, shape_key
from onnxscript_ep_passes.ep.names import normalize_domain
from onnxscript_ep_passes.ep.placement import opset_reads
from onnxscript_ep_passes.ep.placement.kernels import type_proto

logger = logging.getLogger(__name__)

# Schema bodies ORT inlines, by what builds them (never edited: shared between calls).
_BODIES: BoundedCache[Hashable, tuple[ir.Function | None]] = BoundedCache(limit=512)


def cached_schema_body(
    node: ir.Node, schema: onnx.defs.OpSchema, dtypes: Sequence[str | None]
) -> ir.Function | None:
    """:func:`_schema_body`, cached by what the body's builder reads: the op, its
    attributes, each input's type and shape, and which inputs and outputs the node has
    (a value without a name is absent to it)."""
    attrs = attributes_key(node)
    key = (
        None
        if attrs is None
        else (
            node.op_type,
            node.domain,
            schema.since_version,
            attrs,
            tuple(
                None if v is None else (bool(v.name), dtype, shape_key(v.shape))
                for v, dtype in zip(node.inputs, dtypes)
            ),
            tuple(bool(out.name) for out in node.outputs),
        )
    )
    body = _BODIES.fetch(key, lambda: (_schema_body(node, schema, dtypes),))[0]
    reads = opset_reads.active()
    if reads is not None:
        reads.note("body", key, lambda: _body_call(node, tuple(dtypes), body))
    return body


def _body_call(
    node: ir.Node, dtypes: tuple[str | None, ...], body: ir.Function | None
) -> opset_reads.Call:
    """What :func:`cached_schema_body` builds for ``node`` (:func:`_body_spelled`), to be
    built again with another schema (:mod:`.opset_reads`); the call names the ai.onnx ops
    of the body (they are placed at the model's opset too)."""

    def again(opset: int, schema: onnx.defs.OpSchema, since: int) -> bytes | None:
        return _body_spelled(cached_schema_body(node, schema, dtypes))

    ops = frozenset() if body is None else frozenset(_default_domain_ops(body))
    return opset_reads.Call(node.op_type, node.domain, _body_spelled(body), again, ops)


def _default_domain_ops(body: ir.Function) -> set[str]:
    nodes: list[ir.Node] = list(body)
    ops = set()
    while nodes:
        node = nodes.pop()
        if node.domain in ("", "ai.onnx"):
            ops.add(node.op_type)
        for attr in node.attributes.values():
            if isinstance(attr, ir.Attr) and attr.type == ir.AttributeType.GRAPH:
                nodes.extend(attr.as_graph())
            elif isinstance(attr, ir.Attr) and attr.type == ir.AttributeType.GRAPHS:
                nodes.extend(n for g in attr.as_graphs() for n in g)
    return ops


def _body_spelled(body: ir.Function | None) -> bytes | None:
    """``body`` as placement reads it: its serialized function without its ai.onnx import,
    which the calling graph's overrides (:meth:`Flattener._inline`); None for no body."""
    if body is None:
        return None
    proto = ir.serde.serialize_function(body)
    kept = [o for o in proto.opset_import if normalize_domain(o.domain) != ""]
    del proto.opset_import[:]
    proto.opset_import.extend(kept)
    return proto.SerializeToString(deterministic=True)


def _schema_body(
    node: ir.Node, schema: onnx.defs.OpSchema, dtypes: Sequence[str | None]
) -> ir.Function | None:
    """The ONNX function body of ``node``'s schema, as ORT would inline it, or None.

    ``dtypes`` are the input types (``tensor(float)``) known to the builder.
    """
    types: list[onnx.TypeProto | None] = []
    for value, dtype in zip(node.inputs, dtypes):
        if value is None:
            types.append(None)
            continue
        known = type_proto(dtype) if dtype else None
        if known is None:
            return None
        if value.shape is not None and known.HasField("tensor_type"):
            ir.serde.serialize_shape_into(known, value.shape)
        types.append(known)
    try:
        function = schema_function_body(schema, schema.since_version, node, types)
    except Exception as error:
        logger.debug("no function body for %s: %s", node.op_type, error)
        return None
    if function is None or not function.node:
        return None
    outputs = built_outputs(function)
    if "" in outputs:
        return None
    del function.output[:]
    function.output.extend(outputs)
    function.name = function.name or node.op_type
    return ir.serde.deserialize_function(function)
