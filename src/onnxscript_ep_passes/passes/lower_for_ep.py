"""Lower a model to the opset that puts the most of it on a given execution provider.

Rules the pass follows:

1. For the CPU EP (and the default, which is CPU) it does nothing: CPU kernels follow ONNX.
2. The candidates are the model's own opset and each lower one, down to 18, that the
   adapters can reach for this model. They are found by lowering one working copy (it
   shares the weights) one opset at a time; the first refusal ends the search, since
   every lower target needs the step that was refused. So does the first opset at which
   the model is predicted to run wholly on the EP (no fallback, no Memcpy): a lower one
   could only tie, and ties go to the higher opset.
3. For each candidate, ORT's placement is predicted from the EP's kernel table
   (:func:`~onnxscript_ep_passes.ep.placement.predict_placement`). The pass picks the
   candidate of lowest cost (:mod:`~onnxscript_ep_passes.ep.cost`, the one objective);
   ties go to the higher opset (fewer rewrites).
4. An explicit ``target_opset`` overrides the choice (and is refused as usual when the
   model cannot reach it).
5. It logs at INFO the original and chosen opset, the model name, the EP, the ORT version
   and the ORT tracking issue, and at WARNING every node still predicted to fall back.
6. **Legalization** (``legalize=True``, the default): no opset choice helps a node whose op
   the EP has no kernel for at any version. So each candidate opset also gets a legalized
   variant (:mod:`.legalize`): a copy of the model lowered to that opset, whose nodes built
   by the lowering have their static shape math folded, and whose remaining fallback
   nodes are expanded through their ONNX function bodies where that lowers the predicted
   cost. All candidates, plain and legalized, compete on one rank
   (:func:`~onnxscript_ep_passes.ep.cost.candidate_rank`): the cost, then fewer of the
   model's nodes replaced (by the lowering's rewrites and expansions, or by legalization:
   so a native kernel at a reachable opset beats an expansion), then the higher opset,
   then plain before legalized. Among plain
   candidates this picks what rule 3 picks (lowering further never replaces fewer nodes),
   and a node the EP runs is never expanded. A chosen legalized candidate is rebuilt on
   the model by replaying its lowering and its expansions. Each node that falls back at
   the source opset or at the chosen one gets a
   :class:`~onnxscript_ep_passes.passes.legalize.LegalizationDecision` (``lower``,
   ``expand`` or ``cpu``, with the reason) in :attr:`EpLoweringChoice.decisions`, logged at
   INFO (``cpu`` ones at DEBUG: the WARNING of rule 5 lists them).
"""

from __future__ import annotations

__all__ = ["EpLoweringChoice", "LowerOpsetForEpPass", "choose_target_opset"]

import dataclasses
import logging

import onnx_ir as ir

from onnxscript_ep_passes.ep.cost import CandidateRank, candidate_rank
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.names import canonical_ep_name
from onnxscript_ep_passes.ep.placement import PlacementPrediction, predict_placement
from onnxscript_ep_passes.ep.table_choice import get_table
from onnxscript_ep_passes.errors import DowngradeError
from onnxscript_ep_passes.lowering.lower_opset import (
    MIN_TARGET_OPSET,
    ORT_TRACKING_ISSUE,
    LowerOpsetPass,
    default_opset,
)
from onnxscript_ep_passes.passes.legalize import (
    LegalizationDecision,
    LegalizationResult,
    _inlined_by_ort,
    _local_functions,
)
from onnxscript_ep_passes.passes.legalize import (
    legalize as legalize_model,
)

logger = logging.getLogger(__name__)

CPU_EPS = frozenset({"CPUExecutionProvider"})


@dataclasses.dataclass(frozen=True)
class EpLoweringChoice:
    """What :func:`choose_target_opset` found.

    Attributes:
        ep, ort_version, table_source: The kernel table used.
        source_opset: The model's opset.
        chosen_opset: The opset picked (``source_opset`` when lowering does not help).
        predictions: The prediction for each candidate opset that was reached (plain
            lowering, no legalization).
        blocked: Why the next lower opset is out of reach (None when 18 was reached).
        legalized: Whether the chosen candidate is the legalized one.
        legalized_predictions: The prediction of the legalized variant of each candidate
            opset where legalization changed the model.
        decisions: What was done about each node that falls back at the source opset or,
            without legalization, at the chosen one.
        plan: The legalized candidates' expansions (node names, in order) per opset.
    """

    ep: str
    ort_version: str
    table_source: str
    source_opset: int
    chosen_opset: int
    predictions: dict[int, PlacementPrediction]
    blocked: DowngradeError | None
    legalized: bool = False
    legalized_predictions: dict[int, PlacementPrediction] = dataclasses.field(default_factory=dict)
    decisions: tuple[LegalizationDecision, ...] = ()
    plan: dict[int, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    @property
    def before(self) -> PlacementPrediction:
        return self.predictions[self.source_opset]

    @property
    def after(self) -> PlacementPrediction:
        if self.legalized:
            return self.legalized_predictions[self.chosen_opset]
        return self.predictions[self.chosen_opset]

    @property
    def expanded(self) -> tuple[str, ...]:
        """The nodes the chosen candidate expands (empty unless ``legalized``)."""
        return self.plan.get(self.chosen_opset, ()) if self.legalized else ()


def _rank(
    opset: int, prediction: PlacementPrediction, legalized: bool, original: set[str | None]
) -> CandidateRank:
    """The candidate's rank (:func:`~onnxscript_ep_passes.ep.cost.candidate_rank`)."""
    kept = {n.name for n in prediction.nodes}
    replaced = sum(1 for name in original if name and name not in kept)
    return candidate_rank(prediction, opset=opset, replaced=replaced, legalized=legalized)


def _node_names(model: ir.Model) -> set[str | None]:
    return {node.name for node in ir.traversal.RecursiveGraphIterator(model.graph)}


def _built_nodes(model: ir.Model, original: set[str | None]) -> list[ir.Node]:
    """Nodes a lowering built (their names are new), in graph order."""
    return [n for n in ir.traversal.RecursiveGraphIterator(model.graph) if n.name not in original]


def _legalized_variant(
    work: ir.Model,
    table: KernelTable,
    original: set[str | None],
    prediction: PlacementPrediction,
) -> LegalizationResult:
    variant = work.clone()
    return legalize_model(
        variant, table, built=_built_nodes(variant, original), prediction=prediction
    )


def choose_target_opset(
    model: ir.Model,
    table: KernelTable,
    *,
    target_opset: int | None = None,
    floor: int = MIN_TARGET_OPSET,
    legalize: bool = True,
) -> EpLoweringChoice:
    """Predict placement at each reachable opset and pick the best (see module docstring).

    ``model`` is not modified. With ``target_opset``, only the source and that opset are
    evaluated (and :class:`DowngradeError` propagates when it cannot be reached). With
    ``legalize``, each candidate opset also gets a legalized variant (rule 6).
    """
    source = default_opset(model.opset_imports)
    if source is None:
        raise ValueError("the model imports no ai.onnx opset")
    predictions = {source: predict_placement(model, table)}
    blocked: DowngradeError | None = None
    original = _node_names(model) if legalize else set()
    variants: dict[int, LegalizationResult] = {}
    if legalize:
        variants[source] = _legalized_variant(model, table, original, predictions[source])
    if target_opset is not None and target_opset < source:
        work = model.clone()
        LowerOpsetPass(target_opset, announce=False)(work)
        predictions[target_opset] = predict_placement(work, table)
        if legalize:
            variants[target_opset] = _legalized_variant(
                work, table, original, predictions[target_opset]
            )
    elif not _wholly_on_ep(predictions[source]):
        work = model.clone()
        for opset in range(source - 1, floor - 1, -1):
            try:
                LowerOpsetPass(opset, announce=False)(work)
            except DowngradeError as error:
                blocked = error
                break
            predictions[opset] = predict_placement(work, table)
            if _wholly_on_ep(predictions[opset]):
                break  # no lower opset can do better: ties go to the higher opset
            if legalize:
                variants[opset] = _legalized_variant(work, table, original, predictions[opset])
    legalized_predictions = {
        opset: v.after for opset, v in variants.items() if v.modified and v.after is not None
    }
    if target_opset is not None:
        chosen = target_opset if target_opset < source else source
    elif not legalize:
        chosen = min(predictions, key=lambda o: candidate_rank(predictions[o], opset=o))
    else:
        chosen = source  # the keyed choice below
    legalized = False
    if legalize:
        keyed = [
            (_rank(o, p, legal, original), o, legal)
            for legal, candidates in ((False, predictions), (True, legalized_predictions))
            for o, p in candidates.items()
            if target_opset is None or o == chosen
        ]
        _, chosen, legalized = min(keyed)
    after = legalized_predictions[chosen] if legalized else predictions[chosen]
    decisions = _decisions(
        predictions[source], after, variants.get(chosen), chosen, legalized, model
    )
    return EpLoweringChoice(
        ep=table.ep,
        ort_version=table.ort_version,
        table_source=table.source,
        source_opset=source,
        chosen_opset=chosen,
        predictions=predictions,
        blocked=blocked,
        legalized=legalized,
        legalized_predictions=legalized_predictions,
        decisions=decisions,
        plan={o: tuple(v.expanded) for o, v in variants.items() if v.modified},
    )


def _wholly_on_ep(prediction: PlacementPrediction) -> bool:
    return not prediction.fallback_nodes and prediction.memcpy == 0


def _decisions(
    before: PlacementPrediction,
    after: PlacementPrediction,
    variant: LegalizationResult | None,
    chosen: int,
    legalized: bool,
    model: ir.Model,
) -> tuple[LegalizationDecision, ...]:
    """One decision per node falling back at the source or at the chosen opset.

    Nodes of a function body ORT inlines (an op no EP has a kernel for) are not listed:
    the legalized variant's decision about the op's node covers them.
    """
    by_variant = {d.node: d for d in variant.decisions} if variant is not None else {}
    placed_after = {n.name: n for n in after.nodes if not n.inserted_by_ort}
    local = _local_functions(model)
    out: dict[str, LegalizationDecision] = {}
    for node in before.fallback_nodes:
        if node.inserted_by_ort or node.name in out or _inlined_by_ort(node, local):
            continue
        now = placed_after.get(node.name)
        known = by_variant.get(node.name)
        if now is not None and now.placement == "ep":
            decision: LegalizationDecision = LegalizationDecision(
                node.name,
                node.op_type,
                node.domain,
                node.since_version,
                chosen,
                "lower",
                f"{node.reason}; runs on the EP at opset {chosen} ({now.reason})",
            )
        elif legalized and known is not None:
            decision = known
        elif now is None:
            decision = LegalizationDecision(
                node.name,
                node.op_type,
                node.domain,
                node.since_version,
                chosen,
                "expand",
                f"{node.reason}; the lowering to opset {chosen} expanded it",
            )
        else:
            why = known.reason if known is not None and known.decision == "cpu" else now.reason
            decision = LegalizationDecision(
                node.name, node.op_type, node.domain, node.since_version, chosen, "cpu", why
            )
        out[node.name] = decision
    if variant is not None:
        for known in variant.decisions:
            if known.node in out:
                continue
            if not legalized and known.decision == "expand":
                now = placed_after.get(known.node)
                reason = now.reason if now is not None else known.reason
                known = dataclasses.replace(
                    known,
                    decision="cpu",
                    reason=f"{reason}; expanding it did not make the model better",
                )
            out[known.node] = known
    return tuple(out.values())


class LowerOpsetForEpPass(ir.passes.InPlacePass):
    """Lower the model to the opset best for ``ep`` (see the module docstring).

    Args:
        ep: The EP, by ORT name or alias ("webgpu", "cuda", "dml", "cpu").
        ort_version: The ORT release the model will run on; None for the installed one
            (a live kernel table when the EP can be listed here, else the nearest snapshot).
        target_opset: Force this opset instead of choosing.
        table: A kernel table to use instead of looking one up.
        legalize: Also consider legalized candidates (module docstring, rule 6); False
            gives the plain opset choice.

    After a run, ``last_choice`` holds the :class:`EpLoweringChoice` (None for CPU).
    """

    def __init__(
        self,
        ep: str,
        ort_version: str | None = None,
        target_opset: int | None = None,
        *,
        table: KernelTable | None = None,
        legalize: bool = True,
    ) -> None:
        super().__init__()
        self.ep = canonical_ep_name(ep)
        self.ort_version = ort_version
        self.target_opset = target_opset
        self.table = table
        self.legalize = legalize
        self.last_choice: EpLoweringChoice | None = None

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.last_choice = None
        if self.ep in CPU_EPS:
            logger.debug("%s runs every opset: nothing to lower", self.ep)
            return ir.passes.PassResult(model, modified=False)
        table = self.table or get_table(self.ep, self.ort_version)
        choice = choose_target_opset(
            model, table, target_opset=self.target_opset, legalize=self.legalize
        )
        self.last_choice = choice
        modified = False
        original = _node_names(model) if choice.legalized else set()
        if choice.chosen_opset < choice.source_opset:
            modified = LowerOpsetPass(choice.chosen_opset, ep=self.ep)(model).modified
        if choice.legalized:
            legalize_model(model, table, built=_built_nodes(model, original), plan=choice.expanded)
            modified = True
        for decision in choice.decisions:  # the nodes left on CPU are warned about below
            level = logging.DEBUG if decision.decision == "cpu" else logging.INFO
            logger.log(level, "'%s' on %s: %s", model.graph.name, self.ep, decision)
        after = choice.after
        logger.info(
            "Model '%s' for %s (ORT %s, %s): opset %d -> %d%s; predicted fallback nodes %d -> %d, "
            "Memcpy %d -> %d. Track when this workaround can go: %s",
            model.graph.name,
            self.ep,
            table.ort_version,
            table.source,
            choice.source_opset,
            choice.chosen_opset,
            f" (legalized: {len(choice.expanded)} nodes expanded)" if choice.legalized else "",
            len(choice.before.fallback_nodes),
            len(after.fallback_nodes),
            choice.before.memcpy,
            after.memcpy,
            ORT_TRACKING_ISSUE,
        )
        if after.fallback_nodes:
            logger.warning(
                "%d nodes of '%s' are still predicted to fall back to CPU on %s:\n%s",
                len(after.fallback_nodes),
                model.graph.name,
                self.ep,
                "\n".join(
                    f"  - {n.name or '<unnamed>'} ({n.op_type}-{n.since_version}): {n.reason}"
                    for n in after.fallback_nodes
                ),
            )
        return ir.passes.PassResult(model, modified=modified)
