"""Expanding a node through the function body that its ONNX schema defines.

Rules:

* The body is the one ONNX defines for the node's own schema version: a fixed body, or
  a context-dependent body built from the node's attributes and input types (so input
  types must be known).
* Attribute references in the body are bound to the node's attributes, or to the
  schema's default when the node does not set one; unbound references are dropped, as
  the ONNX function-inlining rules say.
* The body's nodes are inserted where the node stood and are read at the body's opset;
  the pass then lowers each of them to the target, so an expansion succeeds only when
  every op of the body can itself be lowered, recursively.
"""

from __future__ import annotations

__all__ = ["bound_attributes", "expand_function_body", "function_body"]

from typing import TYPE_CHECKING, Any

import onnx
import onnx_ir as ir

from onnxscript_ep_passes.lowering import schemas

if TYPE_CHECKING:
    from onnxscript_ep_passes.lowering.context import DowngradeContext


def function_body(ctx: DowngradeContext) -> onnx.FunctionProto:
    """The FunctionProto ONNX defines for ``ctx.node`` at its schema version."""
    node = ctx.node
    schema: Any = schemas.get_schema(node.op_type, ctx.version, node.domain)
    if schema is None:
        ctx.refuse(f"no schema for {node.op_type}-{ctx.version}")
    version = ctx.version
    if schema.has_function:
        body = schema.get_function_with_opset_version(version)
    elif schema.has_context_dependent_function:
        input_types: list[bytes] = []
        for index, value in enumerate(node.inputs):
            proto = onnx.TypeProto()
            if value is not None:
                type_ = ctx.type_of(value)
                if type_ is None:
                    ctx.refuse(
                        f"cannot expand {node.op_type}: the type of input {index} "
                        f"'{value.name}' is unknown, and its function body depends on it"
                    )
                ir.serde.serialize_type_into(proto, type_)
                if value.shape is not None and proto.HasField("tensor_type"):
                    ir.serde.serialize_shape_into(proto, value.shape)
            input_types.append(proto.SerializeToString())
        body = schema.get_context_dependent_function_with_opset_version(
            version, ir.serde.serialize_node(node).SerializeToString(), input_types
        )
    else:
        ctx.refuse(f"{node.op_type}-{version} has no ONNX function body to expand")
    function = onnx.FunctionProto()
    function.ParseFromString(body)
    if not function.node:
        ctx.refuse(f"ONNX gives no function body for this {node.op_type} node")
    _prune_unbuilt_outputs(ctx, function)
    return function


def _prune_unbuilt_outputs(ctx: DowngradeContext, function: onnx.FunctionProto) -> None:
    """Blank the outputs a context-dependent body declares but does not build.

    Attention's body lists all four outputs and builds only those the node has; an output
    the node uses must be built.
    """
    built = {name for inner in function.node for name in inner.output}
    built.update(function.input)
    names = [name if name in built else "" for name in function.output]
    for name, value in zip(names, ctx.node.outputs):
        if not name and (value.uses() or value.is_graph_output()):
            ctx.refuse(
                f"ONNX's function body of {ctx.node.op_type} does not build every output used"
            )
    while names and not names[-1]:
        names.pop()
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


def expand_function_body(ctx: DowngradeContext) -> list[ir.Value | None]:
    """Insert the node's function body before it; return the values for its outputs."""
    node = ctx.node
    proto = function_body(ctx)
    body_opset = next(
        (o.version for o in proto.opset_import if schemas.is_default_domain(o.domain)),
        ctx.version,
    )
    function = ir.serde.deserialize_function(proto)
    attributes = bound_attributes(node, ctx.version)
    mapping: dict[ir.Value, ir.Value | None] = {}
    for index, formal in enumerate(function.inputs):
        mapping[formal] = node.inputs[index] if index < len(node.inputs) else None

    for inner in function:
        attrs: list[ir.Attr] = []
        for attr in inner.attributes.values():
            if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
                ctx.refuse(f"the function body of {node.op_type} holds a subgraph")
            if attr.is_ref():
                actual = attributes.get(attr.ref_attr_name or "")
                if actual is None:
                    continue
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
        ctx.insert(new, body_opset)
    return [mapping.get(out) for out in function.outputs[: len(node.outputs)]]
