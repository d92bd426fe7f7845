"""Kernel lookup, the second phase of placement: does the EP have a kernel for a node?

Rules:

- A node goes to the EP when the kernel table has a kernel for the since_version of the
  node's schema at its opset and, where both are known, its types
  (:meth:`~onnxscript_ep_passes.ep.kernel_table.KernelTable.explain`).
- Types come from the model, and unknown output types from ONNX's per-node type inference
  (:func:`infer_types`, best effort). They are bound to the schema's type parameters and
  formal parameter names (:func:`type_bindings`), the keys ORT's kernel defs use.
- The :data:`~onnxscript_ep_passes.ep.placement.results.ReasonCode` says which check failed.
- Both are cached by what they read (:mod:`~onnxscript_ep_passes.ep.memo`): a decision
  per table and (domain, op, since_version, input and output types); an inference per
  (op, domain, opset, input types, outputs present, attribute values).
"""

from __future__ import annotations

__all__ = [
    "Decision",
    "cached_decision",
    "decide",
    "decide_kernel",
    "decisions_of",
    "infer_types",
    "inference_node_proto",
    "proto_type_string",
    "type_bindings",
    "type_proto",
]

import functools
import logging
from collections.abc import Hashable, Sequence

import onnx
import onnx.defs
import onnx.helper
import onnx.shape_inference
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import attributes_key
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.memo import BoundedCache
from onnxscript_ep_passes.ep.placement import opset_reads
from onnxscript_ep_passes.ep.placement.graph import FlatNode, FlatValue
from onnxscript_ep_passes.ep.placement.results import ReasonCode

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=256)
def _elem_type(type_str: str) -> int | None:
    if not type_str.startswith("tensor(") or not type_str.endswith(")"):
        return None
    try:
        return int(ir.DataType[type_str[len("tensor(") : -1].upper()])
    except KeyError:
        return None


def type_proto(type_str: str) -> onnx.TypeProto | None:
    """The ``TypeProto`` of a tensor type string (``"tensor(float)"``), or None."""
    elem_type = _elem_type(type_str)
    if elem_type is None:
        return None
    return onnx.helper.make_tensor_type_proto(elem_type, None)


def proto_type_string(tp: onnx.TypeProto) -> str | None:
    """The type string (``"tensor(float)"``) of a tensor ``TypeProto``, or None."""
    if tp.HasField("tensor_type") and tp.tensor_type.elem_type:
        return f"tensor({ir.DataType(tp.tensor_type.elem_type).name.lower()})"
    return None


_Inferred = tuple[str | None, ...]
_INFERRED: BoundedCache[Hashable, _Inferred] = BoundedCache()

_Formal = tuple[str, str]  # (type parameter, formal name)
Decision = tuple[bool, str, ReasonCode]
"""(on the EP, reason, reason code): what :func:`decide` says of a node."""


@functools.cache
def _formals(
    schema: onnx.defs.OpSchema,
) -> tuple[tuple[_Formal, ...], bool, tuple[_Formal, ...], bool]:
    """``schema``'s inputs and outputs as (type parameter, name), each with whether its
    last formal is variadic (reading them from the schema each time is slow)."""

    def read(formals: Sequence[onnx.defs.OpSchema.FormalParameter]) -> tuple[_Formal, ...]:
        return tuple((f.type_str, f.name) for f in formals)

    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    inputs, outputs = schema.inputs, schema.outputs
    return (
        read(inputs),
        bool(inputs) and inputs[-1].option == variadic,
        read(outputs),
        bool(outputs) and outputs[-1].option == variadic,
    )


def infer_types(flat: FlatNode, node: ir.Node, schema: onnx.defs.OpSchema, opset: int) -> None:
    """Fill unknown output types with ONNX's per-node type inference."""
    if all(o is None or o.dtype is not None for o in flat.outputs):
        return
    if any(
        a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
        for a in node.attributes.data.values()
    ):
        return
    dtypes = tuple(None if val is None else val.dtype for val in flat.inputs)
    if any(val is not None and _elem_type(val.dtype or "") is None for val in flat.inputs):
        return  # an input type is unknown: nothing to infer from
    present = tuple(o is not None for o in flat.outputs)
    attrs = attributes_key(node)
    key = None if attrs is None else (node.op_type, node.domain, opset, dtypes, present, attrs)
    inferred = _INFERRED.fetch(key, lambda: _infer_output_types(flat, node, schema, opset))
    reads = opset_reads.active()
    if reads is not None:
        reads.note("types", key, lambda: _types_call(node, dtypes, present, inferred))
    for o, dtype in zip(flat.outputs, inferred):
        if o is not None and o.dtype is None:
            o.dtype = dtype


def _types_call(
    node: ir.Node, dtypes: tuple[str | None, ...], present: tuple[bool, ...], inferred: _Inferred
) -> opset_reads.Call:
    """:func:`infer_types`' call on ``node`` (inputs of types ``dtypes``, None: absent),
    to be made again at another opset (:mod:`.opset_reads`)."""

    def again(opset: int, schema: onnx.defs.OpSchema, since: int) -> _Inferred:
        inputs = [None if d is None else FlatValue("", "node", d) for d in dtypes]
        outputs = [FlatValue("", "node", None) if p else None for p in present]
        flat = FlatNode(node.name or "", node.op_type, node.domain, since, inputs, outputs, "")
        return _infer_output_types(flat, node, schema, opset)

    return opset_reads.Call(node.op_type, node.domain, inferred, again)


def inference_node_proto(
    node: ir.Node, inputs: Sequence[str], outputs: Sequence[str], *, domain: str = ""
) -> onnx.NodeProto:
    """``node`` as ONNX's per-node inference reads it: its op and its attributes (no
    subgraph, no reference) on the value names ``inputs`` and ``outputs``."""
    proto = onnx.helper.make_node(node.op_type, list(inputs), list(outputs), domain=domain)
    for attr in node.attributes.values():
        if not isinstance(attr, ir.Attr) or attr.is_ref():
            continue
        if attr.type not in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
            proto.attribute.append(ir.serde.serialize_attribute(attr))
    return proto


def _infer_output_types(
    flat: FlatNode, node: ir.Node, schema: onnx.defs.OpSchema, opset: int
) -> _Inferred:
    """ONNX's inferred type of each output of ``node`` (None where it tells none)."""
    input_types: dict[str, onnx.TypeProto] = {}
    names: list[str] = []
    for i, val in enumerate(flat.inputs):
        if val is None:
            names.append("")
            continue
        name = f"in{i}"
        names.append(name)
        tp = type_proto(val.dtype) if val.dtype else None
        assert tp is not None  # checked by the caller
        input_types[name] = tp
    out_names = [f"out{i}" if o is not None else "" for i, o in enumerate(flat.outputs)]
    unknown = tuple(None for _ in flat.outputs)
    try:
        proto = inference_node_proto(node, names, out_names, domain=node.domain)
        inferred = onnx.shape_inference.infer_node_outputs(
            schema,
            proto,
            input_types,
            opset_imports=[onnx.helper.make_opsetid(node.domain, opset)],
        )
    except Exception as e:  # inference is best effort
        logger.debug("type inference failed for %s (%s): %s", flat.name, flat.op_type, e)
        return unknown
    return tuple(
        proto_type_string(inferred[name]) if name and name in inferred else None
        for name in out_names
    )


def type_bindings(flat: FlatNode, schema: onnx.defs.OpSchema | None) -> dict[str, str] | None:
    """The node's known types bound to the schema's type parameters and formal names."""
    if schema is None:
        return None
    bindings: dict[str, str] = {}
    in_formals, in_variadic, out_formals, out_variadic = _formals(schema)

    def bind(
        formals: tuple[_Formal, ...], variadic: bool, vals: Sequence[FlatValue | None]
    ) -> None:
        if not formals:
            return
        for i, val in enumerate(vals):
            if val is None or val.dtype is None:
                continue
            if i < len(formals):
                type_str, name = formals[i]
            elif variadic:
                type_str, name = formals[-1]
            else:
                continue
            bindings.setdefault(type_str, val.dtype)
            bindings.setdefault(name, val.dtype)

    bind(in_formals, in_variadic, flat.inputs)
    bind(out_formals, out_variadic, flat.outputs)
    return bindings


def decide_kernel(flat: FlatNode, schema: onnx.defs.OpSchema | None, table: KernelTable) -> None:
    """Place ``flat`` on the EP when ``table`` has a kernel for it (module docstring)."""
    in_types = tuple([None if v is None else v.dtype for v in flat.inputs])
    out_types = tuple([None if v is None else v.dtype for v in flat.outputs])
    flat.on_ep, flat.reason, flat.reason_code = cached_decision(
        decisions_of(table), flat, schema, table, in_types, out_types
    )


def decisions_of(table: KernelTable) -> dict[Hashable, Decision]:
    """The kernel decisions kept for ``table`` (:func:`cached_decision`)."""
    return table.memo("placement.decide_kernel")


def cached_decision(
    decisions: dict[Hashable, Decision],
    flat: FlatNode,
    schema: onnx.defs.OpSchema | None,
    table: KernelTable,
    in_types: tuple[str | None, ...],
    out_types: tuple[str | None, ...],
) -> Decision:
    """:func:`decide`, kept in ``decisions`` (:func:`decisions_of` ``table``) by all it
    reads: domain, op, since_version, whether a schema is known, and the types of
    ``flat``'s inputs and outputs (``in_types``, ``out_types``: each value's ``dtype``,
    None when absent)."""
    key = (flat.domain, flat.op_type, flat.since_version, schema is not None, in_types, out_types)
    decision = decisions.get(key)
    if decision is None:
        decision = decisions[key] = decide(flat, schema, table)
    return decision


def decide(flat: FlatNode, schema: onnx.defs.OpSchema | None, table: KernelTable) -> Decision:
    """Whether ``table`` has a kernel for ``flat``, uncached (:func:`cached_decision`
    caches it)."""
    assert flat.since_version is not None
    kernel, reason = table.explain(
        flat.domain, flat.op_type, flat.since_version, type_bindings(flat, schema)
    )
    if kernel is not None:
        return True, reason, "kernel"
    if not table.has_op(flat.domain, flat.op_type):
        return False, reason, "no_kernel_op"
    if table.match(flat.domain, flat.op_type, flat.since_version) is None:
        return False, reason, "no_kernel_version"
    return False, reason, "type"
