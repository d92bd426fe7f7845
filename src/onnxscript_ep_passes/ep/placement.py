"""Predict where ONNX Runtime will place each node of a model on an EP, without a session.

:func:`predict_placement` replays what ORT does when it creates a session, from a
:class:`~onnxscript_ep_passes.ep.kernel_table.KernelTable` and the EP's
:class:`~onnxscript_ep_passes.ep.traits.EpTraits`. The rules, in ORT's order:

1. **Graph loading.** ``Constant`` nodes become initializers (they are never placed). Calls
   to model-local functions are inlined, named ``_inlfunc_<function>_<node>`` as ORT names
   them. ORT resolves the inlined nodes against the *calling graph's* opset imports, not
   the function's (measured on ORT 1.32: in a model at opset 25, a Transpose of a function
   declared at opset 24 runs as Transpose-25); the function's imports only supply domains
   the model does not import. Subgraphs (If/Loop/Scan bodies, any depth) are placed with
   the opsets of the graph that holds them.
2. **Kernel lookup.** A node goes to the EP when the table has a kernel for the since_version
   of the node's schema at its opset (``onnx.defs.get_schema(op, opset, domain)``; ops of a
   domain ``onnx.defs`` does not know are looked up with that domain's opset version) and,
   where both are known, its types. Types come from the model and from per-node ONNX type
   inference. Otherwise the node falls back to CPU ("no kernel for Reshape at since_version
   24 (registered: ...)", "type tensor(float8e8m0) not supported for T ...").
3. **CPU preference** (only for EPs whose traits say they apply ORT's
   ``GetCpuPreferredNodes``, e.g. CUDA): nodes that consume only CPU-resident values
   (CPU-output slots such as Shape's, small initializers, graph inputs), with no 16-bit or
   8-bit float input, go to CPU on purpose: placement ``"cpu"``, reason "shape computation
   (ORT prefers CPU)", ``is_shape_computation=True``. They are not fallback. This replays
   the forward trace of ORT main's ``fallback_cpu_capability.cc`` (including its
   propagation through CPU nodes reached from CPU tensors); it is not measured here (no
   GPU), and the WebGPU plugin does not apply it (measured).
4. **Layout transformation** (EPs with an NHWC kernel domain, e.g. WebGPU): EP nodes that
   have a kernel in the NHWC domain are converted and wrapped in ``Transpose`` nodes created
   *at the model's opset*. Heuristic, matching ORT's transpose optimizer on chains: the
   NHWC region grows forward through EP-placed layout-agnostic element-wise nodes; one
   Transpose per distinct value entering the region (data input of an NHWC node) and one
   per distinct value leaving it (consumed outside, or a graph output). Each inserted
   Transpose is placed like any node (Transpose-25 has no WebGPU kernel: it runs on CPU) and
   is reported with ``inserted_by_ort=True``. Not modelled: the transpose optimizer that
   runs with this transformation (at every optimization level) also pushes the model's
   own Transposes through element-wise ops and merges or cancels them
   (``Transpose -> Relu -> Transpose`` becomes one Transpose), so models with such
   patterns can be placed differently from the prediction.
5. **Memcpy estimate**, per graph, per value and direction (what ORT's memcpy transformer
   inserts): a value produced on CPU (a CPU node, or an EP CPU-output slot) and read by an
   EP node in a device slot costs one MemcpyFromHost; a value produced on the EP device and
   read by a CPU node or by an EP CPU-input slot (``Reshape``'s ``shape`` ...) costs one
   MemcpyToHost. Initializers cost nothing (copied at session start). Graph inputs cost a
   MemcpyFromHost only when read both in device and in host slots (otherwise the feed is
   copied by the session); graph outputs never cost one (fetches are copied by the
   session). Values a subgraph reads from its outer scope count as the subgraph's inputs.

Placement is predicted for the graph as written, i.e. what a session with graph
optimizations disabled shows (:func:`~onnxscript_ep_passes.ep.webgpu.measure_placement`'s
default); fusions and constant folding at higher levels change the graph. The measured
behaviour these rules reproduce is in ``tests/ep`` (WebGPU plugin on lavapipe).
"""

from __future__ import annotations

__all__ = [
    "SHAPE_COMPUTATION_REASON",
    "NodePlacement",
    "PlacementPrediction",
    "Transfer",
    "predict_placement",
]

import collections
import dataclasses
import functools
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import onnx
import onnx.defs
import onnx.helper
import onnx.shape_inference
import onnx_ir as ir

from onnxscript_ep_passes._onnx import (
    built_outputs,
    get_schema,
    schema_function_body,
    type_string,
)
from onnxscript_ep_passes.ep.kernel_table import KernelTable, live_table, normalize_domain
from onnxscript_ep_passes.ep.traits import EpTraits, traits_for

logger = logging.getLogger(__name__)

Placement = Literal["ep", "cpu"]

SHAPE_COMPUTATION_REASON = "shape computation (ORT prefers CPU)"
_SMALL_INITIALIZER_THRESHOLD = 100  # fallback_cpu_capability.cc kSmallInitializerThreshold
_NO_CPU_PREFERENCE_TYPES = frozenset(
    f"tensor({t})"
    for t in (
        "float16",
        "bfloat16",
        "float8e4m3fn",
        "float8e4m3fnuz",
        "float8e5m2",
        "float8e5m2fnuz",
    )
)
# Element-wise ops ORT's transpose optimizer pushes an NHWC<->NCHW Transpose through.
_LAYOUT_AGNOSTIC_OPS = frozenset(
    {
        "Abs",
        "Add",
        "Cast",
        "Ceil",
        "Clip",
        "Div",
        "Elu",
        "Erf",
        "Exp",
        "Floor",
        "HardSigmoid",
        "HardSwish",
        "Identity",
        "LeakyRelu",
        "Log",
        "Max",
        "Min",
        "Mul",
        "Neg",
        "Pow",
        "PRelu",
        "Reciprocal",
        "Relu",
        "Sigmoid",
        "Sqrt",
        "Sub",
        "Sum",
        "Tanh",
    }
)


@dataclasses.dataclass(frozen=True)
class NodePlacement:
    """The predicted placement of one node.

    Attributes:
        name: The node's name as ORT will report it (inlined function nodes:
            ``_inlfunc_<function>_<node>``; inserted layout Transposes get a descriptive
            name of ours, ORT generates its own).
        op_type: The operator.
        domain: ``""`` for ai.onnx.
        since_version: The since_version of the node's schema at its opset (for ops without
            a known schema, the domain's opset version).
        placement: ``"ep"`` or ``"cpu"``.
        reason: Why, in words.
        is_shape_computation: On CPU because ORT prefers CPU for small shape computations
            (not a fallback).
        reason_code: ``"kernel"``, ``"no_kernel_op"``, ``"no_kernel_version"``, ``"type"``
            or ``"shape_computation"``.
        scope: Where the node lives: ``"graph 'main'"``, ``"subgraph 'If_0/then_branch'"``,
            with `` / function 'dom::f'`` appended for inlined function nodes.
        inserted_by_ort: A node ORT adds (layout-transformation Transpose), not in the model.
        nhwc: ORT's layout transformation converts the node to the EP's NHWC domain
            (ORT then names it ``<name>_token_<n>``).
    """

    name: str
    op_type: str
    domain: str
    since_version: int | None
    placement: Placement
    reason: str
    is_shape_computation: bool = False
    reason_code: str = "kernel"
    scope: str = ""
    inserted_by_ort: bool = False
    nhwc: bool = False

    @property
    def is_fallback(self) -> bool:
        """On CPU for lack of a kernel (not by ORT's shape-computation preference)."""
        return self.placement == "cpu" and not self.is_shape_computation


@dataclasses.dataclass(frozen=True)
class Transfer:
    """One predicted Memcpy node: the value copied and the direction."""

    value: str
    direction: Literal["MemcpyFromHost", "MemcpyToHost"]
    scope: str


@dataclasses.dataclass(frozen=True)
class PlacementPrediction:
    """Predicted placement of every node, and the Memcpy nodes ORT would insert.

    Attributes:
        ep: The EP the table describes.
        table_source: Provenance of the kernel table.
        ort_version: The table's ORT version.
        nodes: One record per placed node (main graph, subgraphs, inlined functions,
            inserted layout Transposes), in graph order.
        transfers: The predicted Memcpy nodes.
    """

    ep: str
    table_source: str
    ort_version: str
    nodes: tuple[NodePlacement, ...]
    transfers: tuple[Transfer, ...]

    @property
    def memcpy_from_host(self) -> int:
        return sum(1 for t in self.transfers if t.direction == "MemcpyFromHost")

    @property
    def memcpy_to_host(self) -> int:
        return sum(1 for t in self.transfers if t.direction == "MemcpyToHost")

    @property
    def memcpy(self) -> int:
        """Estimated number of Memcpy nodes (both directions)."""
        return len(self.transfers)

    @property
    def ep_nodes(self) -> list[NodePlacement]:
        return [n for n in self.nodes if n.placement == "ep"]

    @property
    def cpu_nodes(self) -> list[NodePlacement]:
        """Every node on CPU: fallback and shape computation."""
        return [n for n in self.nodes if n.placement == "cpu"]

    @property
    def fallback_nodes(self) -> list[NodePlacement]:
        """Nodes on CPU for lack of an EP kernel (excludes ORT's shape-computation choice)."""
        return [n for n in self.nodes if n.is_fallback]

    @property
    def shape_computation_nodes(self) -> list[NodePlacement]:
        return [n for n in self.nodes if n.is_shape_computation]

    @property
    def version_fallback_nodes(self) -> list[NodePlacement]:
        """Fallback nodes whose op has EP kernels, only not at this since_version."""
        return [n for n in self.nodes if n.is_fallback and n.reason_code == "no_kernel_version"]

    @property
    def fully_on_ep(self) -> bool:
        """No fallback node and no Memcpy."""
        return not self.fallback_nodes and not self.transfers

    def summary(self) -> dict[str, dict[str, int]]:
        """``op_type -> {"ep": n, "cpu": n, "shape": n}`` (only non-zero entries)."""
        out: dict[str, collections.Counter[str]] = {}
        for n in self.nodes:
            label = "shape" if n.is_shape_computation else n.placement
            out.setdefault(n.op_type, collections.Counter())[label] += 1
        return {k: dict(v) for k, v in sorted(out.items())}

    def __str__(self) -> str:
        lines = [
            f"{self.ep} ({self.table_source}, ORT {self.ort_version}): "
            f"{len(self.ep_nodes)} on EP, {len(self.fallback_nodes)} fallback, "
            f"{len(self.shape_computation_nodes)} shape computation on CPU, "
            f"~{self.memcpy} Memcpy ({self.memcpy_from_host} from host, "
            f"{self.memcpy_to_host} to host)"
        ]
        lines.extend(
            f"  - {n.name or '<unnamed>'} ({n.op_type}): {n.reason}" for n in self.fallback_nodes
        )
        return "\n".join(lines)


# -- internal flat graph ---------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class _Val:
    name: str
    kind: Literal["input", "initializer", "node", "outer"]
    dtype: str | None = None
    size: int | None = None  # element count of an initializer
    producer: _Node | None = None
    producer_slot: int = 0
    consumers: list[tuple[_Node, int]] = dataclasses.field(default_factory=list)
    is_output: bool = False


@dataclasses.dataclass(eq=False)
class _Node:
    name: str
    op_type: str
    domain: str
    since_version: int | None
    inputs: list[_Val | None]
    outputs: list[_Val | None]
    scope: str
    on_ep: bool = False
    reason: str = ""
    reason_code: str = "kernel"
    shape_computation: bool = False
    inserted: bool = False
    nhwc: bool = False


@dataclasses.dataclass(eq=False)
class _Scope:
    name: str
    nodes: list[_Node] = dataclasses.field(default_factory=list)
    values: list[_Val] = dataclasses.field(default_factory=list)
    opset: int = 0


def _type_proto(type_str: str) -> onnx.TypeProto | None:
    if not type_str.startswith("tensor(") or not type_str.endswith(")"):
        return None
    name = type_str[len("tensor(") : -1].upper()
    try:
        return onnx.helper.make_tensor_type_proto(int(ir.DataType[name]), None)
    except KeyError:
        return None


def _proto_type_string(tp: onnx.TypeProto) -> str | None:
    if tp.HasField("tensor_type") and tp.tensor_type.elem_type:
        return f"tensor({ir.DataType(tp.tensor_type.elem_type).name.lower()})"
    return None


@functools.lru_cache(maxsize=1)
def _cpu_table() -> KernelTable | None:
    """The installed ORT's CPU kernels (which ops ORT must inline instead of running)."""
    try:
        return live_table("CPUExecutionProvider")
    except Exception as error:  # no live listing: assume CPU runs everything
        logger.debug("no live CPU kernel table: %s", error)
        return None


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
        known = _type_proto(dtype) if dtype else None
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


def _tensor_size(tensor: ir.TensorProtocol | None) -> int | None:
    if tensor is None:
        return None
    size = 1
    for d in tensor.shape:
        if not isinstance(d, int):
            return None
        size *= d
    return size


class _Builder:
    """Flattens a model into scopes of placed nodes (functions inlined)."""

    def __init__(self, model: ir.Model, table: KernelTable, traits: EpTraits) -> None:
        self.model = model
        self.table = table
        self.traits = traits
        self.functions = model.functions
        self.scopes: list[_Scope] = []
        self.order: list[_Node] = []  # every node, in graph order (for reporting)

    # -- building --------------------------------------------------------------

    def build_graph(
        self,
        graph: ir.Graph,
        opsets: Mapping[str, int],
        scope_name: str,
        outer_env: Mapping[ir.Value, _Val] | None,
    ) -> _Scope:
        scope = _Scope(scope_name, opset=opsets.get("", 0))
        self.scopes.append(scope)
        env: dict[ir.Value, _Val] = {}
        outer = dict(outer_env or {})
        for v in graph.inputs:
            env[v] = self._new_val(scope, v.name or "", "input", type_string(v.type))
        for name, v in graph.initializers.items():
            if v in env:  # an initializer that is also a graph input stays an input
                continue
            env[v] = self._new_val(
                scope, name, "initializer", type_string(v.type), _tensor_size(v.const_value)
            )
        self._add_nodes(graph, opsets, scope, env, outer, prefix="", fn_scope="")
        for v in graph.outputs:
            val = self._lookup(v, scope, env, outer)
            if val is not None:
                val.is_output = True
        return scope

    def _new_val(
        self,
        scope: _Scope,
        name: str,
        kind: Literal["input", "initializer", "node", "outer"],
        dtype: str | None,
        size: int | None = None,
    ) -> _Val:
        val = _Val(name=name, kind=kind, dtype=dtype, size=size)
        scope.values.append(val)
        return val

    def _lookup(
        self,
        v: ir.Value | None,
        scope: _Scope,
        env: dict[ir.Value, _Val],
        outer: dict[ir.Value, _Val],
    ) -> _Val | None:
        if v is None:
            return None
        if v in env:
            return env[v]
        # A value of an enclosing graph: within this scope it behaves like a graph input
        # (ORT copies a subgraph's implicit inputs itself), unless it is an initializer.
        src = outer.get(v)
        if src is not None and src.kind == "initializer":
            val = self._new_val(scope, v.name or "", "initializer", src.dtype, src.size)
        else:
            dtype = src.dtype if src is not None else type_string(v.type)
            val = self._new_val(scope, v.name or "", "outer", dtype)
        env[v] = val
        return val

    def _add_nodes(
        self,
        nodes: Iterable[ir.Node],
        opsets: Mapping[str, int],
        scope: _Scope,
        env: dict[ir.Value, _Val],
        outer: dict[ir.Value, _Val],
        prefix: str,
        fn_scope: str,
    ) -> None:
        for node in nodes:
            domain = normalize_domain(node.domain)
            inputs = [self._lookup(v, scope, env, outer) for v in node.inputs]
            fn = self.functions.get((node.domain, node.op_type, node.overload))
            if fn is not None:
                self._inline(node, fn, inputs, scope, env, outer, prefix, fn_scope, opsets)
                continue
            if domain == "" and node.op_type == "Constant":
                for out in node.outputs:
                    attr = node.attributes.get("value")
                    size = None
                    if isinstance(attr, ir.Attr) and attr.type == ir.AttributeType.TENSOR:
                        size = _tensor_size(attr.as_tensor())
                    env[out] = self._new_val(
                        scope, out.name or "", "initializer", type_string(out.type), size
                    )
                continue
            opset = opsets.get(domain, 1)
            schema = get_schema(node.op_type, opset, domain)
            since = schema.since_version if schema is not None else opset
            if schema is None and domain == "":
                # ORT's own ops in the ONNX domain (SimplifiedLayerNormalization, ...) are
                # all registered at version 1, whatever the model's opset.
                since = 1
            body = self._body_ort_inlines(node, domain, schema, inputs)
            if body is not None:
                self._inline(node, body, inputs, scope, env, outer, prefix, fn_scope, opsets)
                continue
            flat = _Node(
                name=prefix + (node.name or ""),
                op_type=node.op_type,
                domain=domain,
                since_version=since,
                inputs=inputs,
                outputs=[],
                scope=scope.name + fn_scope,
            )
            for i, val in enumerate(inputs):
                if val is not None:
                    val.consumers.append((flat, i))
            for slot, out in enumerate(node.outputs):
                if not out.name:
                    flat.outputs.append(None)
                    continue
                val = self._new_val(scope, out.name, "node", type_string(out.type))
                val.producer, val.producer_slot = flat, slot
                env[out] = val
                flat.outputs.append(val)
            if schema is not None:
                self._infer_types(flat, node, schema, opset)
            self._decide_kernel(flat, schema)
            scope.nodes.append(flat)
            self.order.append(flat)
            for attr in node.attributes.values():
                if not isinstance(attr, ir.Attr) or attr.is_ref():
                    continue
                if attr.type == ir.AttributeType.GRAPH:
                    self._subgraph(attr.as_graph(), opsets, scope, env, outer, flat, attr.name)
                elif attr.type == ir.AttributeType.GRAPHS:
                    for k, g in enumerate(attr.as_graphs()):
                        self._subgraph(g, opsets, scope, env, outer, flat, f"{attr.name}[{k}]")

    def _body_ort_inlines(
        self,
        node: ir.Node,
        domain: str,
        schema: onnx.defs.OpSchema | None,
        inputs: Sequence[_Val | None],
    ) -> ir.Function | None:
        """The schema's function body when ORT inlines it: no EP, CPU included, has a kernel."""
        if domain != "" or schema is None:
            return None
        if self.table.match(domain, node.op_type, schema.since_version) is not None:
            return None
        cpu = _cpu_table()
        if cpu is None or cpu.match(domain, node.op_type, schema.since_version) is not None:
            return None
        return _schema_body(node, schema, [None if v is None else v.dtype for v in inputs])

    def _subgraph(
        self,
        graph: ir.Graph,
        opsets: Mapping[str, int],
        scope: _Scope,
        env: dict[ir.Value, _Val],
        outer: dict[ir.Value, _Val],
        owner: _Node,
        attr_name: str,
    ) -> None:
        visible = {**outer, **env}
        label = owner.name or owner.op_type
        base = scope.name.removeprefix("graph ").removeprefix("subgraph ").strip("'")
        path = (
            f"{base}/{label}/{attr_name}"
            if scope.name.startswith("subgraph")
            else f"{label}/{attr_name}"
        )
        self.build_graph(graph, opsets, f"subgraph '{path}'", visible)

    def _inline(
        self,
        call: ir.Node,
        fn: ir.Function,
        inputs: Sequence[_Val | None],
        scope: _Scope,
        env: dict[ir.Value, _Val],
        outer: dict[ir.Value, _Val],
        prefix: str,
        fn_scope: str,
        opsets: Mapping[str, int],
    ) -> None:
        local: dict[ir.Value, _Val] = {}
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
            {**outer, **env},
            # ORT names an inlined node after its own function only, at any depth.
            prefix=f"_inlfunc_{fn.name}_",
            fn_scope=f"{fn_scope} / function '{fn_name}'",
        )
        for formal_out, call_out in zip(fn.outputs, call.outputs):
            val = local.get(formal_out)
            if val is not None and call_out.name:
                env[call_out] = val

    # -- types and kernels ---------------------------------------------------------

    def _infer_types(
        self, flat: _Node, node: ir.Node, schema: onnx.defs.OpSchema, opset: int
    ) -> None:
        """Fill unknown output types with ONNX's per-node type inference."""
        if all(o is None or o.dtype is not None for o in flat.outputs):
            return
        if any(
            a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
            for a in node.attributes.values()
        ):
            return
        input_types: dict[str, onnx.TypeProto] = {}
        names: list[str] = []
        for i, val in enumerate(flat.inputs):
            if val is None:
                names.append("")
                continue
            name = f"in{i}"
            names.append(name)
            tp = _type_proto(val.dtype) if val.dtype else None
            if tp is None:
                return  # an input type is unknown: nothing to infer from
            input_types[name] = tp
        out_names = [f"out{i}" if o is not None else "" for i, o in enumerate(flat.outputs)]
        try:
            proto = onnx.helper.make_node(node.op_type, names, out_names, domain=node.domain)
            for attr in node.attributes.values():
                if not isinstance(attr, ir.Attr) or attr.is_ref():
                    continue
                if attr.type not in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
                    proto.attribute.append(ir.serde.serialize_attribute(attr))
            inferred = onnx.shape_inference.infer_node_outputs(
                schema,
                proto,
                input_types,
                opset_imports=[onnx.helper.make_opsetid(node.domain, opset)],
            )
        except Exception as e:  # inference is best effort
            logger.debug("type inference failed for %s (%s): %s", flat.name, flat.op_type, e)
            return
        for i, o in enumerate(flat.outputs):
            if o is not None and o.dtype is None and out_names[i] in inferred:
                o.dtype = _proto_type_string(inferred[out_names[i]])

    def _type_bindings(
        self, flat: _Node, schema: onnx.defs.OpSchema | None
    ) -> dict[str, str] | None:
        if schema is None:
            return None
        bindings: dict[str, str] = {}

        def bind(
            formals: Sequence[onnx.defs.OpSchema.FormalParameter], vals: Sequence[_Val | None]
        ) -> None:
            if not formals:
                return
            for i, val in enumerate(vals):
                if val is None or val.dtype is None:
                    continue
                if i < len(formals):
                    formal = formals[i]
                elif formals[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
                    formal = formals[-1]
                else:
                    continue
                bindings.setdefault(formal.type_str, val.dtype)
                bindings.setdefault(formal.name, val.dtype)

        bind(schema.inputs, flat.inputs)
        bind(schema.outputs, flat.outputs)
        return bindings

    def _decide_kernel(self, flat: _Node, schema: onnx.defs.OpSchema | None) -> None:
        assert flat.since_version is not None
        kernel, reason = self.table.explain(
            flat.domain, flat.op_type, flat.since_version, self._type_bindings(flat, schema)
        )
        flat.on_ep = kernel is not None
        flat.reason = reason
        if kernel is not None:
            flat.reason_code = "kernel"
        elif not self.table.has_op(flat.domain, flat.op_type):
            flat.reason_code = "no_kernel_op"
        elif self.table.match(flat.domain, flat.op_type, flat.since_version) is None:
            flat.reason_code = "no_kernel_version"
        else:
            flat.reason_code = "type"

    # -- ORT's CPU preference ------------------------------------------------------

    def apply_cpu_preference(self, scope: _Scope) -> None:
        """ORT's GetCpuPreferredNodes on one graph (forward trace, in topological order)."""
        tentative = [n for n in scope.nodes if n.on_ep]
        if not tentative:
            return
        cpu_args: set[int] = set()
        candidates: set[int] = set()
        for n in tentative:
            for slot, out in enumerate(n.outputs):
                if out is not None and self.traits.output_on_cpu(n.domain, n.op_type, slot):
                    cpu_args.add(id(out))
                    candidates.update(id(c) for c, _ in out.consumers)
        for n in scope.nodes:  # graph order is topological
            if id(n) not in candidates:
                continue
            if not n.on_ep:
                # A CPU node reached from CPU tensors: its outputs are CPU tensors too.
                for out in n.outputs:
                    if out is not None:
                        cpu_args.add(id(out))
                        candidates.update(id(c) for c, _ in out.consumers)
                continue
            place_in_cpu = True
            for i, val in enumerate(n.inputs):
                if val is None:
                    place_in_cpu = False
                    break
                if val.dtype in _NO_CPU_PREFERENCE_TYPES:
                    place_in_cpu = False
                    break
                small_init = val.kind == "initializer" and (
                    val.size is not None and val.size <= _SMALL_INITIALIZER_THRESHOLD
                )
                if small_init or val.kind == "input":
                    continue
                if id(val) not in cpu_args:
                    place_in_cpu = False
                    break
                if self.traits.input_on_cpu(n.domain, n.op_type, i):
                    place_in_cpu = False
                    break
            if place_in_cpu:
                n.on_ep = False
                n.shape_computation = True
                n.reason = SHAPE_COMPUTATION_REASON
                n.reason_code = "shape_computation"
                for out in n.outputs:
                    if out is not None:
                        cpu_args.add(id(out))
                        candidates.update(id(c) for c, _ in out.consumers)

    # -- layout transformation -------------------------------------------------------

    def apply_layout_transform(self, scope: _Scope) -> None:
        """Insert the Transposes ORT's NHWC layout transformation adds (see module doc)."""
        nhwc = self.traits.nhwc_domain
        if nhwc is None:
            return
        region: set[int] = set()
        for n in scope.nodes:
            if not n.on_ep or n.since_version is None:
                continue
            if n.domain == "" and self.table.match(nhwc, n.op_type, n.since_version) is not None:
                region.add(id(n))
                continue
            if n.domain == "" and n.op_type in _LAYOUT_AGNOSTIC_OPS:
                data = [v for v in n.inputs if v is not None and v.kind != "initializer"]
                if data and all(v.producer is not None and id(v.producer) in region for v in data):
                    region.add(id(n))
        if not region:
            return
        for n in scope.nodes:
            if id(n) in region and n.op_type not in _LAYOUT_AGNOSTIC_OPS:
                n.nhwc = True
        transpose_schema = get_schema("Transpose", scope.opset, "")
        since = transpose_schema.since_version if transpose_schema is not None else scope.opset
        new_nodes: list[_Node] = []
        # Values entering the region: data input 0 of each NHWC node.
        entering: dict[int, tuple[_Val, list[tuple[_Node, int]]]] = {}
        for n in scope.nodes:
            if id(n) not in region or n.op_type in _LAYOUT_AGNOSTIC_OPS:
                continue
            val = n.inputs[0] if n.inputs else None
            if val is None or (val.producer is not None and id(val.producer) in region):
                continue
            entering.setdefault(id(val), (val, []))[1].append((n, 0))
        for val, uses in entering.values():
            t = self._transpose(
                scope, val, since, f"LayoutTranspose_to_nhwc({val.name})", "to_nhwc"
            )
            out = t.outputs[0]
            assert out is not None
            for node, slot in uses:
                val.consumers.remove((node, slot))
                node.inputs[slot] = out
                out.consumers.append((node, slot))
            new_nodes.append(t)
        # Values leaving the region.
        for n in list(scope.nodes):
            if id(n) not in region:
                continue
            for out in n.outputs:
                if out is None:
                    continue
                outside = [(c, s) for c, s in out.consumers if id(c) not in region]
                if not outside and not out.is_output:
                    continue
                t = self._transpose(
                    scope, out, since, f"LayoutTranspose_to_nchw({out.name})", "to_nchw"
                )
                moved = t.outputs[0]
                assert moved is not None
                for c, s in outside:
                    out.consumers.remove((c, s))
                    c.inputs[s] = moved
                    moved.consumers.append((c, s))
                if out.is_output:
                    out.is_output, moved.is_output = False, True
                new_nodes.append(t)
        for t in new_nodes:
            self._decide_kernel(t, transpose_schema)
        scope.nodes.extend(new_nodes)
        self.order.extend(new_nodes)

    def _transpose(self, scope: _Scope, src: _Val, since: int, name: str, role: str) -> _Node:
        t = _Node(
            name=name,
            op_type="Transpose",
            domain="",
            since_version=since,
            inputs=[src],
            outputs=[],
            scope=scope.name,
            inserted=True,
        )
        src.consumers.append((t, 0))
        out = self._new_val(scope, f"{src.name}_{role}", "node", src.dtype)
        out.producer, out.producer_slot = t, 0
        t.outputs.append(out)
        return t

    # -- Memcpy ------------------------------------------------------------------

    def transfers(self, scope: _Scope) -> list[Transfer]:
        result: list[Transfer] = []
        for val in scope.values:
            if val.kind == "initializer":
                continue
            device_reads = 0
            host_reads = 0
            for node, slot in val.consumers:
                if node.on_ep and not self.traits.input_on_cpu(node.domain, node.op_type, slot):
                    device_reads += 1
                else:
                    host_reads += 1
            if val.kind in ("input", "outer"):
                if device_reads and host_reads:
                    result.append(Transfer(val.name, "MemcpyFromHost", scope.name))
                continue
            producer = val.producer
            assert producer is not None
            on_device = producer.on_ep and not self.traits.output_on_cpu(
                producer.domain, producer.op_type, val.producer_slot
            )
            if on_device and host_reads:
                result.append(Transfer(val.name, "MemcpyToHost", scope.name))
            elif not on_device and device_reads:
                result.append(Transfer(val.name, "MemcpyFromHost", scope.name))
        return result


def predict_placement(
    model: ir.Model | onnx.ModelProto,
    table: KernelTable,
    *,
    traits: EpTraits | None = None,
    layout_transform: bool = True,
) -> PlacementPrediction:
    """Predict ORT's placement of every node of ``model`` on ``table``'s EP.

    Args:
        model: The model (``onnx_ir.Model`` or ``onnx.ModelProto``); it is not modified.
        table: The EP's kernel table (:func:`~onnxscript_ep_passes.ep.kernel_table.get_table`).
        traits: The EP's memory facts; default :func:`~onnxscript_ep_passes.ep.traits.traits_for`
            ``(table.ep)``.
        layout_transform: Model the Transposes of ORT's NHWC layout transformation for
            EPs that prefer NHWC (see the module docstring).

    Returns:
        Per-node placements, fallback and shape-computation lists, and the Memcpy estimate.
    """
    ir_model = model if isinstance(model, ir.Model) else ir.serde.deserialize_model(model)
    traits = traits if traits is not None else traits_for(table.ep)
    builder = _Builder(ir_model, table, traits)
    opsets = {normalize_domain(k): v for k, v in ir_model.opset_imports.items()}
    builder.build_graph(ir_model.graph, opsets, "graph 'main'", None)
    transfers: list[Transfer] = []
    for scope in builder.scopes:
        if traits.prefers_cpu_for_shape_nodes:
            builder.apply_cpu_preference(scope)
        if layout_transform:
            builder.apply_layout_transform(scope)
        transfers.extend(builder.transfers(scope))
    records = tuple(
        NodePlacement(
            name=n.name,
            op_type=n.op_type,
            domain=n.domain,
            since_version=n.since_version,
            placement="ep" if n.on_ep else "cpu",
            reason=n.reason,
            is_shape_computation=n.shape_computation,
            reason_code=n.reason_code,
            scope=n.scope,
            inserted_by_ort=n.inserted,
            nhwc=n.nhwc,
        )
        for n in builder.order
    )
    prediction = PlacementPrediction(
        ep=table.ep,
        table_source=table.source,
        ort_version=table.ort_version,
        nodes=records,
        transfers=tuple(transfers),
    )
    logger.debug("%s", prediction)
    return prediction
