"""The deployment pipeline: optimize, fuse into the EP's kernels, lower for the EP, optimize.

:func:`optimize_for_ep` (and :class:`OptimizeForEpPass`, whose :class:`OptimizeResult` says
what each step did)
runs, in order:

1. onnxscript's optimizer (constant folding, dead-code removal, ...);
2. :class:`~onnxscript_ep_passes.fusion.FuseForEpPass` with the attention fusions
   (GroupQueryAttention) where the EP's kernel table has the fused op, each verified by
   running the model; before the lowering, so that the lowering's legalization does not
   expand the ai.onnx Attention the fusion replaces;
3. :class:`~onnxscript_ep_passes.passes.LowerOpsetForEpPass` (the opset best for the EP);
4. the normalization fusions (SimplifiedLayerNormalization,
   SkipSimplifiedLayerNormalization, SkipLayerNormalization), the Gelu fusions and the
   embedding lookups by constant indices (:mod:`~onnxscript_ep_passes.fusion.embedding`),
   gated and verified the same way; after the lowering, which refuses ops without an ONNX
   schema in the ONNX domain;
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
(median latency; a tie keeps the fused one) is the result, and :attr:`OptimizeResult.
candidates` holds each one's predicted and measured figures. The lowering then also
measures its opset candidates (``LowerOpsetForEpPass(measure=True)``).
"""

from __future__ import annotations

__all__ = ["OptimizeForEpPass", "OptimizeResult", "ep_pass_list", "optimize_for_ep"]

import dataclasses
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import onnx_ir as ir
from onnxscript.optimizer import optimize
from onnxscript.rewriter import onnx_fusions

from onnxscript_ep_passes.core.copies import adopt
from onnxscript_ep_passes.ep.cost import PlacementCost, placement_cost
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.placement import PlacementPrediction, predict_placement
from onnxscript_ep_passes.ep.profiles import EpProfile
from onnxscript_ep_passes.ep.target import EpTarget
from onnxscript_ep_passes.fusion.choice import (
    CandidateRecord,
    choose_by_measurement,
    predicted_counts,
)
from onnxscript_ep_passes.fusion.fuse_for_ep import (
    ACTIVATION_FUSIONS,
    ATTENTION_FUSIONS,
    EMBEDDING_FUSIONS,
    NORM_FUSIONS,
    FuseForEpPass,
    FusionRecord,
    FusionResult,
    FusionSpec,
)
from onnxscript_ep_passes.passes.ep_pass import EpPass
from onnxscript_ep_passes.passes.lower_for_ep import LowerOpsetForEpPass
from onnxscript_ep_passes.passes.options import SearchOptions, search_options
from onnxscript_ep_passes.reports.verdict import Figures, verdict

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from onnxscript_ep_passes.passes.options import SearchFlags, SearchKeywords

logger = logging.getLogger(__name__)

AFTER_LOWERING = NORM_FUSIONS + ACTIVATION_FUSIONS + EMBEDDING_FUSIONS
"""The fusions of step 4."""

Stage = Callable[[ir.Model, EpTarget], bool]
"""One step of the pipeline on a model placed on a target: whether it changed the model."""


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


def _fingerprint(model: ir.Model) -> tuple[object, ...]:
    """A cheap summary that changes when the optimizer changes the model: each graph's and
    function's op sequence (with each node's inputs) and initializer names."""
    graphs = [model.graph, *model.graph.subgraphs(), *model.functions.values()]
    return tuple(
        (
            tuple((n.domain, n.op_type, tuple(v and v.name for v in n.inputs)) for n in g),
            tuple(g.initializers) if isinstance(g, ir.Graph) else (),
        )
        for g in graphs
    )


class _Optimize(ir.passes.InPlacePass):
    """onnxscript's optimizer; ``modified`` when it changed the model's fingerprint."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        before = _fingerprint(model)
        optimize(model)
        _string_tensors_serializable(model)
        return ir.passes.PassResult(model, modified=_fingerprint(model) != before)


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


@dataclasses.dataclass
class OptimizeResult(ir.passes.PassResult):
    """The result of :class:`OptimizeForEpPass`: what each step did.

    ``table`` is the kernel table placed on (None for the CPU EP when none was given);
    ``source_opset`` and ``opset`` the model's ai.onnx opset before and after; ``fusions``
    what steps 2 and 4 did; ``before``/``after`` and their costs the predicted placement
    after step 1 and of the result (None for the CPU EP); ``chosen`` and ``candidates``
    the measured choice (``measured``).
    """

    ep: str = ""
    table: KernelTable | None = None
    source_opset: int | None = None
    opset: int | None = None
    fusions: list[FusionRecord] = dataclasses.field(default_factory=list)
    before: PlacementPrediction | None = None
    after: PlacementPrediction | None = None
    before_cost: PlacementCost | None = None
    after_cost: PlacementCost | None = None
    allow_padding_differences: bool = False
    measured: bool = False
    chosen: str | None = None
    candidates: list[CandidateRecord] = dataclasses.field(default_factory=list)

    def summary(self, model: str | None = None) -> str:
        """The verdict line (:func:`~onnxscript_ep_passes.reports.verdict.verdict`):
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
        """What the run did: fusions, the predicted placement before and after, and
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
            "measured": self.measured,
            "chosen": self.chosen,
            "candidates": [c.to_dict() for c in self.candidates],
        }


class OptimizeForEpPass(EpPass):
    """The pipeline of the module docstring; returns an :class:`OptimizeResult`.

    Args:
        ep, ort_version, target_opset, legalize, lowest_opset, table, kernel_table,
            options: As for :class:`~onnxscript_ep_passes.passes.LowerOpsetForEpPass` (the
            target, an :class:`~onnxscript_ep_passes.ep.target.EpTarget`, is resolved
            once and given to every step).
        fuse: Run step 2.
        max_length: Longest past + current sequence a fused attention must support.
        dims: Sizes of symbolic dims for the cost estimate and measured runs (a
            ``DimSizes``, a mapping, a ``--dims`` string or None; sugar for ``options``).
        measure: Choose between the fused and the unfused model by running both
            (module docstring; sugar for ``options``).
        measure_rounds: Interleaved timed runs per candidate when measuring.
        allow_padding_differences: Keep a fusion that agrees with the unfused model at
            every position ``attention_mask`` keeps, whatever it computes at padding
            positions (default: every position must agree; see
            :class:`~onnxscript_ep_passes.fusion.FuseForEpPass`).
    """

    def __init__(
        self,
        ep: str | EpProfile | EpTarget,
        ort_version: str | None = None,
        target_opset: int | None = None,
        *,
        table: KernelTable | None = None,
        fuse: bool = True,
        max_length: int = 4096,
        measure_rounds: int = 20,
        allow_padding_differences: bool = False,
        kernel_table: str | os.PathLike[str] | None = None,
        options: SearchOptions | None = None,
        **search: Unpack[SearchFlags],
    ) -> None:
        self.allow_padding_differences = allow_padding_differences
        self.options = search_options(options, target_opset=target_opset, **search)
        self.measure = self.options.measure
        self.measure_rounds = measure_rounds
        super().__init__(ep, ort_version, table, kernel_table)
        self.table = table
        self.fuse = fuse
        self.max_length = max_length

    def call(self, model: ir.Model) -> OptimizeResult:
        result = OptimizeResult(
            model,
            False,
            ep=self.ep,
            table=self.table,
            source_opset=model.opset_imports.get(""),
            allow_padding_differences=self.allow_padding_differences,
            measured=self.measure,
        )
        result.modified = _Optimize()(model).modified
        if not self.profile.is_host:
            target = self.request.resolve(measure=self.measure)
            table = result.table = target.table
            sizes = self.options.dims
            result.before = predict_placement(model, table)
            result.before_cost = placement_cost(result.before, model, sizes)
            unfused = model.clone() if self.measure and self.fuse else None
            result.modified |= self._run(model, target, result, fuse=self.fuse)
            if unfused is not None:
                self._choose(model, unfused, target, result)
            result.after = predict_placement(model, table)
            result.after_cost = placement_cost(result.after, model, sizes)
        result.opset = model.opset_imports.get("")
        return result

    def _choose(
        self, model: ir.Model, unfused: ir.Model, target: EpTarget, result: OptimizeResult
    ) -> None:
        """Measure the fused and the unfused model; keep the faster (module docstring)."""
        if not any(r.kept for r in result.fusions):
            logger.info("--measure: nothing was fused, one candidate, nothing to choose")
            return
        self._run(unfused, target, OptimizeResult(unfused, False), fuse=False)
        result.chosen, result.candidates = choose_by_measurement(
            [("fused", model), ("unfused", unfused)],
            target.table,
            self.options.dims,
            rounds=self.measure_rounds,
        )
        if result.chosen == "unfused":
            adopt(model, unfused)

    def _fuse(self, fusions: tuple[FusionSpec, ...], result: OptimizeResult) -> Stage:
        """A fusion step: try ``fusions`` (when fusing), their records into ``result``."""

        def fuse(model: ir.Model, target: EpTarget) -> bool:
            fusing = FuseForEpPass(
                target,
                max_length=self.max_length,
                fusions=fusions,
                allow_padding_differences=self.allow_padding_differences,
                prior_tolerance=sum(f.tolerance_own for f in result.fusions if f.kept),
            )
            fused = fusing(model)
            assert isinstance(fused, FusionResult)
            result.fusions.extend(fused.records)
            return fused.modified

        return fuse

    def _run(
        self, model: ir.Model, target: EpTarget, result: OptimizeResult, *, fuse: bool
    ) -> bool:
        """Steps 2-5, in order; whether any changed the model."""
        lowered = False

        def lower(model: ir.Model, target: EpTarget) -> bool:
            nonlocal lowered
            lowered = LowerOpsetForEpPass(target, options=self.options)(model).modified
            return lowered

        def optimize_again(model: ir.Model, target: EpTarget) -> bool:
            if not lowered:
                return _Optimize()(model).modified
            return self._reoptimize(model, target.table)

        stages: list[Stage] = [
            *([self._fuse(ATTENTION_FUSIONS, result)] if fuse else []),  # step 2
            lower,  # step 3
            *([self._fuse(AFTER_LOWERING, result)] if fuse else []),  # step 4
            optimize_again,  # step 5
        ]
        modified = False
        for stage in stages:
            modified |= stage(model, target)
        return modified

    def _reoptimize(self, model: ir.Model, table: KernelTable) -> bool:
        """Step 5 after a lowering: the optimizer and ONNX fusions on a copy, kept when the
        predicted placement is no worse."""
        candidate = model.clone()
        _OptimizeAndFuse()(candidate)
        before, after = predict_placement(model, table), predict_placement(candidate, table)
        sizes = self.options.dims  # the user's --dims, as the lowering prices with
        score_before = placement_cost(before, model, sizes)
        score_after = placement_cost(after, candidate, sizes)
        if not score_before.improves_on(score_after):
            adopt(model, candidate)
            return True
        logger.info(
            "kept the unfused model: fusing would give %s instead of %s on %s",
            score_after,
            score_before,
            self.ep,
        )
        return False


def optimize_for_ep(
    model: ir.Model,
    ep: str | EpProfile | EpTarget,
    *,
    ort_version: str | None = None,
    table: KernelTable | None = None,
    fuse: bool = True,
    max_length: int = 4096,
    allow_padding_differences: bool = False,
    kernel_table: str | os.PathLike[str] | None = None,
    options: SearchOptions | None = None,
    **search: Unpack[SearchKeywords],
) -> ir.Model:
    """Optimize ``model`` for ``ep`` in place (see module docstring) and return it.

    ``search`` are the keywords of :class:`~onnxscript_ep_passes.passes.options.
    SearchOptions` (sugar for ``options``): ``dims`` and ``measure`` are
    :class:`OptimizeForEpPass`'s (the cost objective's
    dimension sizes; choosing between the fused and the unfused model, and the lowering's
    opset candidates, by measuring them in real sessions); ``lowest_opset`` bounds the
    lowering's search; ``allow_padding_differences`` accepts fusions that agree at every
    position ``attention_mask`` keeps (default: at every position); ``options`` (a
    :class:`~onnxscript_ep_passes.passes.options.SearchOptions`) instead of the search's
    keywords.
    """
    OptimizeForEpPass(
        ep,
        ort_version,
        table=table,
        fuse=fuse,
        max_length=max_length,
        allow_padding_differences=allow_padding_differences,
        kernel_table=kernel_table,
        options=search_options(options, **search),
    )(model)
    return model
