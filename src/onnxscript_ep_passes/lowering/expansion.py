"""Expanding a node through the function body that its ONNX schema defines.

Rules:

* The body is built as :mod:`.function_body` says (the node's own schema version,
  attribute references bound to the node's attributes or the schema's defaults).
* The body's nodes are inserted where the node stood and are read at the body's opset;
  the pass then lowers each of them to the target, so an expansion succeeds only when
  every op of the body can itself be lowered, recursively.
* :func:`expand_node` expands one node in place *at the model's opset* (no lowering): it
  takes the newest body ONNX writes for an opset not above the model's, and keeps it only
  when every body node means the same at the model's opset as at the body's (each schema
  step in between only widens types, or only adds an input or attribute whose absence
  keeps the old meaning, see ``_COMPATIBLE_STEPS``). Otherwise it refuses and the model
  is left unchanged.
"""

from __future__ import annotations

__all__ = ["expand_node", "function_body_version", "meaning_changed"]

import functools
from typing import Any

import onnx_ir as ir

from onnxscript_ep_passes.lowering import schemas
from onnxscript_ep_passes.lowering.context import DowngradeContext, NodeNames, NodeRefusedError
from onnxscript_ep_passes.lowering.function_body import expand_function_body
from onnxscript_ep_passes.lowering.journal import discard
from onnxscript_ep_passes.lowering.opset_imports import require_default_opset
from onnxscript_ep_passes.lowering.types import TypeOracle

# Schema steps that add an optional input or an attribute whose default (used when the
# node does not set it) keeps the previous meaning for every type the previous schema
# allowed: a node written against the older schema means the same after the step.
_COMPATIBLE_STEPS = frozenset(
    {
        ("Attention", 24),  # + optional input nonpad_kv_seqlen
        ("Attention", 25),  # + left/right_window_size, default -1: no window
        ("AveragePool", 19),  # + dilations, default 1
        ("Cast", 19),  # + saturate: only float8 targets
        ("Cast", 24),  # + round_mode: only float8e8m0 targets
        ("CastLike", 19),
        ("CastLike", 24),
        ("Split", 18),  # + num_outputs, unset: split input or equal parts as before
    }
)


@functools.cache
def function_body_version(op_type: str, opset: int, domain: str = "") -> int | None:
    """The opset of the newest ONNX function body of ``op_type`` usable at ``opset``.

    None when the op's schema at ``opset`` defines no function body.
    """
    schema: Any = schemas.get_schema(op_type, opset, domain)
    if schema is None:
        return None
    versions = [
        *schema.function_opset_versions,
        *schema.context_dependent_function_opset_versions,
    ]
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def meaning_changed(node: ir.Node, body_opset: int, opset: int) -> str | None:
    """Why ``node``, written at ``body_opset``, may mean something else at ``opset`` (or None)."""
    if not schemas.is_default_domain(node.domain) or body_opset >= opset:
        return None
    low = schemas.since_version(node.op_type, body_opset, node.domain)
    high = schemas.since_version(node.op_type, opset, node.domain)
    if low is None or high is None:
        return f"{node.op_type} has no schema at opset {body_opset} or {opset}"
    version = high
    while version > low:
        diff = schemas.step_diff(node.op_type, version, node.domain)
        widened = diff.kind == "type_only" and not diff.removed_types
        if not widened and (node.op_type, version) not in _COMPATIBLE_STEPS:
            return (
                f"{node.op_type}-{version} changed more than types ({diff.summary}): the body "
                f"written at opset {body_opset} cannot be read at opset {opset}"
            )
        if diff.previous is None:
            break
        version = diff.previous
    return None


class _InPlaceExpansion(DowngradeContext):
    """A context that names the body's nodes ``<node>/expanded_<op>_<n>``."""

    def fresh_name(self, op_type: str) -> str:
        return self._names.fresh(f"{self.node.name or self.node.op_type}/expanded_{op_type}")


def expand_node(
    model: ir.Model,
    node: ir.Node,
    opset: int | None = None,
    *,
    oracle: TypeOracle | None = None,
    names: NodeNames | None = None,
) -> list[ir.Node]:
    """Replace ``node`` in place by its ONNX function body, at the model's opset.

    Args:
        model: The model holding ``node`` (its main graph or a subgraph).
        node: An ai.onnx node whose schema has a function body.
        opset: The ai.onnx opset ``node`` is read at; default: the model's.
        oracle: Types of values that declare none (built from ``model`` when not given).
        names: Where the body's node names come from (default: the names of ``node``'s
            graph, read anew; :class:`~onnxscript_ep_passes.lowering.context.NameIndex`
            reads them once for many nodes).

    Returns:
        The nodes inserted, in graph order. Outputs of the node keep their names.

    Raises:
        NodeRefusedError: no body, a body that needs an unknown input type, a body node
            whose meaning differs at ``opset``, or an output the body does not build.
            The model is then unchanged.
    """
    graph = node.graph
    if graph is None:
        raise ValueError(f"node '{node.name}' is not in a graph")
    if opset is None:
        opset = require_default_opset(model)
    since = schemas.since_version(node.op_type, opset, node.domain)
    if since is None:
        raise NodeRefusedError(f"no ONNX schema for {node.op_type} at opset {opset}")
    body_version = function_body_version(node.op_type, opset, node.domain)
    if body_version is None:
        raise NodeRefusedError(f"{node.op_type}-{since} has no ONNX function body")
    previous = schemas.since_version(node.op_type, since - 1, node.domain) if since > 1 else None
    ctx = _InPlaceExpansion(node, since, previous, opset, oracle or TypeOracle(model), names)
    try:
        values = expand_function_body(ctx, body_version)
        for built, built_opset in ctx.built:
            problem = meaning_changed(built, built_opset, opset)
            if problem is not None:
                ctx.refuse(problem)
        built_nodes = {n for n, _ in ctx.built}
        replacements: list[tuple[ir.Value, ir.Value]] = []
        for index, old in enumerate(node.outputs):
            new = values[index] if index < len(values) else None
            if new is None:
                if old.uses() or old.is_graph_output():
                    ctx.refuse(f"the body of {node.op_type} gives no value for output {index}")
                continue
            producer = new.producer()
            if producer is None or producer not in built_nodes:
                # An output that is a body input or constant gets a node of its own.
                new = ctx.op("Identity", [new], opset=opset)
            replacements.append((old, new))
    except NodeRefusedError:
        discard([n for n, _ in ctx.built])
        raise
    for old, new in replacements:
        name = old.name
        if new.type is None:
            new.type = old.type
        if new.shape is None:
            new.shape = old.shape
        ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
        old.name = None
        new.name = name
    graph.remove(node, safe=True)
    return [n for n, _ in ctx.built]
