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
* :func:`expand_function_body` reads the body into a template (:mod:`.body_template`)
  once per signature (:mod:`.body_cache`); a node with a signature seen before gets a
  copy of that template, with the output types the first copy was inferred to have:
  exactly the nodes the first path builds. Each copy with those types is told to the
  context (:meth:`.BodySite.copied_body`).

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

from collections.abc import Sequence
from typing import Any

import onnx
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import built_outputs, schema_function_body
from onnxscript_ep_passes.lowering import body_cache, schemas
from onnxscript_ep_passes.lowering.body_site import BodySite
from onnxscript_ep_passes.lowering.body_template import (
    BodyTemplate,
    bind_references,
    body_opset,
)
from onnxscript_ep_passes.lowering.types import value_type_proto


def function_body(ctx: BodySite, body_version: int | None = None) -> onnx.FunctionProto:
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
        proto = value_type_proto(value, ctx.type_of)
        if proto is None:
            ctx.refuse(
                f"cannot expand {node.op_type}: the type of input {index} "
                f"'{value.name}' is unknown, and its function body may depend on it"
            )
        input_types.append(proto)
    function = schema_function_body(schema, version, node, input_types)
    if function is None:
        ctx.refuse(f"{node.op_type}-{ctx.version} has no ONNX function body to expand")
    if not function.node:
        ctx.refuse(f"ONNX gives no function body for this {node.op_type} node")
    _prune_unbuilt_outputs(ctx, function)
    return function


def _prune_unbuilt_outputs(ctx: BodySite, function: onnx.FunctionProto) -> None:
    """Drop the trailing outputs the body declares but does not build (see _check_outputs_built)."""
    names = built_outputs(function)
    _check_outputs_built(ctx, names)
    del function.output[:]
    function.output.extend(names)


def _check_outputs_built(ctx: BodySite, names: Sequence[str]) -> None:
    """Each output the node uses must be built by the body, and none skipped in the middle."""
    for index, value in enumerate(ctx.node.outputs):
        built = index < len(names) and names[index]
        if not built and (value.uses() or value.is_graph_output()):
            ctx.refuse(
                f"ONNX's function body of {ctx.node.op_type} does not build every output used"
            )
    if any(not name for name in names):
        ctx.refuse(f"ONNX's function body of {ctx.node.op_type} skips an output in the middle")


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
    ctx: BodySite,
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
    attrs = bind_references(ctx, inner, attributes)
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


def expand_function_body(ctx: BodySite, body_version: int | None = None) -> list[ir.Value | None]:
    """Insert the node's function body before it; return the values for its outputs.

    ``body_version``: as for :func:`function_body`. A node whose signature was expanded
    before gets a copy of that body's template (:mod:`.body_cache`): the same nodes,
    attributes and types, without asking ONNX for the body or inferring types again.
    """
    key = body_cache.expansion_key(ctx, body_version)
    template = body_cache.lookup(key)
    if template is not None:
        _check_outputs_built(ctx, template.built_outputs)
        built, values, exact = template.insert(ctx)
        if exact:
            ctx.copied_body(template, built)
        return values
    proto = function_body(ctx, body_version)
    opset = body_opset(proto, ctx.version if body_version is None else body_version)
    attributes = bound_attributes(ctx.node, ctx.version)
    template = BodyTemplate.from_proto(ctx, proto, opset, attributes)
    built, values, _ = template.insert(ctx)
    template.record_types(built)
    if template.typed:  # the types it recorded are this copy's
        ctx.copied_body(template, built)
    body_cache.store(key, template)
    return values
