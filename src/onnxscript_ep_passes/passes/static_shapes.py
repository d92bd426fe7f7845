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
   not used. The size of a result is checked *before* it is computed, so folding never
   allocates more than ``max_elements`` per output: from the output's declared static
   shape, and for ops whose output size follows from their inputs' values
   (``ConstantOfShape``, ``Expand``, ``Tile``, ``Range``) from those values. Graph outputs and ``Constant`` nodes are left alone. This is exact, given the
   model's declared static dimensions.
3. Nodes among those given that are left without a use are removed.
4. Given an :class:`~onnxscript_ep_passes.core.checkpoint.EditLog`, every edit is made
   through it, so that it can undo the folding (the EP search folds its working copy,
   predicts, and puts it back) without a checkpoint of the whole model.
5. The opset is read only by the reference evaluations. While a record of calls to ONNX
   is made (:func:`~onnxscript_ep_passes.ep.placement.opset_reads.recording`), each
   distinct one is noted (kind ``"fold"``), to be asked again at another opset
   (:mod:`.twins`); an evaluation without a key (object data) marks the record
   incomplete.

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

from onnxscript_ep_passes.core.checkpoint import EditLog
from onnxscript_ep_passes.core.onnx_utils import tensor_array
from onnxscript_ep_passes.ep.placement import opset_reads
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
    return None if tensor is None else tensor_array(tensor)


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
    inputs = node.inputs
    if node.op_type in _NONDETERMINISTIC or not inputs:
        return None
    for value in inputs:  # most nodes end here: an input no constant at all, seen cheaply
        if value is not None and value.const_value is None:
            producer = value.producer()
            if producer is None or producer.op_type != "Constant":
                return None
    names: list[str] = []
    feeds: dict[str, np.ndarray] = {}
    for index, value in enumerate(inputs):
        if value is None:
            names.append("")
            continue
        array = _const_array(value, max_elements)
        if array is None:
            return None
        names.append(f"in{index}")
        feeds[f"in{index}"] = array
    if _too_large(node, [feeds.get(name) for name in names], max_elements):
        return None
    attributes = []
    for attr in node.attributes.values():
        if attr.is_ref() or attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
            return None
        attributes.append(ir.serde.serialize_attribute(attr))
    arrays = _reference(node, names, attributes, feeds, opset)
    if arrays is None:
        return None
    for out, array in zip(node.outputs, arrays):
        if array.size > max_elements or not _agrees(out, array):
            return None
    return arrays


def _reference(
    node: ir.Node,
    names: list[str],
    attributes: list[onnx.AttributeProto],
    feeds: dict[str, np.ndarray],
    opset: int,
) -> list[np.ndarray] | None:
    """Run ``node`` on ``feeds`` with ONNX's reference implementation (None: it cannot).

    Results are remembered by what determines them (op, opset, attributes, input values):
    a model repeats the same shape math in every block, and the EP search folds the same
    nodes at each candidate opset. Copies are returned, so no two constants share data.
    The call is noted in the record being made, if any (rule 5).
    """
    key: tuple[object, ...] | None = None  # what determines the result, but the opset
    if all(a.dtype != object for a in feeds.values()):  # object arrays hold pointers
        key = (
            node.op_type,
            len(node.outputs),
            tuple(names),
            tuple(a.SerializeToString(deterministic=True) for a in attributes),
            tuple((n, a.dtype.str, a.shape, a.tobytes()) for n, a in feeds.items()),
        )
    op_type, outputs = node.op_type, len(node.outputs)
    arrays = _evaluated(op_type, outputs, names, attributes, feeds, opset, key)
    reads = opset_reads.active()
    if reads is not None:  # asked again at another opset (rule 5)
        reads.note(
            "fold",
            key,
            lambda: opset_reads.Call(
                op_type,
                "",
                _spelled(arrays),
                lambda at, _s, _v: _spelled(
                    _evaluated(op_type, outputs, names, attributes, feeds, at, key)
                ),
            ),
        )
    return arrays


def _evaluated(
    op_type: str,
    outputs: int,
    names: list[str],
    attributes: list[onnx.AttributeProto],
    feeds: dict[str, np.ndarray],
    opset: int,
    key: tuple[object, ...] | None,
) -> list[np.ndarray] | None:
    """:func:`_reference`'s evaluation at ``opset``, memoized under ``(opset, key)`` when
    there is a ``key``."""
    memo = None if key is None else (opset, key)
    if memo is not None and memo in _EVALUATED:
        known = _EVALUATED[memo]
        return None if known is None else [a.copy() for a in known]
    proto = onnx.helper.make_node(op_type, names, [f"out{i}" for i in range(outputs)])
    proto.attribute.extend(attributes)
    arrays: list[np.ndarray] | None
    try:
        results = onnx.reference.ReferenceEvaluator(proto, opsets={"": opset}).run(None, feeds)
        arrays = [np.asarray(r) for r in results]
    except Exception as error:  # an op the reference cannot run: leave it
        logger.debug("cannot fold %s at opset %d: %s", op_type, opset, error)
        arrays = None
    if memo is not None:
        if len(_EVALUATED) >= _EVALUATED_MAX:
            _EVALUATED.clear()
        _EVALUATED[memo] = None if arrays is None else [a.copy() for a in arrays]
    return arrays


def _spelled(
    arrays: list[np.ndarray] | None,
) -> tuple[tuple[str, tuple[int, ...], bytes], ...] | None:
    """``arrays`` as a value ``==`` compares (type, shape and bytes of each)."""
    if arrays is None:
        return None
    return tuple((a.dtype.str, a.shape, a.tobytes()) for a in arrays)


_EVALUATED: dict[tuple[object, ...], list[np.ndarray] | None] = {}
_EVALUATED_MAX = 4096


def _too_large(node: ir.Node, inputs: list[np.ndarray | None], max_elements: int) -> bool:
    """Whether an output of ``node`` is known, before evaluating it, to hold more than
    ``max_elements`` elements (rule 2)."""
    for out in node.outputs:
        shape = out.shape
        if shape is not None and shape.is_static() and math.prod(shape.numpy()) > max_elements:
            return True
    elements = _elements_from_inputs(node.op_type, inputs)
    return elements is not None and elements > max_elements


def _elements_from_inputs(op: str, inputs: list[np.ndarray | None]) -> int | None:
    """The output size of ops whose inputs' values give it (None: not one of them)."""
    first = inputs[0] if inputs else None
    second = inputs[1] if len(inputs) > 1 else None
    if op == "ConstantOfShape" and first is not None:
        return math.prod(max(int(d), 0) for d in first.reshape(-1))
    if op == "Expand" and first is not None and second is not None:
        dims = [max(int(d), 0) for d in second.reshape(-1)]
        shape = list(first.shape)
        rank = max(len(dims), len(shape))
        dims = [1] * (rank - len(dims)) + dims
        shape = [1] * (rank - len(shape)) + shape
        return math.prod(max(a, b) for a, b in zip(dims, shape))
    if op == "Tile" and first is not None and second is not None:
        return first.size * math.prod(max(int(r), 0) for r in second.reshape(-1))
    if op == "Range" and len(inputs) == 3:
        scalars = [float(a.reshape(-1)[0]) for a in inputs if a is not None and a.size == 1]
        if len(scalars) != 3:
            return None
        start, limit, delta = scalars
        if delta == 0 or not all(map(math.isfinite, (start, limit, delta))):
            return None
        return max(math.ceil((limit - start) / delta), 0)
    return None


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


def fold_static_shapes(
    nodes: Iterable[ir.Node],
    opset: int,
    *,
    max_elements: int = 1024,
    log: EditLog | None = None,
) -> int:
    """Replace each of ``nodes`` whose outputs are known statically by ``Constant`` nodes.

    ``nodes`` must be in graph order; ``opset`` is the ai.onnx opset they are read at.
    Nodes among them left without a use are removed (module docstring). With ``log``,
    every edit is made through it (rule 4). Returns the number of nodes folded.
    """
    candidates = list(nodes)
    made: list[ir.Node] = []
    folded = 0
    default_domains = schemas.DEFAULT_DOMAINS
    for node in candidates:
        graph = node.graph
        if graph is None or node.domain not in default_domains or node.op_type == "Constant":
            continue
        arrays = _evaluate(node, opset, max_elements)  # pure: most nodes end here
        if arrays is None or any(o.is_graph_output() for o in node.outputs):
            continue
        for index, (out, array) in enumerate(zip(node.outputs, arrays)):
            if not out.uses():
                continue
            constant = ir.Node(
                "",
                "Constant",
                [],
                [ir.AttrTensor("value", ir.Tensor(array))],  # ir.tensor: slow checks
                name=f"{node.name or node.op_type}/folded_{index}",
            )
            new = constant.outputs[0]
            new.type = ir.TensorType(ir.DataType.from_numpy(array.dtype))
            new.shape = ir.Shape(array.shape)
            name = out.name
            if log is None:
                graph.insert_before(node, constant)
                out.replace_all_uses_with(new)
                out.name = None
                new.name = name
            else:
                log.insert_before(graph, node, constant)
                log.replace_all_uses_with(out, new)
                log.rename(out, None)
                log.rename(new, name)
            made.append(constant)
        folded += 1
    _remove_unused([*candidates, *made], log)
    return folded


def _remove_unused(nodes: Sequence[ir.Node], log: EditLog | None) -> None:
    """Remove those of ``nodes`` left without a use, and then their producers among them.

    A worklist: each node is looked at once, and again only when a consumer of it was
    removed, so the cost is linear in the nodes and their inputs.
    """
    members = set(nodes)
    work = list(nodes)
    while work:
        node = work.pop()
        graph = node.graph
        if graph is None:
            continue
        used = False
        for out in node.outputs:
            if out.uses() or out.is_graph_output():
                used = True
                break
        if used:
            continue
        producers = [v.producer() for v in node.inputs if v is not None]
        if log is None:
            graph.remove(node, safe=True)
        else:
            log.remove(graph, node)
        work.extend(p for p in producers if p is not None and p in members)
