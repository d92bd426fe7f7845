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
   (:func:`~onnxscript_ep_passes.ep.placement.predict_placement`) and priced by the EP
   objective (:func:`~onnxscript_ep_passes.ep.cost.placement_cost`, the one objective: the bytes each
   Memcpy moves, the compute left on CPU, the EP's own compute as the baseline; symbolic
   dimensions sized by ``dims``). A candidate that moves strictly more bytes and leaves
   strictly more CPU compute than another is dropped; the cheapest of the rest wins; ties
   go to the fewest of the model's nodes replaced, then the higher opset (fewer
   rewrites), then plain before legalized
   (:func:`~onnxscript_ep_passes.ep.cost.candidate_rank`). Node counts are reported,
   never compared.
4. An explicit ``target_opset`` overrides the choice (and is refused as usual when the
   model cannot reach it).
5. It logs at INFO the original and chosen opset, the model name, the EP, the ORT version
   and the ORT tracking issue, and at WARNING every node still predicted to fall back.
6. **Legalization** (``legalize=True``, the default): no opset choice helps a node whose op
   the EP has no kernel for at any version. So each candidate opset also gets a legalized
   variant (:mod:`.legalize`): a copy of the model lowered to that opset, whose nodes built
   by the lowering have their static shape math folded, and whose remaining fallback
   nodes are expanded through their ONNX function bodies where that lowers the predicted
   cost. All candidates, plain and legalized, compete as rule 3 says (the model's nodes
   replaced count the lowering's rewrites and expansions and legalization's: so at equal
   cost a native kernel at a reachable opset beats an expansion), and a node the EP runs
   is never expanded. A chosen legalized candidate is rebuilt on
   the model by replaying its lowering and its expansions. Each node that falls back at
   the source opset or at the chosen one gets a
   :class:`~onnxscript_ep_passes.passes.legalize.LegalizationDecision` (``lower``,
   ``expand`` or ``cpu``, with the reason) in :attr:`EpLoweringChoice.decisions`, logged at
   INFO (``cpu`` ones at DEBUG: the WARNING of rule 5 lists them).
7. **Measuring** (``measure=True``): the estimate ranks, ORT decides. The best
   ``MEASURE_TOP`` candidates by estimate, plus the source, the best plain and the best
   legalized candidate, are each built and run in a real ORT session on the EP
   (:mod:`~onnxscript_ep_passes.ep.measure`: ORT's placement record, the Memcpy nodes of
   its optimized model, the median latency on inputs generated with the same ``dims``);
   the fastest is chosen. Predicted and measured figures are kept in
   :attr:`EpLoweringChoice.measured` and logged. The EP must load here.
"""

from __future__ import annotations

__all__ = ["EpLoweringChoice", "LowerOpsetForEpPass", "build_candidate", "choose_target_opset"]

import dataclasses
import logging
import os
from collections.abc import Mapping

import onnx_ir as ir

from onnxscript_ep_passes.ep.cost import (
    CandidateRank,
    PlacementCost,
    best_candidate,
    candidate_rank,
    placement_cost,
    undominated,
)
from onnxscript_ep_passes.ep.dims import DimSizes
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.measure import CandidateMeasurement, measure_candidate, pick_fastest
from onnxscript_ep_passes.ep.names import canonical_ep_name
from onnxscript_ep_passes.ep.placement import PlacementPrediction, predict_placement
from onnxscript_ep_passes.ep.table_source import MEASURED_ONLY, resolve_table
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
MEASURE_TOP = 3
"""With ``measure``: how many candidates, best estimate first, are measured (rule 7)."""


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
        costs, legalized_costs: The estimated cost of each plain / legalized candidate.
        dims: The sizes the estimate gave the symbolic dimensions.
        measured: With ``measure``, the real session's figures per ``(opset, legalized)``
            candidate measured.
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
    costs: dict[int, PlacementCost] = dataclasses.field(default_factory=dict)
    legalized_costs: dict[int, PlacementCost] = dataclasses.field(default_factory=dict)
    dims: DimSizes = dataclasses.field(default_factory=DimSizes)
    measured: dict[tuple[int, bool], CandidateMeasurement] = dataclasses.field(default_factory=dict)

    @property
    def before(self) -> PlacementPrediction:
        return self.predictions[self.source_opset]

    @property
    def after(self) -> PlacementPrediction:
        if self.legalized:
            return self.legalized_predictions[self.chosen_opset]
        return self.predictions[self.chosen_opset]

    @property
    def after_cost(self) -> PlacementCost:
        """The estimated cost of the chosen candidate."""
        if self.legalized:
            return self.legalized_costs[self.chosen_opset]
        return self.costs[self.chosen_opset]

    @property
    def expanded(self) -> tuple[str, ...]:
        """The nodes the chosen candidate expands (empty unless ``legalized``)."""
        return self.plan.get(self.chosen_opset, ()) if self.legalized else ()


def _replaced(prediction: PlacementPrediction, original: set[str | None]) -> int:
    kept = {n.name for n in prediction.nodes}
    return sum(1 for name in original if name and name not in kept)


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
    sizes: DimSizes,
) -> tuple[LegalizationResult, PlacementCost | None]:
    """The legalized variant of ``work`` and its cost (None when nothing changed)."""
    variant = work.clone()
    result = legalize_model(
        variant,
        table,
        built=_built_nodes(variant, original),
        prediction=prediction,
        dims=sizes,
    )
    if not result.modified or result.after is None:
        return result, None
    return result, placement_cost(result.after, variant, sizes)


def choose_target_opset(
    model: ir.Model,
    table: KernelTable,
    *,
    target_opset: int | None = None,
    floor: int = MIN_TARGET_OPSET,
    legalize: bool = True,
    dims: DimSizes | Mapping[str, int] | str | None = None,
    measure: bool = False,
    measure_top: int = MEASURE_TOP,
    measure_runs: int = 10,
) -> EpLoweringChoice:
    """Predict placement at each reachable opset and pick the best (see module docstring).

    ``model`` is not modified. With ``target_opset``, only the source and that opset are
    evaluated (and :class:`DowngradeError` propagates when it cannot be reached). With
    ``legalize``, each candidate opset also gets a legalized variant (rule 6). ``dims``
    sizes the symbolic dimensions for the cost estimate
    (:class:`~onnxscript_ep_passes.ep.dims.DimSizes`: a mapping, a ``--dims`` string,
    or None for the defaults). With ``measure``, the candidates of rule 7 are measured in
    real sessions on ``table.ep`` and the fastest is chosen.
    """
    sizes = DimSizes.of(dims)
    if table.source == MEASURED_ONLY:  # no kernel table: measure every reachable opset
        if not measure:
            raise ValueError(f"{table.ep} has no kernel table: only measuring can choose")
        legalize, measure_top = False, 100
    source = default_opset(model.opset_imports)
    if source is None:
        raise ValueError("the model imports no ai.onnx opset")
    predictions = {source: predict_placement(model, table)}
    costs = {source: placement_cost(predictions[source], model, sizes)}
    blocked: DowngradeError | None = None
    original = _node_names(model) if legalize else set()
    variants: dict[int, tuple[LegalizationResult, PlacementCost | None]] = {}

    def evaluate(opset: int, work: ir.Model) -> None:
        predictions[opset] = predict_placement(work, table)
        costs[opset] = placement_cost(predictions[opset], work, sizes)

    if legalize:
        variants[source] = _legalized_variant(model, table, original, predictions[source], sizes)
    if target_opset is not None and target_opset < source:
        work = model.clone()
        LowerOpsetPass(target_opset, announce=False)(work)
        evaluate(target_opset, work)
        if legalize:
            variants[target_opset] = _legalized_variant(
                work, table, original, predictions[target_opset], sizes
            )
    elif not _wholly_on_ep(predictions[source]):
        work = model.clone()
        for opset in range(source - 1, floor - 1, -1):
            try:
                LowerOpsetPass(opset, announce=False)(work)
            except DowngradeError as error:
                blocked = error
                break
            evaluate(opset, work)
            if _wholly_on_ep(predictions[opset]):
                break  # no lower opset can do better: ties go to the higher opset
            if legalize:
                variants[opset] = _legalized_variant(
                    work, table, original, predictions[opset], sizes
                )
    legalized_predictions = {
        opset: v.after
        for opset, (v, cost) in variants.items()
        if cost is not None and v.after is not None
    }
    legalized_costs = {o: cost for o, (_, cost) in variants.items() if cost is not None}
    candidates = [
        candidate_rank(costs[o], opset=o, replaced=_replaced(p, original))
        for o, p in predictions.items()
    ] + [
        candidate_rank(legalized_costs[o], opset=o, replaced=_replaced(p, original), legalized=True)
        for o, p in legalized_predictions.items()
    ]
    if target_opset is not None:
        wanted = target_opset if target_opset < source else source
        candidates = [c for c in candidates if c.opset == wanted]
    best = best_candidate(candidates)
    plan = {o: tuple(v.expanded) for o, (v, _) in variants.items() if v.modified}
    measured: dict[tuple[int, bool], CandidateMeasurement] = {}
    if measure:
        timed = []
        known = table.source != MEASURED_ONLY  # else the estimates say nothing
        for candidate in _to_measure(candidates, source, measure_top, distinct=known):
            trial = model.clone()
            steps = plan[candidate.opset] if candidate.legalized else None
            _apply_candidate(trial, table, candidate.opset, steps, sizes)
            try:
                result = measure_candidate(trial, table.ep, sizes, runs=measure_runs)
            except (RuntimeError, ImportError) as error:
                raise ValueError(
                    f"--measure needs a session on {table.ep} here, and ORT cannot make one: "
                    f"{error}"
                ) from error
            logger.info(
                "measured opset %d%s on %s: predicted %s; measured %d Memcpy, %d CPU nodes, "
                "%.3f ms",
                candidate.opset,
                " (legalized)" if candidate.legalized else "",
                table.ep,
                candidate.cost,
                result.memcpy,
                result.cpu_nodes,
                result.latency_ms,
            )
            measured[(candidate.opset, candidate.legalized)] = result
            timed.append((candidate, result))
        best = pick_fastest(timed)
    chosen, legalized = best.opset, best.legalized
    after = legalized_predictions[chosen] if legalized else predictions[chosen]
    variant = variants.get(chosen)
    decisions = _decisions(
        predictions[source],
        after,
        variant[0] if variant is not None else None,
        chosen,
        legalized,
        model,
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
        plan=plan,
        costs=costs,
        measured=measured,
        legalized_costs=legalized_costs,
        dims=sizes,
    )


def _apply_candidate(
    model: ir.Model,
    table: KernelTable,
    opset: int,
    plan: tuple[str, ...] | None,
    sizes: DimSizes,
    *,
    ep: str | None = None,
) -> bool:
    """Lower ``model`` in place to ``opset`` and, with a ``plan``, replay its legalization.

    ``ep`` is named in the lowering's log (None: the lowering does not announce itself).
    Returns whether the model changed.
    """
    original = _node_names(model) if plan is not None else set()
    modified = False
    source = default_opset(model.opset_imports)
    if source is not None and opset < source:
        lowering = LowerOpsetPass(opset, ep=ep) if ep else LowerOpsetPass(opset, announce=False)
        modified = lowering(model).modified
    if plan is not None:
        legalize_model(model, table, built=_built_nodes(model, original), plan=plan, dims=sizes)
        modified = True
    return modified


def build_candidate(
    model: ir.Model, table: KernelTable, choice: EpLoweringChoice, opset: int, legalized: bool
) -> ir.Model:
    """A copy of ``model`` (sharing its weights) as ``choice``'s candidate ``(opset, legalized)``.

    ``choice`` must have been made for ``model`` and ``table``.
    """
    if opset not in (choice.legalized_predictions if legalized else choice.predictions):
        raise ValueError(
            f"opset {opset} ({'legalized' if legalized else 'plain'}) was not a candidate"
        )
    copy = model.clone()
    _apply_candidate(copy, table, opset, choice.plan[opset] if legalized else None, choice.dims)
    return copy


def _to_measure(
    candidates: list[CandidateRank], source: int, top: int, *, distinct: bool = True
) -> list[CandidateRank]:
    """The best ``top`` by estimate, the source, the best plain and best legalized.

    With ``distinct``, among candidates with the same estimate (the same placement, e.g. a
    legalized model at 21 and at 20) only the best ranked counts toward ``top``.
    """
    ranked = sorted(undominated(candidates, lambda c: c.cost), key=CandidateRank.key)
    ranked += sorted((c for c in candidates if c not in ranked), key=CandidateRank.key)
    picked: list[CandidateRank] = []
    for candidate in ranked:
        if len(picked) < top and not (distinct and any(c.cost == candidate.cost for c in picked)):
            picked.append(candidate)
    for wanted in (
        [c for c in ranked if c.opset == source and not c.legalized][:1],
        [c for c in ranked if not c.legalized][:1],
        [c for c in ranked if c.legalized][:1],
    ):
        picked += [c for c in wanted if c not in picked]
    return picked


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
        dims: Sizes of the model's symbolic dimensions for the cost estimate
            (``{"batch": 1, "sequence_length": 128}``, a ``--dims`` string, or None for
            the defaults of :mod:`~onnxscript_ep_passes.ep.dims`).
        measure: Measure the top candidates in real sessions on the EP and pick the
            fastest (module docstring, rule 7). An EP with no kernel table (no live
            listing, no snapshot, no ``kernel_table``) is then handled by measuring
            every reachable opset.
        kernel_table: A file with the EP's kernels in the snapshot format, for an EP
            without a shipped table (:mod:`~onnxscript_ep_passes.ep.table_source`).

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
        dims: DimSizes | Mapping[str, int] | str | None = None,
        measure: bool = False,
        kernel_table: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__()
        self.dims = DimSizes.of(dims)
        self.measure = measure
        self.kernel_table = kernel_table
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
        table = (
            self.table
            if self.table is not None
            else resolve_table(
                self.ep, self.ort_version, kernel_table=self.kernel_table, measure=self.measure
            )
        )
        choice = choose_target_opset(
            model,
            table,
            target_opset=self.target_opset,
            legalize=self.legalize,
            dims=self.dims,
            measure=self.measure,
        )
        self.last_choice = choice
        modified = _apply_candidate(
            model,
            table,
            choice.chosen_opset,
            choice.expanded if choice.legalized else None,
            choice.dims,
            ep=self.ep,
        )
        for decision in choice.decisions:  # the nodes left on CPU are warned about below
            level = logging.DEBUG if decision.decision == "cpu" else logging.INFO
            logger.log(level, "'%s' on %s: %s", model.graph.name, self.ep, decision)
        after = choice.after
        logger.info(
            "Model '%s' for %s (ORT %s, %s): opset %d -> %d%s; predicted fallback nodes %d -> %d, "
            "Memcpy %d -> %d, estimated cost %s -> %s. Track when this workaround can go: %s",
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
            choice.costs[choice.source_opset],
            choice.after_cost,
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
