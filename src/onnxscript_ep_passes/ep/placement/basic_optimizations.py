"""ORT's basic (level-1) graph optimizations, which run before nodes are assigned to EPs.

A session at ORT's default level (``ORT_ENABLE_ALL``), or at ``ORT_ENABLE_BASIC`` and
above, rewrites the graph with its level-1 transformers *before* partitioning, so the
graph ORT places is not the graph as written. This phase replays the ones that change
which nodes are left to place, on each flat scope (:mod:`.graph`), in ORT's order, until
a round changes nothing (ORT's transformer manager repeats its level up to 10 times):

1. Redundant-node elimination (ORT's level-1 rewrite rules): ``Identity``; ``Cast`` to
   the type its input already has; ``Dropout`` whose mask output is unused (inference);
   ``Expand`` whose input already has the target shape and ``Slice`` that selects the
   whole tensor (both read from constant shapes/indices and static shapes). The node's
   consumers read its input instead. A node whose output is a graph output is kept.
2. Constant sharing: initializers of at most 8 elements (float16, float, double, int32,
   int64) with the same type, shape and bytes become one value.
3. Common-subexpression elimination (:mod:`.common_subexpressions`, whose docstring
   states its rules): a node equal to an earlier one in ORT's topological order (op,
   attributes, inputs) is replaced by it.
4. Constant folding (in ORT's topological order where :mod:`.load_shapes` runs, each
   node inferred again once one has folded): a deterministic ai.onnx node without subgraphs, all of whose inputs
   are constant initializers, and that ORT's CPU EP has a kernel for (by version), is
   computed at session creation: its outputs become initializers. A ``Shape`` whose input
   has a fully static shape is folded whatever its input is. The nodes that only fed a
   folded node are removed with it (ORT's bottom-up removal of single-consumer chains).
5. Contiguous reshapes: a ``Reshape`` followed by ``Reshape``/``Squeeze``/``Unsqueeze``
   nodes, each the only consumer of the one before (none a graph output, no ``Reshape``
   with ``allowzero=1``), whose last output has a fully static shape, becomes one
   ``Reshape`` to that shape, named
   ``<first>_new_reshape`` (its record's ``node`` is the first node); the others are
   removed.
6. Transpose pairs (ORT's transpose optimizer, in part): a ``Transpose`` of a
   ``Transpose`` whose permutations compose to the identity is removed, its consumers
   read the first one's input, and the first goes too when nothing else reads it.

Rules for what ORT does not do here:

- Nodes of a schema function body ORT inlines (an op no EP has a kernel for, e.g.
  Attention-25 on ORT 1.32) are not optimized: ORT inlines them while partitioning,
  after these optimizations. Model-local functions are inlined before (ORT inlines them
  ahead of time), so their nodes are.
- Values computed by folding are not compared with other constants (ORT could share a
  folded scalar with an equal one on the next round); they are computed only where
  :mod:`.load_shapes` runs, for its inference and the eliminations that read constants.
- Not modelled: ORT's other fusions at this level (Conv+BatchNormalization/Add/Mul,
  MatMul+Add into Gemm, Reshape's Shape->Gather->Unsqueeze->Concat subgraph into a
  constant when the shape is dynamic, Div+Mul, Not+Where, Gemm+Transpose,
  Relu+Clip, the rest of the transpose optimizer: pushing Transposes through other ops,
  merging two into one) and the no-op arithmetic rule (Add of 0, Mul by 1).
- Shapes are the model's own (its value types) and, where the model leaves values
  without a shape, ORT's inference at load and after each round that changed the graph
  (:mod:`.load_shapes`: no data propagation; folded values computed). A model that spells
  every value's shape is read as it spells it.
- ORT inlines the schema body of an op in the graph itself (CastLike) before these
  optimizations when no EP claims the op (measured: the Cast of a lowered decoder's
  CastLike of a constant is folded), but not Attention-25's (measured: its body is placed
  as written); here no schema body is optimized, so such a Cast is predicted kept.
  They merge or remove nodes on the same device; a model that relies on them to leave the
  CPU is predicted with the nodes they would remove.

Every removed node is recorded with the rule that removed it (:class:`RemovedNode`).
"""

from __future__ import annotations

__all__ = ["RULES", "apply_basic_optimizations"]

import logging
from collections.abc import Hashable

import numpy as np
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import tensor_array
from onnxscript_ep_passes.ep.live_tables import installed_cpu_table
from onnxscript_ep_passes.ep.placement.basic_fusions import (
    cancel_transposes,
    fuse_contiguous_reshapes,
)
from onnxscript_ep_passes.ep.placement.common_subexpressions import (
    NON_DETERMINISTIC,
    eliminate_common_subexpressions,
)
from onnxscript_ep_passes.ep.placement.edits import (
    ScopeEdits,
    constant_array,
    constant_tensor,
    has_subgraph,
    static_shape,
)
from onnxscript_ep_passes.ep.placement.graph import FlatNode, FlatScope, FlatValue
from onnxscript_ep_passes.ep.placement.load_shapes import LoadShapes
from onnxscript_ep_passes.ep.placement.results import RemovedNode

logger = logging.getLogger(__name__)

RULES = (
    "identity_elimination",
    "cast_elimination",
    "dropout_elimination",
    "expand_elimination",
    "slice_elimination",
    "common_subexpression",
    "constant_folding",
    "shape_folding",
    "unused_after_folding",
    "reshape_fusion",
    "transpose_cancellation",
)
"""The rules a :class:`RemovedNode` names, in the order of the module docstring."""

_MAX_ROUNDS = 10  # ORT's session option max_num_graph_transformation_steps
_SHARED_MAX_ELEMENTS = 8  # ConstantSharing::TENSOR_ELEM_COUNT_THRESHOLD
_SHARED_TYPES = frozenset(
    {
        ir.DataType.FLOAT16,
        ir.DataType.FLOAT,
        ir.DataType.DOUBLE,
        ir.DataType.INT32,
        ir.DataType.INT64,
    }
)
_INT64_MAX = np.iinfo(np.int64).max
_MISSING: Hashable = object()  # no key kept for the value


def apply_basic_optimizations(scope: FlatScope) -> list[RemovedNode]:
    """ORT's level-1 optimizations on one scope (module docstring); the nodes removed."""
    removed: list[RemovedNode] = []
    state = ScopeEdits(scope, removed)
    # The inference walks the nodes ORT does not insert or inline, in any topological
    # order of them (its result is the same in each: .load_shapes); no node is removed
    # when it runs (at load, and after state.finish()).
    shapes = LoadShapes.of(scope, state.inference_order)  # ORT's inference at load
    for _ in range(_MAX_ROUNDS):
        changed = _eliminate_redundant(state)
        changed |= _share_constants(state)
        changed |= eliminate_common_subexpressions(state)
        changed |= _fold_constants(state, shapes)
        changed |= fuse_contiguous_reshapes(state)
        changed |= cancel_transposes(state)
        state.finish()
        if not changed:
            break
        if shapes is not None:
            shapes.resolve()  # ORT resolves the graph after a transformer changed it
    if removed:
        logger.debug("%s: ORT's basic optimizations remove %d nodes", scope.name, len(removed))
    return removed


# -- 1. redundant nodes -------------------------------------------------------------------


_REDUNDANT_OPS = frozenset({"Identity", "Cast", "Dropout", "Expand", "Slice"})
"""The ops :func:`_redundant_rule` may remove (the others are skipped before any check)."""


def _eliminate_redundant(state: ScopeEdits) -> bool:
    changed = False
    ops = _REDUNDANT_OPS
    for node in state.scope.nodes:
        if node.op_type not in ops or not state.optimizable(node) or node.domain != "":
            continue
        rule = _redundant_rule(node)
        if rule is None:
            continue
        source = node.inputs[0]
        out = node.outputs[0]
        if source is None or out is None or out.is_output:
            continue
        if any(o is not None and (o.consumers or o.is_output) for o in node.outputs[1:]):
            continue
        state.replace(out, source)
        state.remove(node, rule)
        changed = True
    return changed


def _redundant_rule(node: FlatNode) -> str | None:
    op = node.op_type
    if op == "Identity":
        return "identity_elimination"
    if op == "Cast":
        source, out = node.inputs[0], node.outputs[0]
        if source is not None and out is not None and source.dtype and source.dtype == out.dtype:
            return "cast_elimination"
        return None
    if op == "Dropout":
        return "dropout_elimination" if _dropout_is_identity(node) else None
    if op == "Expand":
        return "expand_elimination" if _expand_is_identity(node) else None
    if op == "Slice":
        return "slice_elimination" if _slice_is_identity(node) else None
    return None


def _dropout_is_identity(node: FlatNode) -> bool:
    """Inference-mode Dropout (no ``training_mode`` input set true): its data is its input."""
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        training = constant_array(node.inputs[2])
        if training is None or bool(training.reshape(-1)[0]):
            return False
    return True


def _expand_is_identity(node: FlatNode) -> bool:
    """``Expand`` to a constant shape its input already has (dims of 1 broadcast to it)."""
    if len(node.inputs) < 2 or node.inputs[0] is None or node.inputs[1] is None:
        return False
    shape = static_shape(node.inputs[0])
    target = constant_array(node.inputs[1])
    if shape is None or target is None:
        return False
    target_dims = [int(d) for d in target.reshape(-1)]
    if len(target_dims) > len(shape):
        return False
    padded = [1] * (len(shape) - len(target_dims)) + target_dims
    return all(t in (1, d) for t, d in zip(padded, shape))


def _slice_is_identity(node: FlatNode) -> bool:
    """``Slice`` whose constant starts are 0, ends reach past each axis, steps are 1."""
    if len(node.inputs) < 3 or any(v is None for v in node.inputs[:3]):
        return False
    data = node.inputs[0]
    assert data is not None
    arrays = [constant_array(v) if v is not None else None for v in node.inputs[1:]]
    if any(a is None for a in arrays[:2]):
        return False
    starts, ends = (np.asarray(a).reshape(-1) for a in arrays[:2])
    steps = arrays[3] if len(arrays) > 3 else None
    if steps is not None and not np.all(np.asarray(steps) == 1):
        return False
    if len(arrays) > 3 and node.inputs[4] is not None and steps is None:
        return False  # steps given but not constant
    if not np.all(starts == 0):
        return False
    if np.all(ends == _INT64_MAX):
        return True
    shape = static_shape(data)
    if shape is None:
        return False
    axes_array = arrays[2] if len(arrays) > 2 else None
    if len(node.inputs) > 3 and node.inputs[3] is not None and axes_array is None:
        return False
    axes = (
        [int(a) for a in np.asarray(axes_array).reshape(-1)]
        if axes_array is not None
        else list(range(len(ends)))
    )
    for axis, end in zip(axes, ends):
        axis = axis + len(shape) if axis < 0 else axis
        if not 0 <= axis < len(shape) or int(end) < shape[axis]:
            return False
    return True


# -- 2. constant sharing --------------------------------------------------------------------


def _share_constants(state: ScopeEdits) -> bool:
    """One round of rule 2. Each initializer's key is computed once per prediction
    (``state.sharing_keys``): all it reads, the value's element count and its tensor's
    type, shape and bytes, stays as it is once the value is an initializer (the model
    is not edited while predicted; folding sets a value's count as it makes it one)."""
    shared: dict[Hashable, FlatValue] = {}
    changed = False
    keys = state.sharing_keys
    missing = _MISSING
    for value in state.scope.values:
        if value.kind != "initializer" or value.is_output or not value.consumers:
            continue
        key = keys.get(value, missing)
        if key is missing:
            key = keys[value] = _sharing_key(value)
        if key is None:
            continue
        first = shared.setdefault(key, value)
        if first is not value:
            state.replace(value, first)
            changed = True
    return changed


def _sharing_key(value: FlatValue) -> Hashable | None:
    if value.size is None or not 0 < value.size <= _SHARED_MAX_ELEMENTS:
        return None
    tensor = constant_tensor(value)
    if tensor is None or tensor.dtype not in _SHARED_TYPES:
        return None
    try:
        array = tensor_array(tensor)
    except Exception:  # unreadable data (external data that is not there)
        return None
    return (tensor.dtype, tuple(array.shape), array.tobytes())


# -- 4. constant folding --------------------------------------------------------------------


def _fold_constants(state: ScopeEdits, shapes: LoadShapes | None = None) -> bool:
    changed = False
    nodes = state.scope.nodes
    if shapes is not None:  # ORT's order, inferring each node again once one has folded
        nodes = state.order()
    for node in nodes:
        if not state.optimizable(node):
            continue
        if shapes is not None and changed:
            shapes.update(node)
        rule = _folding_rule(node)
        if rule is None:
            continue
        if shapes is not None:
            shapes.evaluate(node)  # what ORT computes, for its next inference
        producers = [v.producer for v in node.inputs if v is not None and v.producer is not None]
        state.fold(node, rule)
        for producer in producers:
            _remove_unused_chain(state, producer)
        changed = True
    return changed


def _folding_rule(node: FlatNode) -> str | None:
    # The checks are pure: the cheap ones first (most nodes have a computed input), the
    # look at the node's attributes for subgraphs last.
    if node.domain != "" or node.op_type in NON_DETERMINISTIC:
        return None
    if node.op_type == "Shape":
        data = node.inputs[0] if node.inputs else None
        if data is None or static_shape(data) is None:
            return None
        return None if _not_foldable(node) else "shape_folding"
    if node.op_type == "DequantizeLinear":
        return None  # ORT keeps QDQ node units (it folds a whole DQ -> X -> Q unit only)
    if any(v is not None and v.kind != "initializer" for v in node.inputs):
        return None
    if _not_foldable(node):
        return None
    cpu = installed_cpu_table()
    if (
        cpu is not None
        and node.since_version is not None
        and cpu.match("", node.op_type, node.since_version) is None
    ):
        return None
    return "constant_folding"


def _not_foldable(node: FlatNode) -> bool:
    """A node with a subgraph, or an output that is not a tensor (only tensors become
    initializers)."""
    if any(o is not None and not (o.dtype or "").startswith("tensor(") for o in node.outputs):
        return True
    return has_subgraph(node)


def _remove_unused_chain(state: ScopeEdits, node: FlatNode) -> None:
    """ORT's RemoveNodesWithOneOutputBottomUp: a node left without consumers, whose outputs
    are not graph outputs, goes, and so on up its inputs."""
    work = [node]
    while work:
        current = work.pop()
        if not state.optimizable(current) or has_subgraph(current):
            continue
        if any(o is not None and (o.consumers or o.is_output) for o in current.outputs):
            continue
        producers = [v.producer for v in current.inputs if v is not None and v.producer]
        state.remove(current, "unused_after_folding")
        work.extend(p for p in producers if p is not None)
