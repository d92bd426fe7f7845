"""Run a bool data-movement node the EP has no bool kernel for in a type it has one for.

Attention's function body pads its bool mask with ``Pad``; the WebGPU EP has ``Pad``,
``Shape``, ``Slice``, ``Concat``... kernels for int32 and float but not for bool, so the
node falls back to CPU and ORT copies the mask there and back. Legalization
(:mod:`.legalize`) uses this module for such nodes. Rules:

1. **Only data movement.** The op is one of :data:`WIDENABLE_OPS`: each output element
   is a copy of an input element (or of ``Pad``'s ``constant_value``), or the op reads
   only shapes (``Shape``, ``Size``). No arithmetic, no comparison. Every bool input of
   such an op is a data input (the others are int64 indices, shapes or axes).
2. **A carrier type.** The carrier is the first of :data:`CARRIERS` for which the EP's
   table has a kernel for the node's op at its since_version with every bool type
   parameter bound to the carrier, and ``Cast`` kernels bool -> carrier and carrier ->
   bool. No carrier: the node is not widened.
3. **The rewrite.** Each bool input ``x`` is replaced by ``Cast(x, to=carrier)`` (one Cast
   per value: an existing ``Cast`` of ``x`` to the carrier is reused; a small constant
   ``x``, such as ``Pad``'s ``constant_value``, becomes a carrier constant), each bool output
   ``y`` becomes a carrier value ``y'`` followed by ``y = Cast(y', to=BOOL)``. The node
   keeps its name, attributes and other inputs.
4. **Exact.** Cast bool -> carrier maps False/True to 0/1, the node only moves or reads
   values, and Cast carrier -> bool maps 0/1 back to False/True (every element of ``y'``
   is 0 or 1: a copy of a cast input). Shapes are unchanged by a Cast, so ``Shape`` and
   ``Size`` read the same dimensions.
5. Whether a widening pays is legalization's decision (its cost rule); this module only
   says whether a node can be widened, does it, and groups the nodes that touch the same
   bool values (:func:`bool_components`: a mask's ``Pad``, ``Slice`` and ``Shape`` leave
   CPU only together, an unrelated ``GatherND`` is judged on its own).
"""

from __future__ import annotations

__all__ = ["CARRIERS", "WIDENABLE_OPS", "bool_components", "widen_carrier", "widen_node"]

import numpy as np
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import get_schema
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.shapes import small_constant
from onnxscript_ep_passes.lowering import schemas
from onnxscript_ep_passes.lowering.context import NodeRefusedError

WIDENABLE_OPS = frozenset(
    {
        "Concat",
        "Expand",
        "Flatten",
        "Gather",
        "GatherElements",
        "GatherND",
        "Identity",
        "Pad",
        "Reshape",
        "Shape",
        "Size",
        "Slice",
        "Split",
        "Squeeze",
        "Tile",
        "Transpose",
        "Unsqueeze",
    }
)
"""Ops whose outputs are copies of input elements, or shapes (rule 1)."""

CARRIERS = (ir.DataType.UINT8, ir.DataType.INT32, ir.DataType.UINT32, ir.DataType.FLOAT)
"""Carrier types, in order of preference (rule 2): each holds 0 and 1 exactly."""

_BOOL = ir.DataType.BOOL
_MAX_CONSTANT = 1024


def _type_str(dtype: ir.DataType) -> str:
    return f"tensor({dtype.name.lower()})"


def _is_bool(value: ir.Value | None) -> bool:
    return value is not None and value.dtype == _BOOL


def _bool_params(node: ir.Node, opset: int) -> set[str] | None:
    """The schema's type parameters bound to bool by ``node`` (None: no schema)."""
    schema = get_schema(node.op_type, opset, node.domain)
    if schema is None:
        return None
    params: set[str] = set()
    for formals, values in ((schema.inputs, node.inputs), (schema.outputs, node.outputs)):
        for index, value in enumerate(values):
            if _is_bool(value) and formals:
                params.add(formals[min(index, len(formals) - 1)].type_str)
    return params


def _cast_supported(table: KernelTable, opset: int, source: str, target: str) -> bool:
    since = schemas.since_version("Cast", opset)
    if since is None:
        return False
    kernel, _ = table.explain("", "Cast", since, {"T1": source, "T2": target})
    return kernel is not None


def widen_carrier(node: ir.Node, table: KernelTable, opset: int) -> ir.DataType | None:
    """The carrier type ``node`` can run in on ``table``'s EP (rule 2), or None."""
    if not schemas.is_default_domain(node.domain) or node.op_type not in WIDENABLE_OPS:
        return None
    if not any(_is_bool(v) for v in node.inputs):
        return None
    params = _bool_params(node, opset)
    since = schemas.since_version(node.op_type, opset, node.domain)
    if not params or since is None:
        return None
    bool_str = _type_str(_BOOL)
    for carrier in CARRIERS:
        carried = _type_str(carrier)
        kernel, _ = table.explain("", node.op_type, since, dict.fromkeys(params, carried))
        if (
            kernel is not None
            and _cast_supported(table, opset, bool_str, carried)
            and _cast_supported(table, opset, carried, bool_str)
        ):
            return carrier
    return None


def bool_components(nodes: list[ir.Node]) -> list[list[ir.Node]]:
    """``nodes`` grouped by the bool values they share (connected components), in order."""
    parent = list(range(len(nodes)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[ir.Value, int] = {}
    for index, node in enumerate(nodes):
        for value in (*node.inputs, *node.outputs):
            if value is None or not _is_bool(value):
                continue
            if value in owner:
                parent[root(index)] = root(owner[value])
            else:
                owner[value] = index
    groups: dict[int, list[ir.Node]] = {}
    for index, node in enumerate(nodes):
        groups.setdefault(root(index), []).append(node)
    return list(groups.values())


def _cast(graph: ir.Graph, value: ir.Value, dtype: ir.DataType, name: str) -> ir.Node:
    node = ir.Node("", "Cast", [value], [ir.AttrInt64("to", dtype.value)], name=name)
    node.outputs[0].type = ir.TensorType(dtype)
    node.outputs[0].shape = value.shape
    return node


def _small_constant(value: ir.Value) -> np.ndarray | None:
    """The data of a small bool constant (a ``Constant`` output, or an initializer that is
    not a graph input), else None."""
    producer = value.producer()
    if producer is None and (value.const_value is None or value.is_graph_input()):
        return None
    if producer is not None and producer.op_type != "Constant":
        return None
    tensor = small_constant(value, _MAX_CONSTANT)
    return None if tensor is None else tensor.numpy()


def _existing_cast(value: ir.Value, carrier: ir.DataType, graph: ir.Graph) -> ir.Value | None:
    """An existing ``Cast(value, to=carrier)`` in ``graph`` (rule 3: one Cast per value)."""
    for user, _ in value.uses():
        if (
            user.op_type == "Cast"
            and schemas.is_default_domain(user.domain)
            and user.graph is graph
            and user.attributes.get_int("to", 0) == carrier.value
        ):
            return user.outputs[0]
    return None


def widen_node(node: ir.Node, table: KernelTable, opset: int) -> list[ir.Node]:
    """Run ``node`` in its carrier type between exact Casts (rules 3-4); the Casts built.

    Raises:
        NodeRefusedError: the node cannot be widened on this EP (rules 1-2).
    """
    carrier = widen_carrier(node, table, opset)
    graph = node.graph
    if carrier is None or graph is None:
        raise NodeRefusedError(
            f"{node.op_type} on bool has no kernel here and cannot run in another type "
            "between exact Casts on this EP"
        )
    built: list[ir.Node] = []
    label = node.name or node.op_type
    for index, value in enumerate(node.inputs):
        if not _is_bool(value):
            continue
        assert value is not None
        carried = _existing_cast(value, carrier, graph)
        constant = None if carried is not None else _small_constant(value)
        if constant is not None:  # a carrier constant, not a Cast ORT must fold
            made = ir.Node(
                "",
                "Constant",
                [],
                [ir.AttrTensor("value", ir.tensor(constant.astype(carrier.numpy())))],
                name=f"{label}/widen_in_{index}",
            )
            graph.insert_before(node, made)
            made.outputs[0].type = ir.TensorType(carrier)
            made.outputs[0].shape = ir.Shape(constant.shape)
            built.append(made)
            carried = made.outputs[0]
        if carried is None:
            cast = _cast(graph, value, carrier, f"{label}/widen_in_{index}")
            graph.insert_before(node, cast)
            built.append(cast)
            carried = cast.outputs[0]
        node.replace_input_with(index, carried)
    for index, out in enumerate(node.outputs):
        if _is_bool(out):
            built.append(_cast_back(graph, node, out, carrier, f"{label}/widen_out_{index}"))
    return built


def _cast_back(
    graph: ir.Graph, node: ir.Node, out: ir.Value, carrier: ir.DataType, name: str
) -> ir.Node:
    """Make ``out`` a carrier value and give its users (and the graph) ``Cast(out, BOOL)``."""
    uses = list(out.uses())
    back = _cast(graph, out, _BOOL, name)
    graph.insert_after(node, back)
    result = back.outputs[0]
    for user, slot in uses:
        user.replace_input_with(slot, result)
    for position, output in enumerate(graph.outputs):
        if output is out:
            graph.outputs[position] = result
    kept_name = out.name
    out.name = f"{kept_name or name}/widened"
    result.name = kept_name
    out.type = ir.TensorType(carrier)  # a new type: clones of the model share type objects
    return back
