"""Fold the static shape arithmetic of nodes a rewrite built into constants.

A function-body expansion (or a lowering) computes shapes at run time (``Shape``,
``Concat``, ``Div``/``Mod`` on int64 ...), which an EP such as WebGPU runs on CPU. Rules:

1. Only the nodes given are folded (those a rewrite built); the rest of the model is not
   touched, so a model's own structure stays as its author wrote it.
2. A node is replaced by ``Constant`` nodes when its outputs are known statically:
   ``Shape``/``Size`` of a value whose (selected) dimensions are static, and any
   deterministic default-domain node whose inputs are all constants of at most
   ``max_elements`` elements (evaluated with ONNX's reference implementation at the
   given opset). A result whose type or shape disagrees with the value's declared one is
   not used. Graph outputs and ``Constant`` nodes are left alone. This is exact, given the
   model's declared static dimensions.
3. Nodes among those given that are left without a use are removed.

Hand-written, not onnxscript's constant folder: that folder works on the whole model
(rule 1 would need its ``should_fold`` hook for every node), turns folded values into
initializers rather than ``Constant`` nodes in place, and does not check a folded value
against the declared type and shape (rule 2). onnx-ir's ``RemoveUnusedNodesPass`` would
likewise sweep the whole model, not only the nodes given (rule 3).
"""

from __future__ import annotations

__all__ = ["fold_static_shapes"]

import logging
import math
from collections.abc import Iterable, Sequence

import numpy as np
import onnx
import onnx.helper
import onnx.reference
import onnx_ir as ir

from onnxscript_ep_passes.ep.shapes import small_constant
from onnxscript_ep_passes.lowering import schemas

logger = logging.getLogger(__name__)

_NONDETERMINISTIC = frozenset(
    {
        "Bernoulli",
        "Dropout",
        "Multinomial",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
    }
)


def _const_array(value: ir.Value | None, max_elements: int) -> np.ndarray | None:
    tensor = small_constant(value, max_elements)
    return None if tensor is None else tensor.numpy()


def _static_dims(node: ir.Node) -> list[int] | None:
    """The dimensions ``Shape``/``Size`` read, when they are all static."""
    data = node.inputs[0] if node.inputs else None
    if data is None or data.shape is None:
        return None
    dims = list(data.shape)
    if node.op_type == "Shape":
        rank = len(dims)
        start = node.attributes.get_int("start", 0)
        end = node.attributes.get_int("end", rank)
        start = min(max(start + rank if start < 0 else start, 0), rank)
        end = min(max(end + rank if end < 0 else end, 0), rank)
        dims = dims[start:end]
    if not all(isinstance(d, int) for d in dims):
        return None
    return [int(d) for d in dims]  # type: ignore[arg-type]


def _evaluate(node: ir.Node, opset: int, max_elements: int) -> list[np.ndarray] | None:
    """The node's outputs when they are known statically (None otherwise)."""
    if node.op_type in ("Shape", "Size"):
        dims = _static_dims(node)
        if dims is None:
            return None
        if node.op_type == "Shape":
            return [np.array(dims, dtype=np.int64)]
        return [np.array(math.prod(dims), dtype=np.int64)]
    if node.op_type in _NONDETERMINISTIC or not node.inputs:
        return None
    names: list[str] = []
    feeds: dict[str, np.ndarray] = {}
    for index, value in enumerate(node.inputs):
        if value is None:
            names.append("")
            continue
        array = _const_array(value, max_elements)
        if array is None:
            return None
        names.append(f"in{index}")
        feeds[f"in{index}"] = array
    attributes = []
    for attr in node.attributes.values():
        if attr.is_ref() or attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
            return None
        attributes.append(ir.serde.serialize_attribute(attr))
    proto = onnx.helper.make_node(
        node.op_type, names, [f"out{i}" for i in range(len(node.outputs))]
    )
    proto.attribute.extend(attributes)
    try:
        results = onnx.reference.ReferenceEvaluator(proto, opsets={"": opset}).run(None, feeds)
    except Exception as error:  # an op the reference cannot run: leave it
        logger.debug("cannot fold %s (%s): %s", node.name, node.op_type, error)
        return None
    arrays = [np.asarray(r) for r in results]
    for out, array in zip(node.outputs, arrays):
        if array.size > max_elements or not _agrees(out, array):
            return None
    return arrays


def _agrees(value: ir.Value, array: np.ndarray) -> bool:
    """The computed array has the value's declared element type and static shape, if any."""
    try:
        dtype = ir.DataType.from_numpy(array.dtype)
    except (TypeError, ValueError):
        return False
    if value.dtype is not None and value.dtype != dtype:
        return False
    if value.shape is not None and value.shape.is_static():
        return tuple(value.shape.numpy()) == array.shape
    return True


def fold_static_shapes(nodes: Iterable[ir.Node], opset: int, *, max_elements: int = 1024) -> int:
    """Replace each of ``nodes`` whose outputs are known statically by ``Constant`` nodes.

    ``nodes`` must be in graph order; ``opset`` is the ai.onnx opset they are read at.
    Nodes among them left without a use are removed (module docstring).
    Returns the number of nodes folded.
    """
    candidates = list(nodes)
    made: list[ir.Node] = []
    folded = 0
    for node in candidates:
        graph = node.graph
        if graph is None or not schemas.is_default_domain(node.domain):
            continue
        if node.op_type == "Constant" or any(o.is_graph_output() for o in node.outputs):
            continue
        arrays = _evaluate(node, opset, max_elements)
        if arrays is None:
            continue
        for index, (out, array) in enumerate(zip(node.outputs, arrays)):
            if not out.uses():
                continue
            constant = ir.Node(
                "",
                "Constant",
                [],
                [ir.AttrTensor("value", ir.tensor(array))],
                name=f"{node.name or node.op_type}/folded_{index}",
            )
            graph.insert_before(node, constant)
            new = constant.outputs[0]
            new.type = ir.TensorType(ir.DataType.from_numpy(array.dtype))
            new.shape = ir.Shape(array.shape)
            name = out.name
            ir.convenience.replace_all_uses_with(out, new)
            out.name = None
            new.name = name
            made.append(constant)
        folded += 1
    _remove_unused([*candidates, *made])
    return folded


def _remove_unused(nodes: Sequence[ir.Node]) -> None:
    """Remove those of ``nodes`` left without a use, and then their producers among them.

    A worklist: each node is looked at once, and again only when a consumer of it was
    removed, so the cost is linear in the nodes and their inputs.
    """
    members = set(nodes)
    work = list(nodes)
    while work:
        node = work.pop()
        graph = node.graph
        if graph is None or any(o.uses() or o.is_graph_output() for o in node.outputs):
            continue
        producers = [v.producer() for v in node.inputs if v is not None]
        graph.remove(node, safe=True)
        work.extend(p for p in producers if p is not None and p in members)
