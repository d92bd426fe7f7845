"""The candidates of the EP pass: the search state, and measuring the best of them.

:mod:`.lower_for_ep` states the rules; this module holds their machinery:

- :class:`Candidate`: one way to run the model (an opset, plain or legalized), its
  prediction, its rank under the one objective (:mod:`~onnxscript_ep_passes.ep.cost`),
  its relation to the model, and (when kept) its model.
- :class:`CandidateEntry`: what the choice reports of a candidate (no model), keyed by
  ``(opset, legalized)`` (:data:`CandidateKey`).
- :class:`CandidateSearch`: the candidates of one model on one kernel table, priced as
  they are added: plain ones on the working copy, legalized ones on the working copy
  legalized in place and then put back (:mod:`~onnxscript_ep_passes.core.checkpoint`), so
  the search holds one copy of the model whatever the number of candidates. The chosen
  legalized candidate's model is built once, after the search, by replaying its
  legalization's edits on the lowered copy (:meth:`CandidateSearch.model_of`), unless it
  is the last made on the working copy (then it is the working copy).
  A plain candidate whose lowering step changed no node is derived from the one above
  it, relabelled, where :mod:`.twins` proves it equal to the fresh prediction and price
  (else, and with ``keep_models`` or a wanted opset, it is predicted afresh); it ties
  its twin above, which the tie goes to, so it is never the one chosen. So is its
  legalized candidate, where :func:`~.twins.derive_legalization` proves it the one above
  relabelled (the working copy is then not folded, nor predicted again).
- :func:`measure_candidates`: with ``measure``, the candidates worth running (the best
  few by estimate, one per distinct estimate, plus the source, the best plain and the
  best legalized) run in real sessions (:mod:`~onnxscript_ep_passes.ep.measure`); the
  fastest wins.
"""

from __future__ import annotations

__all__ = [
    "MEASURE_TOP",
    "REUSE_TWINS",
    "Candidate",
    "CandidateEntry",
    "CandidateKey",
    "CandidateSearch",
    "SearchSettings",
    "WorkState",
    "measure_candidates",
    "to_measure",
]

import contextlib
import dataclasses
import logging

import onnx_ir as ir

from onnxscript_ep_passes.core.checkpoint import EditLog
from onnxscript_ep_passes.core.collector import collect_young
from onnxscript_ep_passes.core.copies import Correspondence, copy_with_origins
from onnxscript_ep_passes.core.onnx_utils import walk
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
from onnxscript_ep_passes.ep.placement import PlacementPrediction, predict_placement
from onnxscript_ep_passes.ep.placement.opset_reads import OpsetReads, recording
from onnxscript_ep_passes.errors import DowngradeError
from onnxscript_ep_passes.lowering.lower_opset import default_opset, run_lowering
from onnxscript_ep_passes.passes.legalize import LegalizationResult, legalize
from onnxscript_ep_passes.passes.rewrites import replay_rewrites
from onnxscript_ep_passes.passes.twins import derive_legalization, derive_prediction

logger = logging.getLogger(__name__)

MEASURE_TOP = 3
"""With ``measure``: how many candidates, best estimate first, are measured."""

REUSE_TWINS = True
"""Derive a plain candidate from the one above it where that is proven exact
(:mod:`.twins`); tests turn it off to compare with the fresh computation."""


CandidateKey = tuple[int, bool]
"""A candidate's key in :attr:`~.lower_for_ep.EpLoweringChoice.candidates`: its opset, and
whether it is the legalized variant."""


@dataclasses.dataclass(frozen=True)
class CandidateEntry:
    """What the search found about one candidate (an opset, plain or legalized).

    It holds no model: an entry may be priced without one being built.

    Attributes:
        opset, legalized: The candidate (its key is ``(opset, legalized)``).
        prediction: ORT's placement predicted for it.
        cost: Its estimated cost (:func:`~onnxscript_ep_passes.ep.cost.placement_cost`).
        replaced: The model's nodes it replaces: rewritten or expanded by the lowering's
            adapters, or expanded by legalization.
        expanded: The nodes legalization expanded (nodes of that candidate's copy of the
            model; empty for a plain candidate).
        measurement: With ``measure``, the real session's figures (None when the
            candidate was not measured).
    """

    opset: int
    legalized: bool
    prediction: PlacementPrediction
    cost: PlacementCost
    replaced: int = 0
    expanded: tuple[ir.Node, ...] = ()
    measurement: CandidateMeasurement | None = None

    @property
    def key(self) -> CandidateKey:
        return (self.opset, self.legalized)

    def __repr__(self) -> str:  # the dataclass repr would print every node (megabytes)
        kind = " legalized" if self.legalized else ""
        return f"<CandidateEntry opset {self.opset}{kind}: {self.cost}>"


@dataclasses.dataclass
class Candidate:
    """One way to run the model: an opset, plain or legalized."""

    opset: int
    legalized: bool
    prediction: PlacementPrediction
    rank: CandidateRank
    origin: Correspondence | None  # the candidate's copy -> the model; None: the model itself
    legalization: LegalizationResult | None = None
    # Kept with keep_models (to measure); a legalized one's working copy itself, while it
    # is the best so far and the last candidate made on it; else built when chosen
    # (CandidateSearch.model_of), so the search holds no candidate's model but these.
    model: ir.Model | None = None
    # The model's nodes the candidate replaces (lowering's adapters) / expands (legalization).
    replaced_nodes: frozenset[ir.Node] = frozenset()
    expanded_nodes: frozenset[ir.Node] = frozenset()

    def model_node(self, node: ir.Node) -> ir.Node:
        """The model's node ``node`` (of this candidate's copy) stands for; a node built on
        the copy stands for itself."""
        return node if self.origin is None else self.origin.nodes.get(node, node)

    @property
    def key(self) -> CandidateKey:
        return (self.opset, self.legalized)

    def entry(self, measurement: CandidateMeasurement | None = None) -> CandidateEntry:
        """What the choice reports about this candidate."""
        legalization = self.legalization
        expanded = tuple(legalization.expanded) if legalization is not None else ()
        return CandidateEntry(
            self.opset,
            self.legalized,
            self.prediction,
            self.rank.cost,
            self.rank.replaced,
            expanded,
            measurement,
        )


class CandidateSearch:
    """The candidates of one model on one kernel table (module docstring, rules 2-6)."""

    def __init__(
        self,
        table: KernelTable,
        sizes: DimSizes,
        keep_models: bool,
        wanted: int | None = None,
    ) -> None:
        self.table = table
        self.sizes = sizes
        self.keep_models = keep_models  # keep every candidate's model (to measure them)
        self.wanted = wanted  # the only opset that may be chosen (None: any)
        self.plain: dict[int, Candidate] = {}
        self.legalized: dict[int, Candidate] = {}  # those where legalization changed something
        self.legalizations: dict[int, Candidate] = {}  # every legalization tried
        self.blocked: DowngradeError | None = None
        self.best: Candidate | None = None  # the best so far of those that may be chosen
        self.derived: set[int] = set()  # the plain candidates derived from the one above
        self.legalized_derived: set[int] = set()  # the legalizations derived likewise
        self._reads: OpsetReads | None = None  # the calls of the last plain prediction
        self._legal_reads: OpsetReads | None = None  # those of the last legalization

    def pool(self) -> list[Candidate]:
        """The candidates that may be chosen."""
        pool = [*self.plain.values(), *self.legalized.values()]
        return [c for c in pool if self.wanted is None or c.opset == self.wanted]

    def chosen(self) -> Candidate:
        """The best of :meth:`pool` by estimate (rules 3 and 6)."""
        pool = self.pool()
        best = best_candidate([c.rank for c in pool])
        return next(c for c in pool if c.rank is best)

    def _offer(self, candidate: Candidate, model: ir.Model | None = None) -> None:
        """Make ``candidate`` the best so far when it is (rule 6), its model ``model``
        when one is given (the working copy, legalized: the search's last candidate);
        drop the model of the one it beats (unless every model is kept)."""
        if self.wanted is not None and candidate.opset != self.wanted:
            return
        if self.chosen() is not candidate:
            return
        if candidate.model is None and model is not None:
            candidate.model = model
        previous, self.best = self.best, candidate
        if previous is not None and not self.keep_models:
            previous.model = None

    def add_plain(
        self,
        opset: int,
        prediction: PlacementPrediction,
        origin: Correspondence | None,
        replaced: int,
        model: ir.Model,
        cost: PlacementCost | None = None,
    ) -> Candidate:
        """Record the plain candidate ``opset`` (``cost``: its price, when known)."""
        if cost is None:
            cost = placement_cost(prediction, model, self.sizes)
        collect_young()  # the prediction's flat graph, the lowering step's leftovers
        rank = candidate_rank(cost, opset=opset, replaced=replaced)
        candidate = Candidate(opset, False, prediction, rank, origin)
        if self.keep_models:
            candidate.model = copy_with_origins(model)[0]
        self.plain[opset] = candidate
        self._offer(candidate)  # a plain one is lowered from the model itself
        return candidate

    def add_legalized(
        self,
        work: ir.Model,
        plain: Candidate,
        built: set[ir.Node],
        replaced: int,
        *,
        last: bool = False,
    ) -> None:
        """Legalize ``work`` (the model ``plain`` was predicted on) in place, record the
        candidate, and put ``work`` back as it was: the edits are logged and undone
        (:class:`~onnxscript_ep_passes.core.checkpoint.EditLog`), not the model recorded.

        ``last``: the caller needs ``work`` no more (the search's last candidate on its
        working copy). When this candidate is then the best so far, ``work`` itself,
        legalized, becomes its model (not put back): building it again (:meth:`model_of`)
        would make the same model, at the cost of its time and memory."""
        if self._legalized_twin(work, plain, replaced):
            return
        log = EditLog()
        spent = False  # work became the candidate's model: not put back
        try:
            ordered = [n for n in walk(work.graph)[0] if n in built]
            with self._recording() as reads:
                result = legalize(
                    work,
                    self.table,
                    built=ordered,
                    prediction=plain.prediction,
                    cost=plain.rank.cost,
                    dims=self.sizes,
                    log=log,
                )
            self._legal_reads = reads
            candidate = self._legalized_candidate(plain, result, replaced)
            if result.modified:
                if self.keep_models:
                    candidate.model = copy_with_origins(work)[0]
                # The best so far keeps work itself, legalized, as its model when it is
                # the last candidate made on it; else its model is built if it is chosen.
                self._offer(candidate, work if last and not self.keep_models else None)
                spent = candidate.model is work
        finally:  # the caller's model (the source candidate) is left as it was, even on error
            if not spent:
                log.restore()
            collect_young()  # what the trials built and predicted

    def _derives(self) -> bool:
        """Whether candidates may be derived from the ones above (module docstring)."""
        return REUSE_TWINS and not (self.keep_models or self.wanted is not None)

    def _recording(self) -> contextlib.AbstractContextManager[OpsetReads | None]:
        """A record of the calls to ONNX made meanwhile, for the candidate below to be
        derived from; none where nothing is derived."""
        return recording() if self._derives() else contextlib.nullcontext()

    def _legalized_twin(self, work: ir.Model, plain: Candidate, replaced: int) -> bool:
        """Record the legalized candidate at ``plain``'s opset derived from the one above
        (:func:`~.twins.derive_legalization`), without touching ``work``; whether it was.
        It ties the one above, so it is never the best: no model is offered."""
        reads, self._legal_reads = self._legal_reads, None
        above = self.legalizations.get(plain.opset + 1)
        if (
            reads is None
            or above is None
            or above.legalization is None
            or plain.opset not in self.derived
        ):
            return False
        result = derive_legalization(
            above.legalization,
            reads,
            plain.prediction,
            plain.rank.cost,
            work,
            self.table,
            self.sizes,
        )
        if result is None:
            return False
        self._legalized_candidate(plain, result, replaced)
        self.legalized_derived.add(plain.opset)
        return True

    def _legalized_candidate(
        self, plain: Candidate, result: LegalizationResult, replaced: int
    ) -> Candidate:
        """Record the legalized candidate ``result`` made of ``plain``."""
        origin = plain.origin
        expanded = frozenset(
            n if origin is None else origin.nodes[n]
            for n in result.expanded
            if origin is None or n in origin.nodes
        )
        rank = candidate_rank(
            result.after_cost,
            opset=plain.opset,
            replaced=replaced + len(expanded),
            legalized=True,
        )
        candidate = Candidate(plain.opset, True, result.after, rank, origin, result)
        candidate.replaced_nodes = plain.replaced_nodes
        candidate.expanded_nodes = expanded
        self.legalizations[plain.opset] = candidate
        if result.modified:
            self.legalized[plain.opset] = candidate
        return candidate

    def model_of(self, model: ir.Model, chosen: Candidate) -> ir.Model:
        """The model of the legalized candidate ``chosen`` (of the search over ``model``).

        The search keeps a legalized candidate's model only when it is the last made on
        the working copy (the working copy itself) or every model is kept. Else this
        builds it once, on a copy of ``model``, without predicting: the same one-opset
        lowering steps, then the edits its legalization made
        (:func:`~.rewrites.replay_rewrites`).
        """
        assert chosen.legalized and chosen.legalization is not None
        if chosen.model is not None:
            return chosen.model
        logger.debug("building the legalized candidate at opset %d", chosen.opset)
        work, _ = copy_with_origins(model)
        source = default_opset(work.opset_imports)
        assert source is not None
        built: set[ir.Node] = set()
        for opset in range(source - 1, chosen.opset - 1, -1):
            built.update(run_lowering(work, opset).built)
        ordered = [n for n in walk(work.graph)[0] if n in built]
        legalization = chosen.legalization
        replay_rewrites(work, legalization.opset, legalization.rewrites, self.table, ordered)
        chosen.model = work
        return work

    def lower_and_predict(self, work: ir.Model, target: int, state: WorkState) -> Candidate:
        """Lower ``work`` to ``target`` and record its plain candidate. When the step changed
        no node, the prediction and price are derived from the candidate above where
        :func:`~.twins.derive_prediction` proves them the same but for the labels (the
        module's rule 2); else they are made afresh, their calls to ONNX recorded for the
        next step (with ``keep_models`` or a wanted opset, nothing is derived)."""
        result = run_lowering(work, target)
        state.built.update(result.built)
        state.replaced.update(
            state.origin.nodes[n] for n in result.replaced if n in state.origin.nodes
        )
        reads, self._reads = self._reads, None
        above = self.plain.get(target + 1)
        derived = None
        if (
            self._derives()
            and above is not None
            and not (result.built or result.replaced or result.rewritten)
        ):
            derived = derive_prediction(above.prediction, reads, work, self.table, target)
        if derived is not None:
            assert above is not None
            prediction, cost = derived, above.rank.cost
            self.derived.add(target)
        else:
            with self._recording() as self._reads:
                prediction = predict_placement(work, self.table)
                cost = placement_cost(prediction, work, self.sizes)
        plain = self.add_plain(
            target, prediction, state.origin, len(state.replaced), work, cost=cost
        )
        plain.replaced_nodes = frozenset(state.replaced)
        return plain


@dataclasses.dataclass
class WorkState:
    """The working copy's relation to the model, as it is lowered step by step."""

    origin: Correspondence
    built: set[ir.Node] = dataclasses.field(default_factory=set)
    replaced: set[ir.Node] = dataclasses.field(default_factory=set)  # the model's nodes


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """How to choose: the objective's dims, and whether (and how much) to measure."""

    sizes: DimSizes = dataclasses.field(default_factory=DimSizes)
    measure: bool = False
    measure_top: int = MEASURE_TOP
    measure_runs: int = 10
    keep_models: bool = False


def to_measure(
    pool: list[Candidate], source: int, top: int, *, distinct: bool = True
) -> list[Candidate]:
    """The best ``top`` by estimate, the source, the best plain and best legalized.

    With ``distinct``, among candidates with the same estimate (the same placement, e.g. a
    legalized model at 21 and at 20) only the best ranked counts toward ``top``.
    """
    fine = {id(r) for r in undominated([c.rank for c in pool], lambda r: r.cost)}
    ranked = sorted(pool, key=lambda c: (id(c.rank) not in fine, c.rank.key()))
    picked: list[Candidate] = []
    for candidate in ranked:
        same = any(c.rank.cost == candidate.rank.cost for c in picked)
        if len(picked) < top and not (distinct and same):
            picked.append(candidate)
    for wanted in (
        [c for c in ranked if c.opset == source and not c.legalized][:1],
        [c for c in ranked if not c.legalized][:1],
        [c for c in ranked if c.legalized][:1],
    ):
        picked += [c for c in wanted if c not in picked]
    return picked


def measure_candidates(
    pool: list[Candidate],
    source: int,
    table: KernelTable,
    settings: SearchSettings,
    top: int,
    distinct: bool,
    measured: dict[tuple[int, bool], CandidateMeasurement],
) -> Candidate:
    """Run the candidates of rule 8 in real sessions; the fastest (``measured`` filled)."""
    timed = []
    for candidate in to_measure(pool, source, top, distinct=distinct):
        assert candidate.model is not None  # kept: settings.measure
        try:
            result = measure_candidate(
                candidate.model, table.ep, settings.sizes, runs=settings.measure_runs
            )
        except (RuntimeError, ImportError) as error:
            raise ValueError(
                f"--measure needs a session on {table.ep} here, and ORT cannot make one: {error}"
            ) from error
        logger.info(
            "measured opset %d%s on %s: predicted %s; measured %d Memcpy, %d CPU nodes, %.3f ms",
            candidate.opset,
            " (legalized)" if candidate.legalized else "",
            table.ep,
            candidate.rank.cost,
            result.memcpy,
            result.cpu_nodes,
            result.latency_ms,
        )
        measured[(candidate.opset, candidate.legalized)] = result
        timed.append((candidate, result))
    fastest: Candidate = pick_fastest(timed)
    return fastest
