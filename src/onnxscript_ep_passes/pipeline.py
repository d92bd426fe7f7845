"""The deployment pipeline: optimize, fuse into the EP's kernels, lower for the EP, optimize.

:func:`optimize_for_ep` (and :class:`OptimizeForEpPass`, which keeps what each step did)
runs, in order:

1. onnxscript's optimizer (constant folding, dead-code removal, ...);
2. :class:`~onnxscript_ep_passes.fusion.FuseForEpPass` with the attention fusions
   (GroupQueryAttention) where the EP's kernel table has the fused op, each verified by
   running the model; before the lowering, so that the lowering's legalization does not
   expand the ai.onnx Attention the fusion replaces;
3. :class:`~onnxscript_ep_passes.passes.LowerOpsetForEpPass` (the opset best for the EP);
4. the normalization fusions (SimplifiedLayerNormalization,
   SkipSimplifiedLayerNormalization), gated and verified the same way; after the lowering,
   which refuses ops without an ONNX schema in the ONNX domain;
5. the optimizer and onnxscript's ONNX fusions again, on a copy that shares the weights:
   fusions that only fire at the lower opset (onnxscript fuses RMSNormalization,
   RotaryEmbedding and GQA only at opset 23) are recovered. The copy replaces the model
   only when the predicted placement on the EP is no worse (fallback nodes, then Memcpy
   nodes), so a fusion into an op the EP cannot run is never kept. When the lowering
   changes nothing, only the optimizer runs (it folds the Transpose/Reshape pairs step 2
   leaves around the fused attention).

For the CPU EP only step 1 runs. ``fuse=False`` skips steps 2 and 4. :data:`ep_pass_list`
gives steps 1, 3 and 5 as a list, to append to one's own pipeline.

With ``measure=True`` (``optimize --measure``; the EP must be loadable here) steps 2-5
also run without the fusions, on a copy of step 1's output, and when a fusion was kept
both models run in real sessions on the EP
(:func:`~onnxscript_ep_passes.fusion.choice.choose_by_measurement`): the faster one
(median latency; a tie keeps the fused one) is the result, and :attr:`OptimizeForEpPass.
candidates` holds each one's predicted and measured figures. The lowering then also
measures its opset candidates (``LowerOpsetForEpPass(measure=True)``).
"""

from __future__ import annotations

__all__ = ["OptimizeForEpPass", "ep_pass_list", "optimize_for_ep"]

import logging
from typing import Any

import onnx_ir as ir
from onnxscript.optimizer import optimize
from onnxscript.rewriter import onnx_fusions

from onnxscript_ep_passes.core.copies import adopt
from onnxscript_ep_passes.ep.cost import PlacementCost, placement_cost
from onnxscript_ep_passes.ep.dims import DimSizes, DimsSpec
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.placement import PlacementPrediction, predict_placement
from onnxscript_ep_passes.ep.profiles import resolve_ep
from onnxscript_ep_passes.ep.table_choice import get_table
from onnxscript_ep_passes.fusion.choice import (
    CandidateRecord,
    choose_by_measurement,
    predicted_counts,
)
from onnxscript_ep_passes.fusion.fuse_for_ep import (
    ACTIVATION_FUSIONS,
    ATTENTION_FUSIONS,
    NORM_FUSIONS,
    FuseForEpPass,
    FusionRecord,
    FusionSpec,
)
from onnxscript_ep_passes.passes.lower_for_ep import LowerOpsetForEpPass, lowest_opset_of
from onnxscript_ep_passes.reports.verdict import Figures, verdict

logger = logging.getLogger(__name__)


def _string_tensors_serializable(model: ir.Model) -> None:
    """Hold each string tensor the optimizer folded as an ``ir.StringTensor``.

    onnxscript's constant folding stores a folded string value as a plain ``ir.Tensor``
    over a bytes array, which onnx-ir cannot serialize (so the model could not be saved,
    nor run to verify a fusion)."""
    for graph in (model.graph, *model.graph.subgraphs()):
        for value in graph.initializers.values():
            tensor = value.const_value
            if (
                tensor is not None
                and tensor.dtype == ir.DataType.STRING
                and not isinstance(tensor, (ir.StringTensor, ir.TensorProtoTensor))
            ):
                value.const_value = ir.StringTensor(
                    tensor.numpy(), shape=ir.Shape(tensor.shape.numpy()), name=tensor.name
                )


class _Optimize(ir.passes.InPlacePass):
    """onnxscript's optimizer."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        optimize(model)
        _string_tensors_serializable(model)
        return ir.passes.PassResult(model, modified=True)


class _OptimizeAndFuse(ir.passes.InPlacePass):
    """onnxscript's optimizer followed by its opset-specific ONNX fusions."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        optimize(model)
        _string_tensors_serializable(model)
        counts = onnx_fusions.fuse(model)
        fused = {op: n for op, n in counts.items() if n}
        if fused:
            logger.debug("fused at opset %s: %s", model.opset_imports.get(""), fused)
        return ir.passes.PassResult(model, modified=True)


def ep_pass_list(
    ep: str, ort_version: str | None = None, target_opset: int | None = None
) -> list[ir.passes.PassBase]:
    """Optimize, lower for ``ep``, optimize again: for ``ir.passes.PassManager``.

    Unlike :func:`optimize_for_ep`, the second optimization is always kept and nothing is
    fused into com.microsoft kernels.
    """
    return [
        _OptimizeAndFuse(),
        LowerOpsetForEpPass(ep, ort_version, target_opset),
        _OptimizeAndFuse(),
    ]


class OptimizeForEpPass(ir.passes.InPlacePass):
    """The pipeline of the module docstring; :attr:`fusions` holds what steps 2 and 4 did.

    Args:
        ep, ort_version, target_opset, legalize, lowest_opset: As for
            :class:`~onnxscript_ep_passes.passes.LowerOpsetForEpPass`.
        table: A kernel table to use instead of looking one up.
        fuse: Run step 2.
        max_length: Longest past + current sequence a fused attention must support.
        dims: Sizes of symbolic dims for the cost estimate and measured runs (a
            ``DimSizes``, a mapping, a ``--dims`` string or None).
        measure: Choose between the fused and the unfused model by running both
            (module docstring).
        measure_rounds: Interleaved timed runs per candidate when measuring.
        allow_padding_differences: Keep a fusion that agrees with the unfused model at
            every position ``attention_mask`` keeps, whatever it computes at padding
            positions (default: every position must agree; see
            :class:`~onnxscript_ep_passes.fusion.FuseForEpPass`).
    """

    def __init__(
        self,
        ep: str,
        ort_version: str | None = None,
        target_opset: int | None = None,
        *,
        table: KernelTable | None = None,
        legalize: bool = True,
        fuse: bool = True,
        max_length: int = 4096,
        dims: DimsSpec = None,
        measure: bool = False,
        measure_rounds: int = 20,
        lowest_opset: int | None = None,
        allow_padding_differences: bool = False,
    ) -> None:
        self.allow_padding_differences = allow_padding_differences
        self.lowest_opset = lowest_opset_of(lowest_opset, target_opset)
        self.dims = dims  # a DimSizes, a mapping, a --dims string or None (the lowering's)
        self.measure = measure
        self.measure_rounds = measure_rounds
        self.candidates: list[CandidateRecord] = []
        self.chosen: str | None = None
        self.profile = resolve_ep(ep)
        self.ep = self.profile.ort_name
        self.ort_version = ort_version
        self.target_opset = target_opset
        self.table = table
        self.legalize = legalize
        self.fuse = fuse
        self.max_length = max_length
        self.opset: int | None = None
        self.fusions: list[FusionRecord] = []
        self.source_opset: int | None = None
        self.before: PlacementPrediction | None = None
        self.after: PlacementPrediction | None = None
        self.before_cost: PlacementCost | None = None
        self.after_cost: PlacementCost | None = None

    def summary(self, model: str | None = None) -> str:
        """The last run's verdict line (:func:`~onnxscript_ep_passes.reports.verdict.verdict`):
        the opset, the nodes fused, then the predicted figures of the model after step 1
        and of the result, e.g. ``opset 24 kept, 21 nodes fused (4 GroupQueryAttention,
        ...) on WebGPU (ORT 1.32, live table): Memcpy 23 -> 2 (...)``."""
        if self.before is None or self.after is None or self.table is None:
            return f"{model + ': ' if model else ''}optimized (nothing to place on {self.ep})"
        assert self.before_cost is not None and self.after_cost is not None
        kept = [r for r in self.fusions if r.kept and r.count]
        done = None
        if kept:
            per_op: dict[str, int] = {}
            for r in kept:
                per_op[r.op] = per_op.get(r.op, 0) + r.count
            total = sum(per_op.values())
            ops = ", ".join(f"{n} {op.rpartition('::')[2]}" for op, n in per_op.items())
            done = f"{total} node{'s' if total != 1 else ''} fused ({ops})"
        return verdict(
            ep=self.ep,
            ort_version=self.table.ort_version,
            table_source=self.table.source,
            source_opset=self.source_opset or 0,
            chosen_opset=self.opset or 0,
            before=Figures.of(self.before, self.before_cost),
            after=Figures.of(self.after, self.after_cost),
            model=model,
            done=done,
        )

    def report(self) -> dict[str, Any]:
        """What the last run did: fusions, the predicted placement before and after, and
        (``measure``) each candidate's predicted and measured figures."""

        def side(p: PlacementPrediction | None) -> dict[str, int] | None:
            return None if p is None else predicted_counts(p)

        table = self.table
        return {
            "ep": self.ep,
            "ort_version": None if table is None else table.ort_version,
            "table_source": None if table is None else table.source,
            "source_opset": self.source_opset,
            "opset": self.opset,
            "fusions": [r.to_dict() for r in self.fusions],
            "predicted_before": side(self.before),
            "predicted_after": side(self.after),
            "allow_padding_differences": self.allow_padding_differences,
            "measured": self.measure,
            "chosen": self.chosen,
            "candidates": [c.to_dict() for c in self.candidates],
        }

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.source_opset = model.opset_imports.get("")
        self.fusions, self.candidates, self.chosen = [], [], None
        _Optimize()(model)
        if self.profile.is_host:
            self.opset = model.opset_imports.get("")
            return ir.passes.PassResult(model, modified=True)
        table = self.table = self.table or get_table(self.ep, self.ort_version)
        sizes = DimSizes.of(self.dims)
        self.before = predict_placement(model, table)
        self.before_cost = placement_cost(self.before, model, sizes)
        unfused = model.clone() if self.measure and self.fuse else None
        self._run(model, table, fuse=self.fuse)
        if unfused is not None:
            self._choose(model, unfused, table)
        self.opset = model.opset_imports.get("")
        self.after = predict_placement(model, table)
        self.after_cost = placement_cost(self.after, model, sizes)
        return ir.passes.PassResult(model, modified=True)

    def _choose(self, model: ir.Model, unfused: ir.Model, table: KernelTable) -> None:
        """Measure the fused and the unfused model; keep the faster (module docstring)."""
        if not any(r.kept for r in self.fusions):
            logger.info("--measure: nothing was fused, one candidate, nothing to choose")
            return
        self._run(unfused, table, fuse=False)
        self.chosen, self.candidates = choose_by_measurement(
            [("fused", model), ("unfused", unfused)],
            table,
            self.dims,
            rounds=self.measure_rounds,
        )
        if self.chosen == "unfused":
            adopt(model, unfused)

    def _fuse(
        self, model: ir.Model, table: KernelTable, fusions: tuple[FusionSpec, ...], fuse: bool
    ) -> None:
        if fuse:
            fusing = FuseForEpPass(
                self.ep,
                table=table,
                max_length=self.max_length,
                fusions=fusions,
                allow_padding_differences=self.allow_padding_differences,
            )
            fusing(model)
            self.fusions.extend(fusing.records)

    def _run(self, model: ir.Model, table: KernelTable, *, fuse: bool) -> None:
        self._fuse(model, table, ATTENTION_FUSIONS, fuse)
        lowering = LowerOpsetForEpPass(
            self.ep,
            self.ort_version,
            self.target_opset,
            table=table,
            legalize=self.legalize,
            dims=self.dims,
            measure=self.measure,
            lowest_opset=self.lowest_opset,
        )
        lowered = lowering(model).modified
        self._fuse(model, table, NORM_FUSIONS + ACTIVATION_FUSIONS, fuse)
        if not lowered:
            _Optimize()(model)
            return
        candidate = model.clone()
        _OptimizeAndFuse()(candidate)
        before, after = predict_placement(model, table), predict_placement(candidate, table)
        sizes = DimSizes.of(self.dims)  # the user's --dims, as the lowering prices with
        score_before = placement_cost(before, model, sizes)
        score_after = placement_cost(after, candidate, sizes)
        if not score_before.improves_on(score_after):
            adopt(model, candidate)
        else:
            logger.info(
                "kept the unfused model: fusing would give %s instead of %s on %s",
                score_after,
                score_before,
                self.ep,
            )


def optimize_for_ep(
    model: ir.Model,
    ep: str,
    *,
    ort_version: str | None = None,
    target_opset: int | None = None,
    table: KernelTable | None = None,
    legalize: bool = True,
    fuse: bool = True,
    max_length: int = 4096,
    dims: DimsSpec = None,
    measure: bool = False,
    lowest_opset: int | None = None,
    allow_padding_differences: bool = False,
) -> ir.Model:
    """Optimize ``model`` for ``ep`` in place (see module docstring) and return it.

    ``dims`` and ``measure`` are :class:`OptimizeForEpPass`'s (the cost objective's
    dimension sizes; choosing between the fused and the unfused model, and the lowering's
    opset candidates, by measuring them in real sessions); ``lowest_opset`` bounds the
    lowering's search; ``allow_padding_differences`` accepts fusions that agree at every
    position ``attention_mask`` keeps (default: at every position).
    """
    OptimizeForEpPass(
        ep,
        ort_version,
        target_opset,
        table=table,
        legalize=legalize,
        fuse=fuse,
        max_length=max_length,
        dims=dims,
        measure=measure,
        lowest_opset=lowest_opset,
        allow_padding_differences=allow_padding_differences,
    )(model)
    return model
