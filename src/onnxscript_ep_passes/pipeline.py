"""An onnxscript optimize() pipeline with the EP-aware lowering in the middle.

:func:`optimize_for_ep` runs, in order:

1. onnxscript's optimizer (constant folding, dead-code removal, ...) and its ONNX fusions;
2. :class:`~onnxscript_ep_passes.passes.LowerOpsetForEpPass` (the opset best for the EP);
3. the optimizer and the fusions again, on a copy that shares the weights: fusions that
   only fire at the lower opset (onnxscript fuses RMSNormalization, RotaryEmbedding and
   GQA only at opset 23) are recovered. The copy replaces the model only when the
   predicted placement on the EP is no worse (fallback nodes, then Memcpy nodes), so a
   fusion into an op the EP cannot run is never kept.

:data:`ep_pass_list` gives the same passes as a list, to append to one's own pipeline.
"""

from __future__ import annotations

__all__ = ["ep_pass_list", "optimize_for_ep"]

import logging
import os
from collections.abc import Mapping

import onnx_ir as ir
from onnxscript.optimizer import optimize
from onnxscript.rewriter import onnx_fusions

from onnxscript_ep_passes._copies import adopt
from onnxscript_ep_passes.ep.cost import placement_cost
from onnxscript_ep_passes.ep.dims import DimSizes
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.names import canonical_ep_name
from onnxscript_ep_passes.ep.placement import predict_placement
from onnxscript_ep_passes.ep.table_source import resolve_table
from onnxscript_ep_passes.passes.lower_for_ep import CPU_EPS, LowerOpsetForEpPass

logger = logging.getLogger(__name__)


class _OptimizeAndFuse(ir.passes.InPlacePass):
    """onnxscript's optimizer followed by its opset-specific ONNX fusions."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        optimize(model)
        counts = onnx_fusions.fuse(model)
        fused = {op: n for op, n in counts.items() if n}
        if fused:
            logger.info("fused at opset %s: %s", model.opset_imports.get(""), fused)
        return ir.passes.PassResult(model, modified=True)


def ep_pass_list(
    ep: str, ort_version: str | None = None, target_opset: int | None = None
) -> list[ir.passes.PassBase]:
    """Optimize, lower for ``ep``, optimize again: for ``ir.passes.PassManager``.

    Unlike :func:`optimize_for_ep`, the second optimization is always kept.
    """
    return [
        _OptimizeAndFuse(),
        LowerOpsetForEpPass(ep, ort_version, target_opset),
        _OptimizeAndFuse(),
    ]


def optimize_for_ep(
    model: ir.Model,
    ep: str,
    *,
    ort_version: str | None = None,
    target_opset: int | None = None,
    table: KernelTable | None = None,
    dims: DimSizes | Mapping[str, int] | str | None = None,
    measure: bool = False,
    kernel_table: str | os.PathLike[str] | None = None,
) -> ir.Model:
    """Optimize ``model`` for ``ep`` in place (see module docstring) and return it.

    ``dims``, ``measure`` and ``kernel_table`` are passed to the lowering (step 2); the
    fused copy is compared on the same objective (``dims``).
    """
    _OptimizeAndFuse()(model)
    canonical = canonical_ep_name(ep)
    if canonical in CPU_EPS:
        return model
    sizes = DimSizes.of(dims)
    if table is None:
        table = resolve_table(canonical, ort_version, kernel_table=kernel_table, measure=measure)
    lowering = LowerOpsetForEpPass(
        canonical, ort_version, target_opset, table=table, dims=sizes, measure=measure
    )
    if not lowering(model).modified:
        return model
    candidate = model.clone()
    _OptimizeAndFuse()(candidate)
    score_before = placement_cost(predict_placement(model, table), model, sizes)
    score_after = placement_cost(predict_placement(candidate, table), candidate, sizes)
    if not score_before.improves_on(score_after):
        adopt(model, candidate)
    else:
        logger.info(
            "kept the unfused model: fusing would give %s instead of %s on %s",
            score_after,
            score_before,
            canonical,
        )
    return model
