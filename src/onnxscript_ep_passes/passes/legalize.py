"""Legalize a model for an execution provider: put on the EP the nodes it cannot run.

Choosing an opset (:mod:`.lower_for_ep`) cannot help a node whose op the EP has no kernel
for at any version (the WebGPU EP has no ai.onnx ``Attention`` kernel at all). This module
rewrites such nodes, at the model's opset, when that moves work onto the EP. Rules:

1. **Only fallback nodes.** A node is a candidate only when
   :func:`~onnxscript_ep_passes.ep.placement.predict_placement` says it falls back to CPU
   for lack of a kernel (not ORT's choice to keep shape computations on CPU). A node the
   EP runs is never touched, so an EP with an ``Attention`` kernel keeps its ``Attention``.
2. **Function expansion.** A candidate whose ai.onnx schema has an ONNX function body
   (fixed or context-dependent: Attention, RMSNormalization, RotaryEmbedding, Gelu,
   LayerNormalization, Swish, ...) is replaced in place by that body, exactly as ONNX
   defines it (:func:`~onnxscript_ep_passes.lowering.expansion.expand_node`).
3. **Static shape folding.** The body computes shapes at run time (``Shape``, ``Concat``,
   ``Div``/``Mod`` on int64 ...), which an EP such as WebGPU runs on CPU. Every body node
   whose result is known statically is replaced by a ``Constant``: ``Shape``/``Size`` of a
   value whose (selected) dimensions are static, and any deterministic node whose inputs
   are all constants of at most ``max_elements`` elements (evaluated with ONNX's reference
   implementation; a result whose type or shape disagrees with the value's declared one is
   not used). Nodes left without a use are removed. Only nodes built by the rewrite (or
   by the lowering) are folded; the rest of the model is not touched. This is exact, given
   the model's declared static dimensions.
4. **Cost decision.** An expansion is kept only when the estimated cost of the whole
   model's predicted placement gets strictly lower, and the result does not move more
   bytes and leave more CPU compute at once
   (:meth:`~onnxscript_ep_passes.ep.cost.PlacementCost.improves_on`; symbolic
   dimensions sized by ``dims``). The fallback nodes of one op type are tried together first;
   when that does not pay, up to ``_MAX_SINGLE_TRIES`` of them one by one. Trials run on
   a copy of the model (sharing the weights); kept expansions are then replayed on the
   model. Kept expansions may expose new candidates (a body node that is a function op):
   the search repeats until nothing more is kept.
5. **EP-native equivalents** (com.microsoft ``MultiHeadAttention``/``GroupQueryAttention``
   for a standard ``Attention``) are not used: no mapping has been proven equal to the
   original in real EP sessions here, and expansion is exact.
6. Not rewritten: nodes in model-local functions (a function body is shared by all its
   call sites), nodes of other domains, and unnamed nodes (a decision must name its node).
7. Every fallback node gets a :class:`LegalizationDecision` (node, op, decision, reason).
"""

from __future__ import annotations

__all__ = [
    "LegalizationDecision",
    "LegalizationResult",
    "LegalizeForEpPass",
    "fold_static_shapes",
    "legalize",
]

import collections
import dataclasses
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import numpy as np
import onnx
import onnx.helper
import onnx.reference
import onnx_ir as ir

from onnxscript_ep_passes.ep.cost import PlacementCost, placement_cost
from onnxscript_ep_passes.ep.dims import DimSizes
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.names import canonical_ep_name
from onnxscript_ep_passes.ep.placement import NodePlacement, PlacementPrediction, predict_placement
from onnxscript_ep_passes.ep.shapes import small_constant
from onnxscript_ep_passes.ep.table_choice import get_table
from onnxscript_ep_passes.lowering import schemas
from onnxscript_ep_passes.lowering.context import NodeRefusedError
from onnxscript_ep_passes.lowering.expansion import expand_node, function_body_version
from onnxscript_ep_passes.lowering.lower_opset import default_opset

logger = logging.getLogger(__name__)

Decision = Literal["lower", "ep_equivalent", "expand", "cpu"]

_MAX_SINGLE_TRIES = 4
_MAX_ROUNDS = 4
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


@dataclasses.dataclass(frozen=True)
class LegalizationDecision:
    """What was done about one node the EP cannot run.

    Attributes:
        node: The node's name.
        op_type, domain: The node's operator (domain ``""`` for ai.onnx).
        since_version: The since_version of its schema at the model's opset.
        opset: The opset the decision holds for.
        decision: ``"lower"`` (it runs on the EP at the chosen, lower opset),
            ``"ep_equivalent"`` (mapped to an EP-native op; not used yet), ``"expand"``
            (replaced by its ONNX function body) or ``"cpu"`` (left on CPU).
        reason: Why, in words.
    """

    node: str
    op_type: str
    domain: str
    since_version: int | None
    opset: int
    decision: Decision
    reason: str

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        op = f"{self.domain}::{self.op_type}" if self.domain else self.op_type
        version = f"-{self.since_version}" if self.since_version is not None else ""
        return f"{self.node} ({op}{version}): {self.decision}: {self.reason}"


@dataclasses.dataclass
class LegalizationResult:
    """What :func:`legalize` did.

    Attributes:
        opset: The model's ai.onnx opset.
        decisions: One per node predicted to fall back before legalization.
        expanded: Names of the expanded nodes, in the order they were expanded (replaying
            them with ``legalize(..., plan=expanded)`` rebuilds the same model).
        folded: Nodes replaced by constants.
        before, after: Predicted placement before and after.
    """

    opset: int
    decisions: list[LegalizationDecision]
    expanded: list[str]
    folded: int
    before: PlacementPrediction | None
    after: PlacementPrediction | None

    @property
    def modified(self) -> bool:
        return bool(self.expanded or self.folded)


# -- static shape folding --------------------------------------------------------------


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
    Nodes among them left without a use are removed (see the module docstring, rule 3).
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
    changed = True
    while changed:
        changed = False
        for node in reversed(nodes):
            graph = node.graph
            if graph is None:
                continue
            if any(o.uses() or o.is_graph_output() for o in node.outputs):
                continue
            graph.remove(node, safe=True)
            changed = True


# -- legalization ----------------------------------------------------------------------


def _nodes_by_name(model: ir.Model) -> dict[str, ir.Node]:
    counts: collections.Counter[str] = collections.Counter()
    found: dict[str, ir.Node] = {}
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.name:
            counts[node.name] += 1
            found[node.name] = node
    return {name: node for name, node in found.items() if counts[name] == 1}


def _expand_and_fold(model: ir.Model, names: Sequence[str], opset: int) -> list[str]:
    """Expand the named nodes (then fold their bodies); the names that could not be."""
    by_name = _nodes_by_name(model)
    failed: list[str] = []
    for name in names:
        node = by_name.get(name)
        if node is None or node.graph is None:  # built by an earlier expansion
            by_name = _nodes_by_name(model)
            node = by_name.get(name)
        if node is None:
            failed.append(name)
            continue
        try:
            built = expand_node(model, node, opset)
        except NodeRefusedError as refusal:
            logger.debug("cannot expand %s: %s", name, refusal.reason)
            failed.append(name)
            continue
        fold_static_shapes(built, opset)
    return failed


def _why_refused(model: ir.Model, name: str, opset: int) -> str | None:
    """Try to expand ``name`` on a copy; the refusal reason, or None when it expands."""
    trial = model.clone()
    node = _nodes_by_name(trial).get(name)
    if node is None:
        return "the node cannot be found by its name"
    try:
        expand_node(trial, node, opset)
    except NodeRefusedError as refusal:
        return refusal.reason
    return None


def _describe(cost: PlacementCost) -> str:
    return f"{cost.fallback_nodes} fallback nodes, {cost}"


def legalize(
    model: ir.Model,
    table: KernelTable,
    *,
    built: Iterable[ir.Node] = (),
    plan: Sequence[str] | None = None,
    prediction: PlacementPrediction | None = None,
    dims: DimSizes | None = None,
) -> LegalizationResult:
    """Legalize ``model`` in place for ``table``'s EP at its current opset (module docstring).

    Args:
        model: The model; changed in place.
        table: The EP's kernel table.
        built: Nodes that an earlier rewrite (a lowering) built, in graph order: their static
            shape math is folded first.
        plan: Replay: expand exactly these nodes (names, in order) without predicting; the
            ``expanded`` list of an earlier result on the same model.
        prediction: The model's predicted placement on ``table``, when already known
            (used only when nothing was folded).
        dims: Sizes of symbolic dimensions for the cost estimate (default sizes if None).

    Returns:
        The decisions, the expanded nodes and the predictions before and after (None in
        replay mode).
    """
    opset = default_opset(model.opset_imports)
    if opset is None:
        raise ValueError("the model imports no ai.onnx opset")
    folded = fold_static_shapes(list(built), opset)
    if plan is not None:
        failed = _expand_and_fold(model, plan, opset)
        if failed:
            raise RuntimeError(f"replaying the legalization failed for nodes {failed}")
        return LegalizationResult(opset, [], list(plan), folded, None, None)

    sizes = dims or DimSizes()
    if prediction is None or folded:
        prediction = predict_placement(model, table)
    before = prediction
    before_cost = current_cost = placement_cost(prediction, model, sizes)
    local = _local_functions(model)
    parents = _inlined_parents(model, before, opset)
    current = before
    expanded: list[str] = []
    expanded_ops: collections.Counter[str] = collections.Counter()
    kept_on_cpu: dict[str, str] = {}
    tried: set[str] = set()
    for _ in range(_MAX_ROUNDS):
        groups: dict[str, list[str]] = collections.defaultdict(list)
        by_name = _nodes_by_name(model)
        inlined_fallback = False
        for placed in current.fallback_nodes:
            if _inlined_by_ort(placed, local):
                inlined_fallback = True  # its parent (below) is the candidate
                continue
            if placed.name in tried or placed.inserted_by_ort:
                continue
            reason = _not_a_candidate(placed, by_name, opset)
            if reason is not None:
                kept_on_cpu.setdefault(placed.name, reason)
                continue
            groups[placed.op_type].append(placed.name)
        if inlined_fallback:
            for name, node in _inlined_parents(model, current, opset).items():
                if name not in tried:
                    groups[node.op_type].append(name)
        if not groups:
            break
        progress = False
        for op_type, names in groups.items():
            tried.update(names)
            accepted, current, current_cost, reasons = _try_group(
                model, table, names, opset, (current, current_cost), sizes
            )
            expanded.extend(accepted)
            expanded_ops[op_type] += len(accepted)
            kept_on_cpu.update(reasons)
            progress = progress or bool(accepted)
            logger.debug("%s: expanded %d of %d", op_type, len(accepted), len(names))
        if not progress:
            break

    gain = f"predicted {_describe(before_cost)} -> {_describe(current_cost)}"
    decisions = _decisions(before, gain, expanded, kept_on_cpu, opset, local, parents)
    after = current
    if expanded:
        logger.info(
            "Legalized '%s' for %s at opset %d: expanded %d nodes (%s); predicted %s -> %s",
            model.graph.name,
            table.ep,
            opset,
            len(expanded),
            ", ".join(f"{op} x{n}" for op, n in sorted(expanded_ops.items())),
            _describe(before_cost),
            _describe(current_cost),
        )
    return LegalizationResult(opset, decisions, expanded, folded, before, after)


def _local_functions(model: ir.Model) -> set[str]:
    return {f"{f.domain}::{f.name}" if f.domain else f.name for f in model.functions.values()}


_FUNCTION_SCOPE = re.compile(r"function '([^']*)'")


def _inlined_by_ort(placed: NodePlacement, local_functions: set[str]) -> bool:
    """A node of a schema's function body that ORT inlines (not of a model-local function)."""
    return any(f not in local_functions for f in _FUNCTION_SCOPE.findall(placed.scope))


def _inlined_parents(
    model: ir.Model, prediction: PlacementPrediction, opset: int
) -> dict[str, ir.Node]:
    """Nodes of the model that ORT inlines (no kernel on any EP, CPU included).

    The prediction lists their body's nodes instead of them; they can be expanded (and
    their shape math folded) like fallback nodes.
    """
    placed = {n.name for n in prediction.nodes}
    return {
        name: node
        for name, node in _nodes_by_name(model).items()
        if name not in placed
        and schemas.is_default_domain(node.domain)
        and node.op_type != "Constant"
        and function_body_version(node.op_type, opset, node.domain) is not None
    }


def _not_a_candidate(placed: NodePlacement, by_name: dict[str, ir.Node], opset: int) -> str | None:
    if "function" in placed.scope:
        return "inside a model-local function (shared by its call sites): not rewritten"
    if not schemas.is_default_domain(placed.domain):
        return f"no EP kernel, and ops of domain '{placed.domain}' are not rewritten"
    if not placed.name or placed.name not in by_name:
        return "no EP kernel, and the node has no unique name to rewrite it by"
    if function_body_version(placed.op_type, opset, placed.domain) is None:
        return f"{placed.reason}; {placed.op_type} has no ONNX function body to expand"
    return None


_State = tuple[PlacementPrediction, PlacementCost]


def _try_group(
    model: ir.Model,
    table: KernelTable,
    names: list[str],
    opset: int,
    state: _State,
    sizes: DimSizes,
) -> tuple[list[str], PlacementPrediction, PlacementCost, dict[str, str]]:
    """Expand ``names`` if it pays: all together, else up to a few one by one."""
    reasons: dict[str, str] = {}
    accepted, state, why = _try(model, table, names, opset, state, sizes)
    if accepted:
        return accepted, *state, reasons
    if len(names) == 1:
        reasons[names[0]] = why
        return [], *state, reasons
    kept: list[str] = []
    for index, name in enumerate(names):
        if index >= _MAX_SINGLE_TRIES:
            reasons[name] = f"{why} (not tried alone: the first {_MAX_SINGLE_TRIES} did not pay)"
            continue
        ok, state, single_why = _try(model, table, [name], opset, state, sizes)
        kept.extend(ok)
        if not ok:
            reasons[name] = single_why
    return kept, *state, reasons


def _try(
    model: ir.Model,
    table: KernelTable,
    names: list[str],
    opset: int,
    state: _State,
    sizes: DimSizes,
) -> tuple[list[str], _State, str]:
    """Expand ``names`` on a copy; replay on ``model`` when the estimated cost improves."""
    trial = model.clone()
    failed = _expand_and_fold(trial, names, opset)
    if len(failed) == len(names):
        why = _why_refused(model, failed[0], opset) or "the expansion failed"
        return [], state, f"cannot be expanded: {why}"
    done = [n for n in names if n not in failed]
    prediction = predict_placement(trial, table)
    old, new = state[1], placement_cost(prediction, trial, sizes)
    if not new.improves_on(old):
        return (
            [],
            state,
            f"expanding it would not help: predicted {_describe(new)} instead of {_describe(old)}",
        )
    again = _expand_and_fold(model, done, opset)
    assert not again, again
    return done, (prediction, new), ""


def _decisions(
    before: PlacementPrediction,
    gain: str,
    expanded: Sequence[str],
    kept_on_cpu: dict[str, str],
    opset: int,
    local_functions: set[str],
    parents: dict[str, ir.Node],
) -> list[LegalizationDecision]:
    expanded_set = set(expanded)
    decisions: list[LegalizationDecision] = []
    for placed in before.fallback_nodes:
        if placed.inserted_by_ort or _inlined_by_ort(placed, local_functions):
            continue
        if placed.name in expanded_set:
            decision: Decision = "expand"
            reason = (
                f"{placed.reason}; expanded through its ONNX function body ({gain} for the "
                "whole model)"
            )
        else:
            decision = "cpu"
            reason = kept_on_cpu.get(placed.name, placed.reason)
        decisions.append(
            LegalizationDecision(
                placed.name,
                placed.op_type,
                placed.domain,
                placed.since_version,
                opset,
                decision,
                reason,
            )
        )
    inlined_fallback = sum(1 for n in before.fallback_nodes if _inlined_by_ort(n, local_functions))
    for name, node in parents.items():
        if name not in expanded_set and name not in kept_on_cpu:
            continue
        why = (
            f"no kernel for {node.op_type} on any EP, CPU included: ORT inlines its function "
            f"body ({inlined_fallback} body nodes of such ops fall back)"
        )
        if name in expanded_set:
            decision, reason = "expand", f"{why}; expanded here, shape math folded ({gain})"
        else:
            decision, reason = "cpu", f"{why}; {kept_on_cpu[name]}"
        decisions.append(
            LegalizationDecision(
                name,
                node.op_type,
                node.domain,
                schemas.since_version(node.op_type, opset, node.domain),
                opset,
                decision,
                reason,
            )
        )
    return decisions


class LegalizeForEpPass(ir.passes.InPlacePass):
    """Legalize the model for ``ep`` at its current opset (see the module docstring).

    Args:
        ep: The EP, by ORT name or alias ("webgpu", "cuda", "dml").
        ort_version: The ORT release; None for the installed one.
        table: A kernel table to use instead of looking one up.
        dims: Sizes of symbolic dimensions for the cost estimate (see :mod:`..ep.dims`).

    After a run, ``last_result`` holds the :class:`LegalizationResult` (None for CPU).
    """

    def __init__(
        self,
        ep: str,
        ort_version: str | None = None,
        *,
        table: KernelTable | None = None,
        dims: DimSizes | Mapping[str, int] | str | None = None,
    ) -> None:
        super().__init__()
        self.dims = DimSizes.of(dims)
        self.ep = canonical_ep_name(ep)
        self.ort_version = ort_version
        self.table = table
        self.last_result: LegalizationResult | None = None

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.last_result = None
        if self.ep == "CPUExecutionProvider":
            return ir.passes.PassResult(model, modified=False)
        table = self.table or get_table(self.ep, self.ort_version)
        result = legalize(model, table, dims=self.dims)
        self.last_result = result
        return ir.passes.PassResult(model, modified=result.modified)
