"""Graph loading, the first phase of placement: flatten a model the way ORT loads it.

Rules:

- ``Constant`` nodes become initializers (they are never placed).
- Calls to model-local functions are inlined, named ``_inlfunc_<function>_<node>`` as ORT
  names them. Each inlined node keeps the values of the function's attribute parameters
  at its call (``call_attributes``: the call's attributes, a reference in a nested call
  read from the enclosing call, the function's defaults for the rest; a parameter with
  neither is absent, as ORT drops the attribute that refers to it). ORT resolves the inlined nodes against the *calling graph's* opset imports,
  not the function's (measured on ORT 1.32: in a model at opset 25, a Transpose of a
  function declared at opset 24 runs as Transpose-25); the function's imports only supply
  domains the model does not import.
- A node whose op has no kernel on the EP nor on ORT's CPU EP (Attention-25 on ORT 1.32)
  is replaced by its schema's ONNX function body, as ORT does; the body's nodes point at
  the model's node (``inlined_by_ort``) and keep the body's names, as ORT names them
  (measured: the unnamed nodes of Attention-25's body are unnamed in ORT's record).
- Subgraphs (If/Loop/Scan bodies, any depth) are scopes of their own, placed with the
  opsets of the graph that holds them; their nodes keep the function and the inlined node
  they belong to.
- Each node's kernel is decided as it is added (:mod:`.kernels`).
- A schema body (:mod:`.schema_bodies`) is built once per distinct (op, attributes,
  input types and shapes, outputs present) and shared by the calls that meet it (it is
  never edited).
"""

from __future__ import annotations

__all__ = ["Flattener", "op_facts"]

import collections
import dataclasses
import logging
from collections.abc import Iterable, Mapping, MutableMapping, Sequence

import onnx
import onnx.defs
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import (
    get_schema,
    type_string,
)
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.live_tables import installed_cpu_table
from onnxscript_ep_passes.ep.names import normalize_domain
from onnxscript_ep_passes.ep.placement.graph import Consumers, FlatNode, FlatScope, FlatValue
from onnxscript_ep_passes.ep.placement.kernels import (
    cached_decision,
    decisions_of,
    infer_types,
)
from onnxscript_ep_passes.ep.placement.schema_bodies import cached_schema_body

logger = logging.getLogger(__name__)

_GRAPH_TYPES = (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)


@dataclasses.dataclass(frozen=True)
class _Origin:
    """Where the nodes being added come from, beyond their graph."""

    function: ir.Function | None = None  # the innermost model-local function
    inlined_from: ir.Node | None = None  # the model node whose schema body ORT inlines
    call_attributes: Mapping[str, ir.Attr] | None = None  # ``function``'s parameters' values


def _tensor_size(tensor: ir.TensorProtocol | None) -> int | None:
    if tensor is None:
        return None
    size = 1
    for d in tensor.shape:
        if not isinstance(d, int):
            return None
        size *= d
    return size


# A Constant's type by its attribute (the attribute ``value`` holds a tensor of its own).
_CONSTANT_ATTRIBUTE_TYPES = {
    "value_float": "tensor(float)",
    "value_floats": "tensor(float)",
    "value_int": "tensor(int64)",
    "value_ints": "tensor(int64)",
    "value_string": "tensor(string)",
    "value_strings": "tensor(string)",
}


def _constant_type(node: ir.Node) -> str | None:
    """The type of a ``Constant``'s output, read from its attribute (None if unknown)."""
    for name, attr in node.attributes.items():
        if not isinstance(attr, ir.Attr) or attr.is_ref():
            continue
        if name in ("value", "sparse_value"):
            tensor = attr.value
            dtype = getattr(tensor, "dtype", None)
            if isinstance(dtype, ir.DataType) and dtype != ir.DataType.UNDEFINED:
                return type_string(ir.TensorType(dtype))
            return None
        if name in _CONSTANT_ATTRIBUTE_TYPES:
            return _CONSTANT_ATTRIBUTE_TYPES[name]
    return None


def _call_attributes(
    call: ir.Node, fn: ir.Function, outer: Mapping[str, ir.Attr] | None
) -> dict[str, ir.Attr]:
    """The values of ``fn``'s attribute parameters at ``call``: the call's own attributes
    (a reference read from ``outer``, the enclosing call's), then ``fn``'s defaults."""
    values: dict[str, ir.Attr] = {}
    for name, attr in call.attributes.items():
        if isinstance(attr, ir.Attr) and attr.is_ref():
            resolved = outer.get(attr.ref_attr_name or "") if outer is not None else None
            if resolved is not None:
                values[name] = resolved
        else:
            values[name] = attr
    for name, default in fn.attributes.items():
        if name not in values and default.type != ir.AttributeType.UNDEFINED:
            values[name] = default
    return values


def op_facts(
    table: KernelTable, op_type: str, domain: str, opset: int
) -> tuple[onnx.defs.OpSchema | None, int, bool]:
    """The op's schema at ``opset``, its since_version, and whether ORT may inline its
    schema body: no EP, CPU included, has a kernel for it (then the body decides). Pure
    in ``table`` and ONNX's schemas: all a node's placement reads of its opset besides
    the calls :mod:`.opset_reads` records."""
    schema = get_schema(op_type, opset, domain)
    since = schema.since_version if schema is not None else opset
    if schema is None and domain == "":
        # ORT's own ops in the ONNX domain (SimplifiedLayerNormalization, ...) are
        # all registered at version 1, whatever the model's opset.
        since = 1
    may_inline = False
    if domain == "" and schema is not None:
        cpu = installed_cpu_table()
        may_inline = (
            table.match(domain, op_type, schema.since_version) is None
            and cpu is not None
            and cpu.match(domain, op_type, schema.since_version) is None
        )
    return schema, since, may_inline


class Flattener:
    """Flattens a model into scopes of nodes (functions inlined), deciding kernels."""

    def __init__(self, model: ir.Model, table: KernelTable) -> None:
        self.model = model
        self.table = table
        self.functions = model.functions
        self.scopes: list[FlatScope] = []
        self.order: list[FlatNode] = []  # every node, in graph order (for reporting)
        # (op, domain, opset) -> what _op_facts says (pure in the table and ONNX's schemas)
        self._facts: dict[tuple[str, str, int], tuple[onnx.defs.OpSchema | None, int, bool]] = {}

    # -- building --------------------------------------------------------------

    def build_graph(
        self,
        graph: ir.Graph,
        opsets: Mapping[str, int],
        scope_name: str,
        outer_env: MutableMapping[ir.Value, FlatValue] | None,
        origin: _Origin = _Origin(),
    ) -> FlatScope:
        scope = FlatScope(scope_name, opset=opsets.get("", 0))
        self.scopes.append(scope)
        env: dict[ir.Value, FlatValue] = {}
        outer: MutableMapping[ir.Value, FlatValue] = outer_env if outer_env is not None else {}
        for v in graph.inputs:
            env[v] = scope.new_value(v.name or "", "input", type_string(v.type), ir_value=v)
        for name, v in graph.initializers.items():
            if v in env:  # an initializer that is also a graph input stays an input
                continue
            env[v] = scope.new_value(
                name, "initializer", type_string(v.type), _tensor_size(v.const_value), v
            )
        self._add_nodes(graph, opsets, scope, env, outer, prefix="", fn_scope="", origin=origin)
        for v in graph.outputs:
            val = self._lookup(v, scope, env, outer)
            if val is not None:
                val.is_output = True
        return scope

    def _lookup(
        self,
        v: ir.Value | None,
        scope: FlatScope,
        env: dict[ir.Value, FlatValue],
        outer: MutableMapping[ir.Value, FlatValue],
    ) -> FlatValue | None:
        if v is None:
            return None
        if v in env:
            return env[v]
        # A value of an enclosing graph: within this scope it behaves like a graph input
        # (ORT copies a subgraph's implicit inputs itself), unless it is an initializer.
        src = outer.get(v)
        if src is not None and src.kind == "initializer":
            val = scope.new_value(v.name or "", "initializer", src.dtype, src.size, v)
        else:
            dtype = src.dtype if src is not None else type_string(v.type)
            val = scope.new_value(v.name or "", "outer", dtype, ir_value=v)
        env[v] = val
        return val

    def _add_nodes(
        self,
        nodes: Iterable[ir.Node],
        opsets: Mapping[str, int],
        scope: FlatScope,
        env: dict[ir.Value, FlatValue],
        outer: MutableMapping[ir.Value, FlatValue],
        prefix: str,
        fn_scope: str,
        origin: _Origin,
    ) -> None:
        # The loop body runs once per node of every prediction: names are bound locally,
        # and the kernel decision is looked up by the type strings read here.
        scope_label = scope.name + fn_scope
        model_node = origin.inlined_from
        inlined = model_node is not None
        function = origin.function
        functions = self.functions
        facts = self._facts
        values, placed, order = scope.values, scope.nodes, self.order
        table = self.table
        decisions = decisions_of(table)
        lookup = self._lookup
        graph_types = _GRAPH_TYPES
        for node in nodes:
            op_type = node.op_type
            domain = node.domain
            if domain == "ai.onnx":
                domain = ""
            inputs: list[FlatValue | None] = []
            in_types: list[str | None] = []  # for the decision's key
            for v in node.inputs:
                val = env.get(v) if v is not None else None
                if val is None:
                    val = lookup(v, scope, env, outer)
                inputs.append(val)
                in_types.append(None if val is None else val.dtype)
            if functions:
                fn = functions.get((node.domain, op_type, node.overload))
                if fn is not None:
                    inner = dataclasses.replace(
                        origin,
                        function=fn,
                        call_attributes=_call_attributes(node, fn, origin.call_attributes),
                    )
                    self._inline(node, fn, inputs, scope, env, outer, fn_scope, opsets, inner)
                    continue
            if domain == "" and op_type == "Constant":
                self._constant(node, scope, env)
                continue
            opset = opsets.get(domain, 1)
            known = facts.get((op_type, domain, opset))
            schema, since, ort_may_inline = (
                known if known is not None else self._op_facts(op_type, domain, opset)
            )
            if ort_may_inline:
                body = self._schema_body(node, schema, inputs)
                if body is not None:
                    inner = dataclasses.replace(origin, inlined_from=model_node or node)
                    self._inline(node, body, inputs, scope, env, outer, fn_scope, opsets, inner)
                    continue
            flat = FlatNode(
                prefix + (node.name or ""),
                op_type,
                domain,
                since,
                inputs,
                [],
                scope_label,
                node=model_node or node,
                function=function,
                inlined_by_ort=inlined,
                call_attributes=origin.call_attributes,
            )
            for i, val in enumerate(inputs):
                if val is not None:
                    val.consumers[(flat, i)] = None  # Consumers.append, without its call
            untyped = False
            outputs = flat.outputs
            out_types: list[str | None] = []
            for slot, out in enumerate(node.outputs):
                if not out.name:
                    outputs.append(None)
                    out_types.append(None)
                    continue
                dtype = type_string(out.type)
                val = FlatValue(out.name, "node", dtype, None, flat, slot, Consumers(), False, out)
                values.append(val)
                env[out] = val
                outputs.append(val)
                out_types.append(dtype)
                untyped = untyped or dtype is None
            if schema is not None and untyped:
                infer_types(flat, node, schema, opset)
                out_types = [None if v is None else v.dtype for v in outputs]
            flat.on_ep, flat.reason, flat.reason_code = cached_decision(
                decisions, flat, schema, table, tuple(in_types), tuple(out_types)
            )
            placed.append(flat)
            order.append(flat)
            attributes = node.attributes.data
            if attributes:
                for attr in attributes.values():
                    if attr.type in graph_types:
                        self._subgraphs(attr, opsets, scope, env, outer, flat, origin)

    def _constant(self, node: ir.Node, scope: FlatScope, env: dict[ir.Value, FlatValue]) -> None:
        """A ``Constant``'s outputs become initializers (never placed). An untyped output
        (in a function body or a schema body) takes its type from the attribute, so the
        nodes reading it can be typed, and a schema body ORT inlines can be built."""
        for out in node.outputs:
            attr = node.attributes.get("value")
            size = None
            if isinstance(attr, ir.Attr) and attr.type == ir.AttributeType.TENSOR:
                size = _tensor_size(attr.value)  # as_tensor() is slow in a loop
            dtype = type_string(out.type)
            if dtype is None:
                dtype = _constant_type(node)
            env[out] = scope.new_value(out.name or "", "initializer", dtype, size, out)

    def _op_facts(
        self, op_type: str, domain: str, opset: int
    ) -> tuple[onnx.defs.OpSchema | None, int, bool]:
        """:func:`op_facts`, kept per flattener."""
        key = (op_type, domain, opset)
        facts = self._facts.get(key)
        if facts is None:
            facts = self._facts[key] = op_facts(self.table, op_type, domain, opset)
        return facts

    def _schema_body(
        self,
        node: ir.Node,
        schema: onnx.defs.OpSchema | None,
        inputs: Sequence[FlatValue | None],
    ) -> ir.Function | None:
        """The schema's function body ORT inlines for ``node`` (:meth:`_op_facts`)."""
        assert schema is not None
        return cached_schema_body(node, schema, [None if v is None else v.dtype for v in inputs])

    def _subgraphs(
        self,
        attr: ir.Attr,
        opsets: Mapping[str, int],
        scope: FlatScope,
        env: dict[ir.Value, FlatValue],
        outer: MutableMapping[ir.Value, FlatValue],
        owner: FlatNode,
        origin: _Origin,
    ) -> None:
        """Each graph of ``attr`` (an If/Loop/Scan body), as a scope of its own."""
        if not isinstance(attr, ir.Attr) or attr.is_ref():
            return
        if attr.type == ir.AttributeType.GRAPH:
            graphs = [(attr.name, attr.as_graph())]
        else:
            graphs = [(f"{attr.name}[{k}]", g) for k, g in enumerate(attr.as_graphs())]
        visible = collections.ChainMap(env, outer)  # a view: copies cost O(graph) each
        label = owner.name or owner.op_type
        base = scope.name.removeprefix("graph ").removeprefix("subgraph ").strip("'")
        for attr_name, graph in graphs:
            path = (
                f"{base}/{label}/{attr_name}"
                if scope.name.startswith("subgraph")
                else f"{label}/{attr_name}"
            )
            self.build_graph(graph, opsets, f"subgraph '{path}'", visible, origin)

    def _inline(
        self,
        call: ir.Node,
        fn: ir.Function,
        inputs: Sequence[FlatValue | None],
        scope: FlatScope,
        env: dict[ir.Value, FlatValue],
        outer: MutableMapping[ir.Value, FlatValue],
        fn_scope: str,
        opsets: Mapping[str, int],
        origin: _Origin,
    ) -> None:
        local: dict[ir.Value, FlatValue] = {}
        for formal, actual in zip(fn.inputs, inputs):
            if actual is not None:
                local[formal] = actual
        # ORT inlines the function into the calling graph and resolves the inlined nodes
        # against that graph's opset imports (measured on ORT 1.32: a Transpose in a
        # function at opset 24 of a model at opset 25 becomes Transpose-25). The
        # function's own imports only supply domains the graph does not import.
        fn_opsets = {normalize_domain(k): v for k, v in fn.opset_imports.items()}
        merged = {**fn_opsets, **opsets}
        fn_name = f"{fn.domain}::{fn.name}" if fn.domain else fn.name
        self._add_nodes(
            fn,
            merged,
            scope,
            local,
            collections.ChainMap(env, outer),
            # ORT names an inlined node after its own function only, at any depth; the
            # nodes of a schema body it inlines keep the body's names (measured: "").
            prefix="" if origin.inlined_from is not None else f"_inlfunc_{fn.name}_",
            fn_scope=f"{fn_scope} / function '{fn_name}'",
            origin=origin,
        )
        for formal_out, call_out in zip(fn.outputs, call.outputs):
            val = local.get(formal_out)
            if val is not None and call_out.name:
                env[call_out] = val
