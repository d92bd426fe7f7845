"""What the EP pass's search found: :class:`EpLoweringChoice`.

The choice holds every candidate the search weighed in one map, keyed by
``(opset, legalized)`` (:class:`~onnxscript_ep_passes.passes.candidates.CandidateEntry`:
its prediction, cost, nodes replaced and expanded, and measurement). What the choice says
of the chosen candidate and the source (``before``, ``after``, ``after_cost``,
``expanded``) is looked up there; the maps per kind (``predictions``, ``costs``, ...) are
read-only views of it. The rules of the search are in :mod:`.lower_for_ep`.
"""

from __future__ import annotations

__all__ = ["EpLoweringChoice"]

import dataclasses

import onnx_ir as ir

from onnxscript_ep_passes.ep.cost import PlacementCost
from onnxscript_ep_passes.ep.dims import DimSizes
from onnxscript_ep_passes.ep.kernel_table import TableKind
from onnxscript_ep_passes.ep.measure import CandidateMeasurement
from onnxscript_ep_passes.ep.placement import PlacementPrediction
from onnxscript_ep_passes.errors import DowngradeError
from onnxscript_ep_passes.lowering.lower_opset import MIN_TARGET_OPSET
from onnxscript_ep_passes.passes.candidates import CandidateEntry, CandidateKey
from onnxscript_ep_passes.passes.choice_reason import ChoiceReason, choice_reason
from onnxscript_ep_passes.passes.legalize import LegalizationDecision
from onnxscript_ep_passes.reports.verdict import Figures, verdict


@dataclasses.dataclass(frozen=True)
class EpLoweringChoice:
    """What :func:`choose_target_opset` found.

    Attributes:
        ep, ort_version, table_source, table_kind: The kernel table used (its
            provenance as text and as a value).
        source_opset: The model's opset.
        chosen_opset: The opset picked (``source_opset`` when lowering does not help).
        candidates: Every candidate weighed, keyed by ``(opset, legalized)``
            (:class:`~onnxscript_ep_passes.passes.candidates.CandidateEntry`: its
            prediction, cost, nodes replaced and expanded, and measurement). A plain
            candidate is there for each opset reached; a legalized one for each opset
            where legalization changed the model.
        blocked: Why the next lower opset is out of reach (None when 18 was reached).
        legalized: Whether the chosen candidate is the legalized one.
        decisions: What was done about each node that falls back at the source opset or,
            without legalization, at the chosen one.
        dims: The sizes the estimate gave the symbolic dimensions.
        ort_version_assumed: The table is a shipped snapshot of another release than the
            caller named, or the caller named none: ``ort_version`` is assumed
            (:func:`~onnxscript_ep_passes.ep.target.release_assumed`).
        ort_version_requested: The release the caller named (None when none was).
        lowest_opset: The lowest opset the search was allowed to weigh (18, or the
            caller's bound).
        replaced_nodes, expanded_nodes: The model's nodes the chosen candidate replaces by
            the lowering's adapters, and those legalization expands for the EP.

    ``predictions``, ``legalized_predictions``, ``costs``, ``legalized_costs``, ``plan``,
    ``measured`` and ``replaced`` are read-only views of ``candidates`` (kept for callers
    of the earlier parallel maps).
    """

    ep: str
    ort_version: str
    table_source: str
    table_kind: TableKind
    source_opset: int
    chosen_opset: int
    candidates: dict[CandidateKey, CandidateEntry]
    blocked: DowngradeError | None
    legalized: bool = False
    decisions: tuple[LegalizationDecision, ...] = ()
    dims: DimSizes = dataclasses.field(default_factory=DimSizes)
    ort_version_assumed: bool = False
    lowest_opset: int = MIN_TARGET_OPSET
    ort_version_requested: str | None = None
    replaced_nodes: frozenset[ir.Node] = frozenset()
    expanded_nodes: frozenset[ir.Node] = frozenset()

    @property
    def source(self) -> CandidateEntry:
        """The plain candidate at the source opset (the model as given)."""
        return self.candidates[(self.source_opset, False)]

    @property
    def chosen(self) -> CandidateEntry:
        """The chosen candidate."""
        return self.candidates[(self.chosen_opset, self.legalized)]

    @property
    def reason(self) -> ChoiceReason:
        """Why the chosen candidate was chosen (:mod:`.choice_reason`)."""
        return choice_reason(self.candidates, self.chosen.key, self.source_opset)

    @property
    def before(self) -> PlacementPrediction:
        return self.source.prediction

    @property
    def after(self) -> PlacementPrediction:
        return self.chosen.prediction

    @property
    def after_cost(self) -> PlacementCost:
        """The estimated cost of the chosen candidate."""
        return self.chosen.cost

    @property
    def expanded(self) -> tuple[ir.Node, ...]:
        """The nodes the chosen candidate expands (empty unless ``legalized``)."""
        return self.chosen.expanded

    def _of(self, legalized: bool) -> dict[int, CandidateEntry]:
        return {o: c for (o, lg), c in self.candidates.items() if lg is legalized}

    @property
    def predictions(self) -> dict[int, PlacementPrediction]:
        """View: the prediction of each plain candidate, per opset."""
        return {o: c.prediction for o, c in self._of(False).items()}

    @property
    def legalized_predictions(self) -> dict[int, PlacementPrediction]:
        """View: the prediction of each legalized candidate, per opset."""
        return {o: c.prediction for o, c in self._of(True).items()}

    @property
    def costs(self) -> dict[int, PlacementCost]:
        """View: the estimated cost of each plain candidate, per opset."""
        return {o: c.cost for o, c in self._of(False).items()}

    @property
    def legalized_costs(self) -> dict[int, PlacementCost]:
        """View: the estimated cost of each legalized candidate, per opset."""
        return {o: c.cost for o, c in self._of(True).items()}

    @property
    def plan(self) -> dict[int, tuple[ir.Node, ...]]:
        """View: the nodes each legalized candidate expanded, per opset."""
        return {o: c.expanded for o, c in self._of(True).items()}

    @property
    def measured(self) -> dict[CandidateKey, CandidateMeasurement]:
        """View: the measurement of each candidate measured."""
        return {k: c.measurement for k, c in self.candidates.items() if c.measurement is not None}

    @property
    def replaced(self) -> dict[CandidateKey, int]:
        """View: the model's nodes each candidate replaces."""
        return {k: c.replaced for k, c in self.candidates.items()}

    @property
    def changes_model(self) -> bool:
        """Whether applying the choice changes the model (a lower opset or expansions)."""
        return self.chosen_opset < self.source_opset or self.legalized

    def summary(self, model: str | None = None) -> str:
        """The verdict line, e.g. ``opset 24 -> 21 on WebGPU (ORT 1.32, live table):
        Memcpy 23 -> 3 (582.3 kB -> 17.0 kB per run), CPU compute 18.1 MFLOP -> 18.4 kFLOP;
        fall back 7 -> 1, shape math on CPU 26 -> 42`` (:mod:`~onnxscript_ep_passes.reports.verdict`);
        ``model`` prefixes it with the model's name."""
        return verdict(
            ep=self.ep,
            ort_version=self.ort_version,
            table_kind=self.table_kind,
            table_source=self.table_source,
            source_opset=self.source_opset,
            chosen_opset=self.chosen_opset,
            before=Figures.of(self.before, self.source.cost),
            after=Figures.of(self.after, self.after_cost),
            expanded=len(self.expanded),
            assumed=self.ort_version_assumed,
            model=model,
        )

    def __repr__(self) -> str:
        # The dataclass repr would print every node of every prediction (megabytes).
        legalized = sorted(o for o, lg in self.candidates if lg)
        plain = sorted(o for o, lg in self.candidates if not lg)
        return (
            f"<EpLoweringChoice {self.summary()}; candidates {plain}"
            f"{f', legalized {legalized}' if legalized else ''}, {len(self.decisions)} decisions>"
        )
