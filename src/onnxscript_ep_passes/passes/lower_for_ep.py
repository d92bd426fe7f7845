"""Lower a model to the opset that puts the most of it on a given execution provider.

Rules the pass follows:

1. For the CPU EP (and the default, which is CPU) it does nothing: CPU kernels follow ONNX.
2. The candidates are the model's own opset and each lower one, down to 18, that the
   adapters can reach for this model. They are found by lowering one working copy (it
   shares the weights) one opset at a time; the first refusal ends the search, since
   every lower target needs the step that was refused.
3. For each candidate, ORT's placement is predicted from the EP's kernel table
   (:func:`~onnxscript_ep_passes.ep.placement.predict_placement`). The pass picks the
   candidate with the fewest fallback nodes, then the fewest predicted Memcpy nodes; ties
   go to the higher opset (fewer rewrites).
4. An explicit ``target_opset`` overrides the choice (and is refused as usual when the
   model cannot reach it).
5. It logs at INFO the original and chosen opset, the model name, the EP, the ORT version
   and the ORT tracking issue, and at WARNING every node still predicted to fall back.
"""

from __future__ import annotations

__all__ = ["EpLoweringChoice", "LowerOpsetForEpPass", "choose_target_opset"]

import dataclasses
import logging

import onnx_ir as ir

from onnxscript_ep_passes.ep.kernel_table import KernelTable, canonical_ep_name, get_table
from onnxscript_ep_passes.ep.placement import PlacementPrediction, predict_placement
from onnxscript_ep_passes.errors import DowngradeError
from onnxscript_ep_passes.lowering.lower_opset import (
    MIN_TARGET_OPSET,
    ORT_TRACKING_ISSUE,
    LowerOpsetPass,
    default_opset,
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
        predictions: The prediction for each candidate opset that was reached.
        blocked: Why the next lower opset is out of reach (None when 18 was reached).
    """

    ep: str
    ort_version: str
    table_source: str
    source_opset: int
    chosen_opset: int
    predictions: dict[int, PlacementPrediction]
    blocked: DowngradeError | None

    @property
    def before(self) -> PlacementPrediction:
        return self.predictions[self.source_opset]

    @property
    def after(self) -> PlacementPrediction:
        return self.predictions[self.chosen_opset]


def _score(opset: int, prediction: PlacementPrediction) -> tuple[int, int, int]:
    return (len(prediction.fallback_nodes), prediction.memcpy, -opset)


def choose_target_opset(
    model: ir.Model,
    table: KernelTable,
    *,
    target_opset: int | None = None,
    floor: int = MIN_TARGET_OPSET,
) -> EpLoweringChoice:
    """Predict placement at each reachable opset and pick the best (see module docstring).

    ``model`` is not modified. With ``target_opset``, only the source and that opset are
    evaluated (and :class:`DowngradeError` propagates when it cannot be reached).
    """
    source = default_opset(model.opset_imports)
    if source is None:
        raise ValueError("the model imports no ai.onnx opset")
    predictions = {source: predict_placement(model, table)}
    blocked: DowngradeError | None = None
    if target_opset is not None and target_opset < source:
        work = model.clone()
        LowerOpsetPass(target_opset, announce=False)(work)
        predictions[target_opset] = predict_placement(work, table)
        chosen = target_opset
    else:
        work = model.clone()
        for opset in range(source - 1, floor - 1, -1):
            try:
                LowerOpsetPass(opset, announce=False)(work)
            except DowngradeError as error:
                blocked = error
                break
            predictions[opset] = predict_placement(work, table)
        chosen = (
            source
            if target_opset is not None
            else min(predictions, key=lambda o: _score(o, predictions[o]))
        )
    return EpLoweringChoice(
        ep=table.ep,
        ort_version=table.ort_version,
        table_source=table.source,
        source_opset=source,
        chosen_opset=chosen,
        predictions=predictions,
        blocked=blocked,
    )


class LowerOpsetForEpPass(ir.passes.InPlacePass):
    """Lower the model to the opset best for ``ep`` (see the module docstring).

    Args:
        ep: The EP, by ORT name or alias ("webgpu", "cuda", "dml", "cpu").
        ort_version: The ORT release the model will run on; None for the installed one
            (a live kernel table when the EP can be listed here, else the nearest snapshot).
        target_opset: Force this opset instead of choosing.
        table: A kernel table to use instead of looking one up.

    After a run, ``last_choice`` holds the :class:`EpLoweringChoice` (None for CPU).
    """

    def __init__(
        self,
        ep: str,
        ort_version: str | None = None,
        target_opset: int | None = None,
        *,
        table: KernelTable | None = None,
    ) -> None:
        super().__init__()
        self.ep = canonical_ep_name(ep)
        self.ort_version = ort_version
        self.target_opset = target_opset
        self.table = table
        self.last_choice: EpLoweringChoice | None = None

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.last_choice = None
        if self.ep in CPU_EPS:
            logger.debug("%s runs every opset: nothing to lower", self.ep)
            return ir.passes.PassResult(model, modified=False)
        table = self.table or get_table(self.ep, self.ort_version)
        choice = choose_target_opset(model, table, target_opset=self.target_opset)
        self.last_choice = choice
        modified = False
        if choice.chosen_opset < choice.source_opset:
            modified = LowerOpsetPass(choice.chosen_opset, ep=self.ep)(model).modified
        after = choice.after
        logger.info(
            "Model '%s' for %s (ORT %s, %s): opset %d -> %d; predicted fallback nodes %d -> %d, "
            "Memcpy %d -> %d. Track when this workaround can go: %s",
            model.graph.name,
            self.ep,
            table.ort_version,
            table.source,
            choice.source_opset,
            choice.chosen_opset,
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
