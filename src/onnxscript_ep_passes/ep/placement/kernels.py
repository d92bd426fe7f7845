"""Kernel lookup, the second phase of placement: does the EP have a kernel for a node?

Rules:

- A node goes to the EP when the kernel table has a kernel for the since_version of the
  node's schema at its opset and, where both are known, its types
  (:meth:`~onnxscript_ep_passes.ep.kernel_table.KernelTable.explain`).
- Types come from the model, and unknown output types from ONNX's per-node type inference
  (:func:`infer_types`, best effort). They are bound to the schema's type parameters and
  formal parameter names (:func:`type_bindings`), the keys ORT's kernel defs use.
- The :data:`~onnxscript_ep_passes.ep.placement.results.ReasonCode` says which check failed.
"""

from __future__ import annotations

__all__ = [
    "decide_kernel",
    "infer_types",
    "proto_type_string",
    "type_bindings",
    "type_proto",
]

import logging
from collections.abc import Sequence

import onnx
import onnx.defs
import onnx.helper
import onnx.shape_inference
import onnx_ir as ir

from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.placement.graph import FlatNode, FlatValue

logger = logging.getLogger(__name__)


def type_proto(type_str: str) -> onnx.TypeProto | None:
    """The ``TypeProto`` of a tensor type string (``"tensor(float)"``), or None."""
    if not type_str.startswith("tensor(") or not type_str.endswith(")"):
        return None
    name = type_str[len("tensor(") : -1].upper()
    try:
        return onnx.helper.make_tensor_type_proto(int(ir.DataType[name]), None)
    except KeyError:
        return None


def proto_type_string(tp: onnx.TypeProto) -> str | None:
    """The type string (``"tensor(float)"``) of a tensor ``TypeProto``, or None."""
    if tp.HasField("tensor_type") and tp.tensor_type.elem_type:
        return f"tensor({ir.DataType(tp.tensor_type.elem_type).name.lower()})"
    return None


def infer_types(flat: FlatNode, node: ir.Node, schema: onnx.defs.OpSchema, opset: int) -> None:
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
        tp = type_proto(val.dtype) if val.dtype else None
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
            o.dtype = proto_type_string(inferred[out_names[i]])


def type_bindings(flat: FlatNode, schema: onnx.defs.OpSchema | None) -> dict[str, str] | None:
    if schema is None:
        return None
    bindings: dict[str, str] = {}

    def bind(
        formals: Sequence[onnx.defs.OpSchema.FormalParameter], vals: Sequence[FlatValue | None]
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


def decide_kernel(flat: FlatNode, schema: onnx.defs.OpSchema | None, table: KernelTable) -> None:
    assert flat.since_version is not None
    kernel, reason = table.explain(
        flat.domain, flat.op_type, flat.since_version, type_bindings(flat, schema)
    )
    flat.on_ep = kernel is not None
    flat.reason = reason
    if kernel is not None:
        flat.reason_code = "kernel"
    elif not table.has_op(flat.domain, flat.op_type):
        flat.reason_code = "no_kernel_op"
    elif table.match(flat.domain, flat.op_type, flat.since_version) is None:
        flat.reason_code = "no_kernel_version"
    else:
        flat.reason_code = "type"
