"""Lower a model to the opset that puts the most of it on a given execution provider.

Rules the pass follows:

1. For the CPU EP (and the default, which is CPU) it does nothing: CPU kernels follow ONNX.
2. The candidates are the model's own opset and each lower one, down to 18 (or the
   caller's ``lowest_opset``: a bound on the search, never a guess), that the
   adapters can reach for this model. They are found by lowering one working copy (it
   shares the weights) one opset at a time; the first refusal ends the search, since
   every lower target needs the step that was refused. So does the first opset at which
   the model is predicted to run wholly on the EP (no fallback, no Memcpy): a lower one
   could only tie, and ties go to the higher opset.
3. For each candidate, ORT's placement is predicted from the EP's kernel table
   (:func:`~onnxscript_ep_passes.ep.placement.predict_placement`) and priced by the one
   objective (:func:`~onnxscript_ep_passes.ep.cost.placement_cost`: the bytes each Memcpy
   moves, the compute left on CPU, the EP's own compute as the baseline; symbolic
   dimensions sized by ``dims``). A candidate that moves strictly more bytes and leaves
   strictly more CPU compute than another is never chosen; the cheapest of the rest is
   (:func:`~onnxscript_ep_passes.ep.cost.best_candidate`); ties go to the higher opset
   (fewer rewrites). Node counts are reported, never compared.
4. An explicit ``target_opset`` overrides the choice (and is refused as usual when the
   model cannot reach it).
5. It logs one INFO line per run (the choice's summary and, when the model changes, the
   ORT tracking issue) and one DEBUG line counting the nodes still predicted on CPU, per
   op, version, reason and whether they are shape math (the result is not a fault: no
   WARNING). Per-node lines (decisions) are DEBUG. Model strings are escaped
   (:func:`~onnxscript_ep_passes.core.display.shown`). On a terminal, a progress bar runs over
   the candidate opsets and legalization trials.
6. **Legalization** (``legalize=True``, the default): no opset choice helps a node whose op
   the EP has no kernel for at any version. So each candidate opset also gets a legalized
   variant (:mod:`.legalize`): the working copy at that opset, whose nodes built by the
   lowering (as the lowering reports them) have their static shape math folded, and
   whose remaining fallback nodes are expanded through their ONNX function bodies where
   that lowers the predicted cost; it is predicted and priced, then put back as it was
   (:mod:`~onnxscript_ep_passes.core.checkpoint`), so the search holds one copy of the model.
   All candidates, plain and legalized, compete on one rank
   (:func:`~onnxscript_ep_passes.ep.cost.candidate_rank`): the cost, then fewer of the
   model's nodes replaced (by the lowering's adapters, or by legalization's expansions:
   so a native kernel at a reachable opset beats an expansion), then the higher opset,
   then plain before legalized. Among plain candidates this picks what
   rule 3 picks (lowering further never replaces fewer nodes), and a node the EP runs is
   never expanded. The search builds no legalized candidate's model while it weighs
   them: each is priced on the working copy, legalized in place and put back. Only the
   chosen one is built, once, after the search: on a copy of the model, the same
   lowering steps, then the edits its legalization kept, replayed without predicting
   anything (:func:`~onnxscript_ep_passes.passes.rewrites.replay_rewrites`); when it
   is the last candidate made on the working copy, it is the working copy itself, not
   put back. So the search holds one copy of the model besides the model, and the
   chosen legalized candidate's model is the model the pass keeps (its graph is moved
   into the model object), not priced again. A chosen plain candidate is the model lowered in place. Each node that falls back at the source opset or at the
   chosen one gets a :class:`~onnxscript_ep_passes.passes.legalize.LegalizationDecision`
   (``lower``, ``expand`` or ``cpu``, with the reason; :mod:`.choice_decisions`) in
   :attr:`EpLoweringChoice.decisions`, logged at DEBUG (rule 5 counts them at INFO).
7. Nodes of the copies are related to the model's by structure when a copy is made
   (:mod:`~onnxscript_ep_passes.core.copies`), never by name. The pass's result is an
   :class:`EpLoweringResult` holding the choice.
8. **Measuring** (``measure=True``, :mod:`.candidates`): the best few candidates by
   estimate, the source, the best plain and the best legalized one run in real ORT
   sessions on the EP; the fastest wins (each one's
   :attr:`~onnxscript_ep_passes.passes.candidates.CandidateEntry.measurement`). An EP
   without a kernel table has every reachable opset measured.
"""

from __future__ import annotations

__all__ = [
    "MEASURE_TOP",
    "CandidateEntry",
    "CandidateKey",
    "EpLoweringChoice",
    "EpLoweringResult",
    "LowerOpsetForEpPass",
    "candidate_models",
    "choose_for_target",
    "choose_target_opset",
    "lowest_opset_of",
]

import collections
import dataclasses
import logging
import os
from typing import TYPE_CHECKING

import onnx_ir as ir

from onnxscript_ep_passes.core.collector import freeze_young, frozen_heap, paused_collector
from onnxscript_ep_passes.core.copies import adopt, copy_with_origins
from onnxscript_ep_passes.core.display import shown
from onnxscript_ep_passes.core.progress import track
from onnxscript_ep_passes.ep.dims import DimSizes, DimsSpec
from onnxscript_ep_passes.ep.kernel_table import KernelTable, TableKind
from onnxscript_ep_passes.ep.measure import CandidateMeasurement
from onnxscript_ep_passes.ep.placement import PlacementPrediction, predict_placement
from onnxscript_ep_passes.ep.profiles import EpProfile
from onnxscript_ep_passes.ep.target import EpTarget
from onnxscript_ep_passes.errors import DowngradeError
from onnxscript_ep_passes.lowering.lower_opset import (
    MIN_TARGET_OPSET,
    ORT_TRACKING_ISSUE,
    run_lowering,
)
from onnxscript_ep_passes.lowering.opset_imports import require_default_opset
from onnxscript_ep_passes.passes.candidates import (
    MEASURE_TOP,
    CandidateEntry,
    CandidateKey,
    CandidateSearch,
    SearchSettings,
    WorkState,
    measure_candidates,
)
from onnxscript_ep_passes.passes.choice import EpLoweringChoice
from onnxscript_ep_passes.passes.choice_decisions import choice_decisions
from onnxscript_ep_passes.passes.ep_pass import EpPass
from onnxscript_ep_passes.passes.options import SearchOptions, lowest_opset_of, search_options

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from onnxscript_ep_passes.passes.options import SearchFlags

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class _Asked:
    """What the caller named, for the choice to say (not what the search weighs)."""

    ort_version_assumed: bool = False
    ort_version_requested: str | None = None


@paused_collector()  # each candidate collects what it left (:mod:`~onnxscript_ep_passes.core.collector`)
@frozen_heap()  # ... and no collection scans the model or the working copy
def _search(
    model: ir.Model,
    table: KernelTable,
    target_opset: int | None,
    floor: int,
    legalize: bool,
    settings: SearchSettings,
    asked: _Asked = _Asked(),
) -> tuple[EpLoweringChoice, ir.Model | None, CandidateSearch]:
    """The choice, the chosen legalized candidate's model (the one the search built; None
    when plain is chosen), and the search (its candidates). Automatic garbage collection
    is paused meanwhile."""
    source = require_default_opset(model)
    measure_top, distinct = settings.measure_top, True
    if table.kind is TableKind.NONE:  # no kernel table: measure every reachable opset
        if not settings.measure:
            raise ValueError(f"{table.ep} has no kernel table: only measuring can choose")
        legalize, measure_top, distinct = False, 100, False
    wanted = None if target_opset is None else min(target_opset, source)
    keep = settings.keep_models or settings.measure
    search = CandidateSearch(table, settings.sizes, keep, wanted)
    source_plain = search.add_plain(source, predict_placement(model, table), None, 0, model)
    if legalize:
        search.add_legalized(model, source_plain, set(), 0)
    if target_opset is not None and target_opset < source:
        work, origin = copy_with_origins(model)
        freeze_young()
        state = WorkState(origin)
        plain = search.lower_and_predict(work, target_opset, state)
        if legalize:
            search.add_legalized(work, plain, state.built, len(state.replaced), last=True)
    elif not _wholly_on_ep(source_plain.prediction):
        work, origin = copy_with_origins(model)
        freeze_young()
        state = WorkState(origin)
        opsets = range(source - 1, floor - 1, -1)
        for opset in track(opsets, f"{table.ep}: candidate opsets"):
            try:
                plain = search.lower_and_predict(work, opset, state)
            except DowngradeError as error:
                search.blocked = error
                break
            if _wholly_on_ep(plain.prediction):
                break  # no lower opset can do better: ties go to the higher opset
            if legalize:
                last = opset == floor  # the working copy is not lowered again
                search.add_legalized(work, plain, state.built, len(state.replaced), last=last)
    pool = search.pool()
    chosen = search.chosen()
    measured: dict[CandidateKey, CandidateMeasurement] = {}
    if settings.measure:
        chosen = measure_candidates(pool, source, table, settings, measure_top, distinct, measured)
    decisions = choice_decisions(
        search.plain[source], chosen, search.legalizations.get(chosen.opset)
    )
    everyone = [*search.plain.values(), *search.legalized.values()]
    choice = EpLoweringChoice(
        ep=table.ep,
        ort_version=table.ort_version,
        table_source=table.source,
        table_kind=table.kind,
        source_opset=source,
        chosen_opset=chosen.opset,
        candidates={c.key: c.entry(measured.get(c.key)) for c in everyone},
        blocked=search.blocked,
        legalized=chosen.legalized,
        decisions=decisions,
        dims=settings.sizes,
        ort_version_assumed=asked.ort_version_assumed,
        lowest_opset=floor,
        ort_version_requested=asked.ort_version_requested,
        replaced_nodes=chosen.replaced_nodes,
        expanded_nodes=chosen.expanded_nodes,
    )
    kept = search.model_of(model, chosen) if chosen.legalized else None
    return choice, kept, search


def choose_target_opset(
    model: ir.Model,
    table: KernelTable,
    *,
    target_opset: int | None = None,
    lowest_opset: int | None = None,
    legalize: bool = True,
    dims: DimsSpec = None,
    measure: bool = False,
    measure_top: int = MEASURE_TOP,
    measure_runs: int = 10,
    ort_version_requested: str | None = None,
    ort_version_assumed: bool = False,
) -> EpLoweringChoice:
    """Predict placement at each reachable opset and pick the best (see module docstring).

    ``model`` is not modified. With ``target_opset``, only the source and that opset are
    evaluated (and :class:`DowngradeError` propagates when it cannot be reached); with
    ``lowest_opset`` (:func:`lowest_opset_of`), no opset below it is weighed. With
    ``legalize``, each candidate opset also gets a legalized variant (rule 6); ``dims``
    sizes symbolic dimensions (:class:`DimSizes`); ``measure``: rule 8.
    ``ort_version_requested`` (the release the caller named) and ``ort_version_assumed``
    are what the choice says about the table's release (:class:`EpLoweringChoice`)."""
    settings = SearchSettings(DimSizes.of(dims), measure, measure_top, measure_runs)
    floor = lowest_opset_of(lowest_opset, target_opset)
    asked = _Asked(ort_version_assumed, ort_version_requested)
    return _search(model, table, target_opset, floor, legalize, settings, asked)[0]


def choose_for_target(
    model: ir.Model, target: EpTarget, options: SearchOptions
) -> tuple[EpLoweringChoice, ir.Model | None]:
    """The choice for ``target`` as ``options`` ask (``model`` is not modified), marked
    with the release the target assumes, and the chosen legalized candidate's model (None
    when a plain candidate is chosen)."""
    settings = SearchSettings(options.dims, options.measure)
    choice, legalized_model, _ = _search(
        model,
        target.table,
        options.target_opset,
        options.lowest_opset,
        options.legalize,
        settings,
        _Asked(target.ort_version_assumed, target.ort_version_requested),
    )
    return choice, legalized_model


def candidate_models(
    model: ir.Model,
    table: KernelTable,
    *,
    legalize: bool = True,
    dims: DimsSpec = None,
) -> tuple[EpLoweringChoice, dict[tuple[int, bool], ir.Model]]:
    """The choice, and a copy of the model (sharing its weights) for every candidate
    ``(opset, legalized)`` it weighed (for benchmarks: run each one)."""
    settings = SearchSettings(DimSizes.of(dims), keep_models=True)
    choice, _, search = _search(model, table, None, MIN_TARGET_OPSET, legalize, settings)
    models = {
        (c.opset, c.legalized): c.model
        for c in [*search.plain.values(), *search.legalized.values()]
        if c.model is not None
    }
    return choice, models


def _wholly_on_ep(prediction: PlacementPrediction) -> bool:
    return not prediction.fallback_nodes and prediction.memcpy == 0


@dataclasses.dataclass
class EpLoweringResult(ir.passes.PassResult):
    """The result of :class:`LowerOpsetForEpPass`: ``choice`` is None for the CPU EP."""

    choice: EpLoweringChoice | None = None


class LowerOpsetForEpPass(EpPass):
    """Lower the model to the opset best for ``ep`` (see the module docstring).

    Args:
        ep: The EP, by ORT name or alias ("webgpu", "cuda", "dml", "cpu"), its profile, or
            an :class:`~onnxscript_ep_passes.ep.target.EpTarget` (then no ``ort_version``,
            ``table`` nor ``kernel_table``).
        ort_version: The ORT release the model will run on; None for the installed one
            (a live kernel table when the EP can be listed here, else the nearest snapshot).
        target_opset, legalize, dims, measure, lowest_opset: Sugar for ``options``
            (:class:`~onnxscript_ep_passes.passes.options.SearchOptions`): force an opset;
            also consider legalized candidates (module docstring, rule 6); sizes of the
            model's symbolic dimensions for the cost estimate; measure the top candidates
            in real sessions on the EP (rule 8; an EP with no kernel table is then handled
            by measuring every reachable opset); weigh no opset below this one.
        table: A kernel table to use instead of looking one up.
        kernel_table: A file with the EP's kernels in the snapshot format, for an EP
            without a shipped table (:func:`~onnxscript_ep_passes.ep.target.resolve_target`).
        options: What the search is asked, instead of the keywords.

    The pass returns an :class:`EpLoweringResult`.
    """

    def __init__(
        self,
        ep: str | EpProfile | EpTarget,
        ort_version: str | None = None,
        target_opset: int | None = None,
        *,
        table: KernelTable | None = None,
        kernel_table: str | os.PathLike[str] | None = None,
        options: SearchOptions | None = None,
        **search: Unpack[SearchFlags],
    ) -> None:
        super().__init__(ep, ort_version, table, kernel_table)
        self.options = search_options(options, target_opset=target_opset, **search)

    def call(self, model: ir.Model) -> EpLoweringResult:
        if self.profile.is_host:
            logger.debug("%s runs every opset: nothing to lower", self.ep)
            return EpLoweringResult(model, False)
        choice, legalized_model = choose_for_target(
            model, self.request.resolve(measure=self.options.measure), self.options
        )
        modified = False
        if legalized_model is not None:
            adopt(model, legalized_model)
            modified = True
        elif choice.chosen_opset < choice.source_opset:
            modified = run_lowering(model, choice.chosen_opset).modified
        _log(model, self.ep, choice)
        return EpLoweringResult(model, modified, choice)


def _log(model: ir.Model, ep: str, choice: EpLoweringChoice) -> None:
    name = shown(model.graph.name)
    for decision in choice.decisions:  # one line per node: DEBUG (rule 5)
        logger.debug("'%s' on %s: %s", name, ep, shown(decision))
    if choice.changes_model:
        logger.info(
            "Model '%s': %s. Track when this workaround can go: %s",
            *(name, choice.summary(), ORT_TRACKING_ISSUE),
        )
    else:  # no tracking link: nothing was worked around
        logger.info("Model '%s': nothing to do: %s", name, choice.summary())
    groups = collections.Counter(
        (n.op_type, n.since_version, n.reason, n.is_shape_math) for n in choice.after.cpu_nodes
    )
    lines = [
        f"  - {count} x {shown(op)}-{version}{' (shape math)' if math else ''}: {shown(why)}"
        for (op, version, why, math), count in groups.most_common()
    ]
    if lines:
        logger.debug(
            "%d nodes of '%s' are predicted on CPU on %s:\n%s",
            *(groups.total(), name, ep, "\n".join(lines)),
        )
