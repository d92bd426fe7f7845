"""A node's ONNX function body, built through a downgrade context.

Rules:

* The body is the one ONNX defines for the node's own schema version (or for the
  ``body_version`` asked for): a fixed body, or a context-dependent body built from the
  node's attributes and input types (so input types must be known).
* Attribute references in the body are bound to the node's attributes, or to the
  schema's default when the node does not set one; unbound references are dropped, as
  the ONNX function-inlining rules say.
* The body's nodes are built through the context (:meth:`DowngradeContext.insert`), where
  the node stands, read at the body's opset; a body node holding a subgraph is refused.

This module needs the context only by its methods (its type is imported for checking
alone), so the context can offer :meth:`DowngradeContext.expand_function` without an
import cycle. Expanding a node in place at the model's opset is :mod:`.expansion`.
"""

from __future__ import annotations

__all__ = [
    "bound_attributes",
    "copy_body_node",
    "expand_function_body",
    "function_body",
]

from typing import TYPE_CHECKING, Any

import onnx
import onnx_ir as ir

from onnxscript_ep_passes._onnx import built_outputs, schema_function_body
from onnxscript_ep_passes.lowering import schemas

if TYPE_CHECKING:
    from onnxscript_ep_passes.lowering.context import DowngradeContext


def function_body(ctx: DowngradeContext, body_version: int | None = None) -> onnx.FunctionProto:
    """The FunctionProto ONNX defines for ``ctx.node`` at its schema version.

    ``body_version`` asks for the body ONNX writes for that opset instead (see
    :func:`function_body_version`); by default, the one for the schema's since_version.
    """
    node = ctx.node
    schema: Any = schemas.get_schema(node.op_type, ctx.version, node.domain)
    if schema is None:
        ctx.refuse(f"no schema for {node.op_type}-{ctx.version}")
    version = ctx.version if body_version is None else body_version
    input_types: list[onnx.TypeProto | None] = []
    for index, value in enumerate(node.inputs):
        if value is None:
            input_types.append(None)
            continue
        type_ = ctx.type_of(value)
        if type_ is None:
            ctx.refuse(
                f"cannot expand {node.op_type}: the type of input {index} "
                f"'{value.name}' is unknown, and its function body may depend on it"
            )
        proto = onnx.TypeProto()
        ir.serde.serialize_type_into(proto, type_)
        if value.shape is not None and proto.HasField("tensor_type"):
            ir.serde.serialize_shape_into(proto, value.shape)
        input_types.append(proto)
    function = schema_function_body(schema, version, node, input_types)
    if function is None:
        ctx.refuse(f"{node.op_type}-{ctx.version} has no ONNX function body to expand")
    if not function.node:
        ctx.refuse(f"ONNX gives no function body for this {node.op_type} node")
    _prune_unbuilt_outputs(ctx, function)
    return function


def _prune_unbuilt_outputs(ctx: DowngradeContext, function: onnx.FunctionProto) -> None:
    """Blank the outputs the body declares but does not build; each used one must be built."""
    names = built_outputs(function)
    for index, value in enumerate(ctx.node.outputs):
        built = index < len(names) and names[index]
        if not built and (value.uses() or value.is_graph_output()):
            ctx.refuse(
                f"ONNX's function body of {ctx.node.op_type} does not build every output used"
            )
    if any(not name for name in names):
        ctx.refuse(f"ONNX's function body of {ctx.node.op_type} skips an output in the middle")
    del function.output[:]
    function.output.extend(names)


def bound_attributes(node: ir.Node, version: int) -> dict[str, ir.Attr]:
    """The node's attributes, with the schema's defaults for those it does not set."""
    bound = dict(node.attributes)
    schema = schemas.get_schema(node.op_type, version, node.domain)
    assert schema is not None
    for name, attr_def in schema.attributes.items():
        default = attr_def.default_value
        if name not in bound and default.type != onnx.AttributeProto.UNDEFINED:
            bound[name] = ir.serde.deserialize_attribute(default)
    return bound


def copy_body_node(
    ctx: DowngradeContext,
    inner: ir.Node,
    mapping: dict[ir.Value, ir.Value | None],
    attributes: dict[str, ir.Attr],
    opset: int,
) -> ir.Node:
    """Insert a copy of function-body node ``inner`` before ``ctx.node``, read at ``opset``.

    Inputs are read through ``mapping`` (body value -> graph value), which then maps the
    copy's outputs too; attribute references are bound to ``attributes`` (unbound ones
    dropped). A node holding a subgraph is refused.
    """
    attrs: list[ir.Attr] = []
    for attr in inner.attributes.values():
        if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
            ctx.refuse(
                f"the function body of {ctx.node.op_type} holds a subgraph ({inner.op_type})"
            )
        if attr.is_ref():
            actual = attributes.get(attr.ref_attr_name or "")
            if actual is not None:
                attrs.append(ir.Attr(attr.name, actual.type, actual.value))
        else:
            attrs.append(attr)
    new = ir.Node(
        inner.domain,
        inner.op_type,
        [None if v is None else mapping[v] for v in inner.inputs],
        attrs,
        num_outputs=len(inner.outputs),
        name=ctx.fresh_name(inner.op_type),
    )
    for old, out in zip(inner.outputs, new.outputs):
        mapping[old] = out
    ctx.insert(new, opset)
    return new


def expand_function_body(
    ctx: DowngradeContext, body_version: int | None = None
) -> list[ir.Value | None]:
    """Insert the node's function body before it; return the values for its outputs.

    ``body_version``: as for :func:`function_body`.
    """
    node = ctx.node
    proto = function_body(ctx, body_version)
    body_opset = next(
        (o.version for o in proto.opset_import if schemas.is_default_domain(o.domain)),
        ctx.version if body_version is None else body_version,
    )
    function = ir.serde.deserialize_function(proto)
    attributes = bound_attributes(node, ctx.version)
    mapping: dict[ir.Value, ir.Value | None] = {}
    for index, formal in enumerate(function.inputs):
        mapping[formal] = node.inputs[index] if index < len(node.inputs) else None

    for inner in function:
        copy_body_node(ctx, inner, mapping, attributes, body_opset)
    return [mapping.get(out) for out in function.outputs[: len(node.outputs)]]
