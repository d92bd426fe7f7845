"""Legalize a model for an execution provider: put on the EP the nodes it cannot run.

Choosing an opset (:mod:`.lower_for_ep`) cannot help a node whose op the EP has no kernel
for at any version (the WebGPU EP has no ai.onnx ``Attention`` kernel at all). This module
rewrites such nodes, at the model's opset, when that moves work onto the EP. Rules:

1. **Only fallback nodes.** A node is a candidate only when
   :func:`~onnxscript_ep_passes.ep.placement.predict_placement` says it falls back to CPU
   for lack of a kernel (not ORT's choice to keep shape computations on CPU). A node the
   EP runs is never touched, so an EP with an ``Attention`` kernel keeps its ``Attention``.
   Candidates are the IR nodes the prediction points at; nothing is looked up by name.
2. **Function expansion.** A candidate whose ai.onnx schema has an ONNX function body
   (fixed or context-dependent: Attention, RMSNormalization, RotaryEmbedding, Gelu,
   LayerNormalization, Swish, ...) is replaced in place by that body, exactly as ONNX
   defines it (:func:`~onnxscript_ep_passes.lowering.expansion.expand_node`).
3. **Static shape folding** of the body's nodes (and of the nodes a lowering built):
   :mod:`.static_shapes`.
4. **Cost decision.** An expansion is kept only when the estimated cost of the whole
   model gets strictly cheaper under the EP cost objective
   (:func:`~onnxscript_ep_passes.ep.cost.placement_cost`). The fallback nodes of one op
   type are tried together first; when that does not pay, up to ``_MAX_SINGLE_TRIES`` of
   them one by one. A trial is made on the model itself and undone when it does not pay,
   or when anything fails while it is priced (:mod:`~onnxscript_ep_passes.core.checkpoint`:
   no copy of the model is made); :class:`LegalizeForEpPass` likewise leaves the model as
   it was when legalizing it fails. Kept expansions may expose new candidates (a body
   node that is a function op): the search repeats until nothing more is kept. The kept
   rewrites are recorded, to be made again on another copy (:mod:`.rewrites`).
5. **Bool widening** (decision ``ep_equivalent``): a candidate without a function body
   that only moves bool data (``Pad``, ``Shape``, ``Slice`` ... of a mask) and that the EP
   runs in another type is run in that type between exact Casts
   (:mod:`.widen_bool`), under the same cost rule as an expansion; the nodes sharing
   bool values form one group (a mask's ``Pad``, ``Slice`` and ``Shape`` leave CPU
   only together). EP-native
   equivalents (com.microsoft ``MultiHeadAttention``/``GroupQueryAttention`` for a
   standard ``Attention``) are not used: no mapping has been proven equal to the
   original in real EP sessions here, and expansion is exact.
6. Not rewritten: nodes in model-local functions (a function body is shared by all its
   call sites; :attr:`NodePlacement.function`), and nodes of other domains. A node of a
   schema body ORT inlines itself (:attr:`NodePlacement.inlined_by_ort`) is not a
   candidate; the model's node whose body it is is one.
7. Every fallback node gets a :class:`LegalizationDecision` (node, op, decision, reason).
"""

from __future__ import annotations

__all__ = [
    "Decision",
    "LegalizationDecision",
    "LegalizationResult",
    "LegalizeForEpPass",
    "LegalizeForEpResult",
    "legalize",
    "untried_legalization",
]

import collections
import dataclasses
import logging
import os
from collections.abc import Iterable
from typing import Literal

import onnx_ir as ir

from onnxscript_ep_passes.core.checkpoint import EditLog, checkpoint
from onnxscript_ep_passes.core.collector import collect_young
from onnxscript_ep_passes.core.progress import track
from onnxscript_ep_passes.ep.cost import PlacementCost, placement_cost
from onnxscript_ep_passes.ep.dims import DimSizes, DimsSpec
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.placement import NodePlacement, PlacementPrediction, predict_placement
from onnxscript_ep_passes.ep.profiles import EpProfile
from onnxscript_ep_passes.ep.target import EpTarget
from onnxscript_ep_passes.lowering import schemas
from onnxscript_ep_passes.lowering.context import NameIndex
from onnxscript_ep_passes.lowering.expansion import function_body_version
from onnxscript_ep_passes.lowering.opset_imports import require_default_opset
from onnxscript_ep_passes.passes.ep_pass import EpPass
from onnxscript_ep_passes.passes.options import SearchOptions, search_options
from onnxscript_ep_passes.passes.rewrites import KeptRewrites, Rewrite, rewrite_nodes, widens
from onnxscript_ep_passes.passes.static_shapes import fold_static_shapes
from onnxscript_ep_passes.passes.widen_bool import bool_components, widen_carrier

logger = logging.getLogger(__name__)

Decision = Literal["lower", "ep_equivalent", "expand", "cpu"]
"""``"lower"`` (it runs on the EP at the chosen, lower opset), ``"ep_equivalent"`` (run on
the EP in an exactly equivalent form: a bool data-movement node in another type between
Casts, rule 5), ``"expand"`` (replaced by its ONNX function body) or
``"cpu"`` (left on CPU)."""

_MAX_SINGLE_TRIES = 4
_WIDEN_GROUP = "bool data movement"
_MAX_ROUNDS = 4


@dataclasses.dataclass(frozen=True)
class LegalizationDecision:
    """What was done about one node the EP cannot run.

    Attributes:
        node: The node's name, for people (``""`` when unnamed).
        op_type, domain: The node's operator (domain ``""`` for ai.onnx).
        since_version: The since_version of its schema at the model's opset.
        opset: The opset the decision holds for.
        decision: A :data:`Decision`.
        reason: Why, in words.
        ir_node: The IR node the decision is about (in the model it was made on).
    """

    node: str
    op_type: str
    domain: str
    since_version: int | None
    opset: int
    decision: Decision
    reason: str
    ir_node: ir.Node | None = dataclasses.field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, object]:
        """The decision as JSON-ready data (without the IR node)."""
        return {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "ir_node"
        }

    def __str__(self) -> str:
        op = f"{self.domain}::{self.op_type}" if self.domain else self.op_type
        version = f"-{self.since_version}" if self.since_version is not None else ""
        return f"{self.node or '<unnamed>'} ({op}{version}): {self.decision}: {self.reason}"


@dataclasses.dataclass
class LegalizationResult:
    """What :func:`legalize` did.

    Attributes:
        opset: The model's ai.onnx opset.
        decisions: One per node predicted to fall back before legalization.
        expanded: The expanded nodes (no longer in the model), in the order they were
            expanded.
        widened: The nodes run in another type between Casts (rule 5; still in the
            model).
        folded: Nodes replaced by constants.
        before, after: Predicted placement before and after.
        after_cost: The estimated cost of ``after`` (:func:`placement_cost` on the model).
        tried: How many nodes the search tried to rewrite (0: it found no candidate,
            and ``after`` is the prediction of the model once folded).
        rewrites: The rewrites kept, in order (:func:`~.rewrites.replay_rewrites`).
    """

    opset: int
    decisions: list[LegalizationDecision]
    expanded: list[ir.Node]
    folded: int
    before: PlacementPrediction
    after: PlacementPrediction
    after_cost: PlacementCost
    widened: list[ir.Node] = dataclasses.field(default_factory=list)
    tried: int = 0
    rewrites: tuple[Rewrite, ...] = ()

    @property
    def modified(self) -> bool:
        return bool(self.expanded or self.folded or self.widened)


def _candidate_reason(placed: NodePlacement, opset: int, table: KernelTable) -> str | None:
    """Why a fallback node is not a candidate (None when it is one)."""
    if placed.function is not None:
        return "inside a model-local function (shared by its call sites): not rewritten"
    if not schemas.is_default_domain(placed.domain):
        return f"no EP kernel, and ops of domain '{placed.domain}' are not rewritten"
    if function_body_version(placed.op_type, opset, placed.domain) is None:
        if placed.node is not None and widen_carrier(placed.node, table, opset) is not None:
            return None
        return f"{placed.reason}; {placed.op_type} has no ONNX function body to expand"
    return None


def _inlined_parents(prediction: PlacementPrediction) -> list[ir.Node]:
    """The model's nodes whose schema body ORT inlines (no kernel on any EP, CPU included).

    The prediction lists their body's nodes instead of them; they can be expanded (and
    their shape math folded) like fallback nodes. Nodes of model-local functions are left
    out (rule 6).
    """
    parents = {
        p.node: None
        for p in prediction.nodes
        if p.inlined_by_ort and p.node is not None and p.function is None
    }
    return list(parents)


class _Search:
    """One legalization search over a model (rule 4)."""

    def __init__(self, model: ir.Model, table: KernelTable, opset: int, sizes: DimSizes) -> None:
        self.model = model
        self.log: EditLog | None = None  # set: the first kept trial's checkpoint goes into it
        self.table = table
        self.opset = opset
        self.sizes = sizes
        self.expanded: list[ir.Node] = []
        self.widened: list[ir.Node] = []
        self.expanded_ops: collections.Counter[str] = collections.Counter()
        self.kept_on_cpu: dict[ir.Node, str] = {}
        self.tried: set[ir.Node] = set()
        self.priced: tuple[PlacementPrediction, PlacementCost] | None = None  # the last one
        self.names = NameIndex(model.graph)  # the node names, read once per search
        self.kept = KeptRewrites(model)  # the rewrites kept, to be replayed

    def cost(self, prediction: PlacementPrediction) -> PlacementCost:
        """The cost of ``prediction`` (of the model), priced once per prediction."""
        if self.priced is None or self.priced[0] is not prediction:
            self.priced = (prediction, placement_cost(prediction, self.model, self.sizes))
        return self.priced[1]

    def run(self, current: PlacementPrediction) -> PlacementPrediction:
        for _ in range(_MAX_ROUNDS):
            groups = self._groups(current)
            if not groups:
                break
            progress = False
            trials = track(groups.items(), f"legalize at opset {self.opset}", len(groups))
            for op_type, nodes in trials:
                self.tried.update(nodes)
                accepted, current = self._try_group(nodes, current)
                for node in accepted:
                    (self.widened if widens(node, self.opset) else self.expanded).append(node)
                self.expanded_ops[op_type] += len(accepted)
                progress = progress or bool(accepted)
                logger.debug("%s: expanded %d of %d", op_type, len(accepted), len(nodes))
            if not progress:
                break
        return current

    def _groups(self, current: PlacementPrediction) -> dict[str, list[ir.Node]]:
        groups: dict[str, list[ir.Node]] = collections.defaultdict(list)
        inlined_fallback = False
        for placed in current.fallback_nodes:
            node = placed.node
            if placed.inlined_by_ort:
                inlined_fallback = True  # its parent (below) is the candidate
                continue
            if node is None or placed.inserted_by_ort or node in self.tried:
                continue
            reason = _candidate_reason(placed, self.opset, self.table)
            if reason is not None:
                self.kept_on_cpu.setdefault(node, reason)
                continue
            key = _WIDEN_GROUP if widens(node, self.opset) else placed.op_type
            if node not in groups[key]:
                groups[key].append(node)
        if inlined_fallback:
            for node in _inlined_parents(current):
                if node not in self.tried:
                    groups[node.op_type].append(node)
        # Bool data movement is tried per set of nodes sharing bool values (rule 5).
        for index, component in enumerate(bool_components(groups.pop(_WIDEN_GROUP, []))):
            groups[f"{_WIDEN_GROUP} {index + 1}"] = component
        return groups

    def _try_group(
        self, nodes: list[ir.Node], current: PlacementPrediction
    ) -> tuple[list[ir.Node], PlacementPrediction]:
        """Expand ``nodes`` if it pays: all together, else up to a few one by one."""
        accepted, current, why = self._try(nodes, current)
        if accepted:
            return accepted, current
        if len(nodes) == 1:
            self.kept_on_cpu[nodes[0]] = why
            return [], current
        kept: list[ir.Node] = []
        for index, node in enumerate(nodes):
            if index >= _MAX_SINGLE_TRIES:
                self.kept_on_cpu[node] = (
                    f"{why} (not tried alone: the first {_MAX_SINGLE_TRIES} did not pay)"
                )
                continue
            ok, current, single_why = self._try([node], current)
            kept.extend(ok)
            if not ok:
                self.kept_on_cpu[node] = single_why
        return kept, current

    def _try(
        self, nodes: list[ir.Node], current: PlacementPrediction
    ) -> tuple[list[ir.Node], PlacementPrediction, str]:
        """Expand ``nodes`` in place; put the model back unless it pays (or on error)."""
        self.kept.before_trial()
        mark = checkpoint(self.model)
        try:
            built, failed = rewrite_nodes(nodes, self.model, self.opset, self.table, self.names)
            why = ""
            if len(failed) == len(nodes):
                why = f"cannot be expanded: {next(iter(failed.values()))}"
            else:
                prediction = predict_placement(self.model, self.table)
                old = self.cost(current)
                new = placement_cost(prediction, self.model, self.sizes)
                if not new.improves_on(old):
                    why = f"expanding it would not help: predicted {new} instead of {old}"
        except BaseException:
            mark.restore()
            raise
        if why:
            mark.restore()
            collect_young()  # the trial's nodes and flat graph
            return [], current, why
        self.priced = (prediction, new)
        if self.log is not None:  # undoing the first kept trial undoes all kept after it
            self.log.nest(mark)
            self.log = None
        kept = [n for n in nodes if n not in failed]
        for node in kept:
            self.kept.keep(node, built[node])
        return kept, prediction, ""


def legalize(
    model: ir.Model,
    table: KernelTable,
    *,
    built: Iterable[ir.Node] = (),
    prediction: PlacementPrediction | None = None,
    cost: PlacementCost | None = None,
    dims: DimSizes | None = None,
    log: EditLog | None = None,
) -> LegalizationResult:
    """Legalize ``model`` in place for ``table``'s EP at its current opset (module docstring).

    Args:
        model: The model; changed in place.
        table: The EP's kernel table.
        built: Nodes of ``model`` that an earlier rewrite (a lowering) built: their static
            shape math is folded first.
        prediction, cost: The model's predicted placement on ``table`` (its records must
            point at ``model``'s nodes) and its cost with ``dims``, when already known
            (used only when nothing was folded).
        dims: Sizes of symbolic dimensions for the cost estimate (defaults if None).
        log: Given, ``log.restore()`` puts ``model`` back (folding logged, a trial nested).

    Returns:
        The decisions, the expanded nodes and the predictions before and after.
    """
    opset = require_default_opset(model)
    folded = fold_static_shapes(list(built), opset, log=log)
    if prediction is None or folded:
        prediction, cost = predict_placement(model, table), None
    before = prediction
    search = _Search(model, table, opset, dims or DimSizes())
    search.log, search.priced = log, None if cost is None else (before, cost)
    before_cost = search.cost(before)
    after = search.run(before)
    after_cost = search.cost(after)  # ``before_cost`` when nothing changed
    decisions = _decisions(before, f"predicted {before_cost} -> {after_cost}", search, opset)
    if search.expanded or search.widened:  # in an EP search, the EP pass logs the summary
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(search.expanded_ops.items()))
        logger.debug(
            "Legalized '%s' for %s at opset %d: expanded %d nodes (%s); predicted %s -> %s",
            *(model.graph.name, table.ep, opset, len(search.expanded), ops),
            *(before_cost, after_cost),
        )
    return LegalizationResult(
        *(opset, decisions, search.expanded, folded, before, after, after_cost),
        *(search.widened, len(search.tried), tuple(search.kept.rewrites)),
    )


def untried_legalization(
    model: ir.Model,
    table: KernelTable,
    folded: int,
    prediction: PlacementPrediction,
    cost: PlacementCost,
    dims: DimSizes,
) -> LegalizationResult | None:
    """What :func:`legalize` returns for ``model`` when folding its built nodes' shape
    math folds ``folded`` of them into a model predicted as ``prediction`` (its records
    pointing at ``model``'s nodes) at ``cost``, and its search finds no node to try;
    None when it finds one (the trials need the folded model). ``model`` is not
    changed: folding it is the caller's (:func:`~.twins.derive_legalization`)."""
    opset = require_default_opset(model)
    search = _Search(model, table, opset, dims)
    if search._groups(prediction):
        return None
    decisions = _decisions(prediction, f"predicted {cost} -> {cost}", search, opset)
    return LegalizationResult(opset, decisions, [], folded, prediction, prediction, cost)


def _decisions(
    before: PlacementPrediction, gain: str, search: _Search, opset: int
) -> list[LegalizationDecision]:
    expanded, widened = set(search.expanded), set(search.widened)
    decisions: list[LegalizationDecision] = []
    for placed in before.fallback_nodes:
        if placed.inserted_by_ort or placed.inlined_by_ort or placed.node is None:
            continue
        if placed.node in expanded:
            decision: Decision = "expand"
            reason = (
                f"{placed.reason}; expanded through its ONNX function body ({gain} for the "
                "whole model)"
            )
        elif placed.node in widened:
            decision = "ep_equivalent"
            reason = (
                f"{placed.reason}; run on the EP in another type between exact Casts "
                f"({gain} for the whole model)"
            )
        else:
            decision = "cpu"
            reason = search.kept_on_cpu.get(placed.node, placed.reason)
        decisions.append(
            LegalizationDecision(
                placed.name,
                placed.op_type,
                placed.domain,
                placed.since_version,
                opset,
                decision,
                reason,
                placed.node,
            )
        )
    inlined_fallback = sum(1 for n in before.fallback_nodes if n.inlined_by_ort)
    for node in _inlined_parents(before):
        if node not in expanded and node not in search.kept_on_cpu:
            continue
        why = (
            f"no kernel for {node.op_type} on any EP, CPU included: ORT inlines its function "
            f"body ({inlined_fallback} body nodes of such ops fall back)"
        )
        if node in expanded:
            decision, reason = "expand", f"{why}; expanded here, shape math folded ({gain})"
        else:
            decision, reason = "cpu", f"{why}; {search.kept_on_cpu[node]}"
        decisions.append(
            LegalizationDecision(
                node.name or "",
                node.op_type,
                node.domain,
                schemas.since_version(node.op_type, opset, node.domain),
                opset,
                decision,
                reason,
                node,
            )
        )
    return decisions


@dataclasses.dataclass
class LegalizeForEpResult(ir.passes.PassResult):
    """The result of :class:`LegalizeForEpPass`: ``legalization`` is None for the CPU EP."""

    legalization: LegalizationResult | None = None


class LegalizeForEpPass(EpPass):
    """Legalize the model for ``ep`` at its current opset (see the module docstring).

    Args:
        ep, ort_version, table, kernel_table, options, dims: As for
            :class:`~onnxscript_ep_passes.passes.LowerOpsetForEpPass` (only dims are read).

    The pass returns a :class:`LegalizeForEpResult`.
    """

    def __init__(
        self,
        ep: str | EpProfile | EpTarget,
        ort_version: str | None = None,
        *,
        table: KernelTable | None = None,
        dims: DimsSpec = None,
        kernel_table: str | os.PathLike[str] | None = None,
        options: SearchOptions | None = None,
    ) -> None:
        super().__init__(ep, ort_version, table, kernel_table)
        self.options = search_options(options, dims=dims)

    def call(self, model: ir.Model) -> LegalizeForEpResult:
        if self.profile.is_host:
            return LegalizeForEpResult(model, False)
        table = self.request.resolve().table
        mark = checkpoint(model)
        try:
            result = legalize(model, table, dims=self.options.dims)
        except BaseException:
            mark.restore()  # the caller's model as it was, whatever failed
            raise
        logger.info(
            "Legalized '%s' for %s at opset %d: %d nodes expanded",
            *(model.graph.name, table.ep, result.opset, len(result.expanded)),
        )
        return LegalizeForEpResult(model, result.modified, result)
