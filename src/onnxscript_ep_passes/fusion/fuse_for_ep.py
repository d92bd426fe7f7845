"""Apply ORT's fused kernels where an EP has them, each fusion verified by running the model.

:class:`FuseForEpPass` tries each fusion of :data:`FUSIONS` in order. A fusion is applied
only when

1. the EP's kernel table has a kernel for the fused op (domain, op, version 1, the model's
   float type) -- so an EP without ``com.microsoft::GroupQueryAttention`` keeps the exact
   ONNX form; and
2. the fused model computes the same function: on generated inputs
   (:func:`~onnxscript_ep_passes.fusion.evaluate.generate_feeds`, sizes
   :data:`VERIFY_SIZES`; past > 0 only for models with a KV cache) every output of the
   fused model is within the fusion's tolerance of the model before it (ORT CPU,
   ``|fused - unfused| <= tol + tol * |unfused|``). A fusion that fails, or that cannot be
   run, is dropped and the model is left as it was before it.

Each fusion gets a :class:`FusionRecord` in :attr:`FuseForEpPass.records`: how many nodes
it created, the op and kernel, the verified maximum absolute difference, whether it was
kept and why not. Tolerances (fp32 models) are documented in docs/ep.md.
"""

from __future__ import annotations

__all__ = [
    "ATTENTION_FUSIONS",
    "FUSIONS",
    "NORM_FUSIONS",
    "VERIFY_SIZES",
    "FuseForEpPass",
    "FusionRecord",
    "FusionSpec",
]

import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as common_passes

from onnxscript_ep_passes._copies import adopt
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.profiles import canonical_ep_name
from onnxscript_ep_passes.ep.table_choice import get_table
from onnxscript_ep_passes.fusion.attention import fuse_attention_to_gqa
from onnxscript_ep_passes.fusion.evaluate import Sizes, generate_feeds, run_model
from onnxscript_ep_passes.fusion.normalization import fuse_rms, fuse_skip_rms, rms_to_simplified

logger = logging.getLogger(__name__)

VERIFY_SIZES = (Sizes(1, 8, 0), Sizes(1, 5, 3))
"""Input sizes (batch, sequence, past) the fused and unfused models are compared at."""


@dataclasses.dataclass(frozen=True)
class FusionSpec:
    """One fusion: its name, the fused op, how to apply it and its tolerance."""

    pattern: str
    domain: str
    op: str
    apply: Callable[[ir.Model, int], tuple[int, dict[str, str]]]
    tolerance: float


def _simple(
    fuse: Callable[[ir.Model], int],
) -> Callable[[ir.Model, int], tuple[int, dict[str, str]]]:
    @functools.wraps(fuse)
    def apply(model: ir.Model, max_length: int) -> tuple[int, dict[str, str]]:
        return fuse(model), {}

    return apply


def _gqa(model: ir.Model, max_length: int) -> tuple[int, dict[str, str]]:
    result = fuse_attention_to_gqa(model, max_length=max_length)
    notes = {name: f"fused; {note}" for name, note in result.notes.items()}
    return result.fused, {**result.refused, **notes}


NORM_FUSIONS: tuple[FusionSpec, ...] = (
    FusionSpec(
        "rms_normalization_23", "", "SimplifiedLayerNormalization", _simple(rms_to_simplified), 1e-4
    ),
    FusionSpec("rms_normalization", "", "SimplifiedLayerNormalization", _simple(fuse_rms), 1e-4),
    FusionSpec(
        "skip_rms_normalization",
        "com.microsoft",
        "SkipSimplifiedLayerNormalization",
        _simple(fuse_skip_rms),
        1e-4,
    ),
)
"""RMS normalization fusions, in order (the skip fusion matches the others' output). They
create ``SimplifiedLayerNormalization`` in the ONNX domain, which has no ONNX schema: the
pipeline runs them after the lowering."""

ATTENTION_FUSIONS: tuple[FusionSpec, ...] = (
    FusionSpec("group_query_attention", "com.microsoft", "GroupQueryAttention", _gqa, 1e-3),
)
"""Attention fusions: run before the lowering, whose legalization would otherwise expand
ai.onnx Attention on an EP without an Attention kernel."""

FUSIONS = NORM_FUSIONS + ATTENTION_FUSIONS
"""Every fusion, in the order :class:`FuseForEpPass` tries them by default."""


@dataclasses.dataclass
class FusionRecord:
    """What one fusion did (the ``fusions`` entries of the optimize report)."""

    pattern: str
    op: str
    count: int
    kernel: str | None
    max_abs_diff: float | None
    tolerance: float
    kept: bool
    reason: str | None = None
    refused: dict[str, str] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def summary(self) -> str:
        """One line: ``pattern: N x op, max diff D (kept)`` or why it was not kept."""
        head = f"{self.pattern}: {self.count} x {self.op}"
        if self.kept:
            return f"{head}, max difference {self.max_abs_diff:.3g} (kernel {self.kernel})"
        return f"{head}, not applied: {self.reason}"


def _float_type(model: ir.Model) -> str:
    for value in model.graph.outputs:
        if value.dtype is not None and value.dtype.is_floating_point():
            return f"tensor({value.dtype.name.lower()})"
    return "tensor(float)"


def _has_past(model: ir.Model) -> bool:
    return any("past" in (v.name or "") for v in model.graph.inputs)


def _max_diff(
    expected: list[list[np.ndarray]], actual: list[list[np.ndarray]], tol: float
) -> tuple[float, bool]:
    worst, ok = 0.0, True
    for exp_run, act_run in zip(expected, actual):
        for e, a in zip(exp_run, act_run):
            if e.shape != a.shape:
                return float("inf"), False
            if not np.issubdtype(e.dtype, np.floating):
                ok = ok and bool(np.array_equal(e, a))
                continue
            diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
            if diff.size:
                worst = max(worst, float(np.nanmax(diff)))
            ok = ok and bool(np.all(diff <= tol + tol * np.abs(e)))
    return worst, ok


class FuseForEpPass(ir.passes.InPlacePass):
    """Fuse into ORT kernels the EP has, verified (see module docstring).

    Args:
        ep: EP name (``webgpu``, ``cuda``, ...).
        ort_version: The ORT release the model will run on (default: the installed one).
        table: A kernel table to use instead of looking one up.
        max_length: Longest past + current sequence the fused attention supports (rows of
            its rotary caches).
        fusions: The fusions to try (default :data:`FUSIONS`).
    """

    def __init__(
        self,
        ep: str,
        ort_version: str | None = None,
        *,
        table: KernelTable | None = None,
        max_length: int = 4096,
        fusions: tuple[FusionSpec, ...] = FUSIONS,
    ) -> None:
        self.ep = canonical_ep_name(ep)
        self.ort_version = ort_version
        self.table = table
        self.max_length = max_length
        self.fusions = fusions
        self.records: list[FusionRecord] = []

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        table = self.table or get_table(self.ep, self.ort_version)
        self.records = []
        common_passes.ShapeInferencePass()(model)
        sizes = [s for s in VERIFY_SIZES if s.past == 0 or _has_past(model)]
        feeds = [generate_feeds(model.graph.inputs, s, seed=i) for i, s in enumerate(sizes)]
        reference: list[list[np.ndarray]] | None = None
        types = {"T": _float_type(model)}
        modified = False
        for spec in self.fusions:
            op_name = f"{spec.domain}::{spec.op}" if spec.domain else spec.op
            kernel, why = table.explain(spec.domain, spec.op, 1, types)
            record = FusionRecord(spec.pattern, op_name, 0, None, None, spec.tolerance, kept=False)
            self.records.append(record)
            if kernel is None:
                record.reason = f"{table.ep}: {why}"
                continue
            record.kernel = f"{table.ep} {op_name} {kernel.describe()} ({table.source})"
            candidate = model.clone()
            record.count, record.refused = spec.apply(candidate, self.max_length)
            if not record.count:
                record.reason = (
                    "no node met the conditions (see refused)"
                    if record.refused
                    else "pattern not found"
                )
                continue
            try:
                if reference is None:
                    reference = [run_model(ir.to_proto(model), f) for f in feeds]
                outputs = [run_model(ir.to_proto(candidate), f) for f in feeds]
            except Exception as error:  # ORT refuses a model: the fusion cannot be verified
                record.reason = f"not verified: {error}"
                logger.warning("fusion %s dropped: %s", spec.pattern, record.reason)
                continue
            record.max_abs_diff, ok = _max_diff(reference, outputs, spec.tolerance)
            if not ok:
                record.reason = (
                    f"outputs differ by up to {record.max_abs_diff:.3g} "
                    f"(tolerance {spec.tolerance:g})"
                )
                logger.warning("fusion %s dropped: %s", spec.pattern, record.reason)
                continue
            record.kept = True
            reference = outputs
            adopt(model, candidate)
            modified = True
            logger.info(
                "fused %d x %s (%s), max difference %.3g",
                record.count,
                op_name,
                spec.pattern,
                record.max_abs_diff,
            )
        return ir.passes.PassResult(model, modified=modified)
