"""Apply ORT's fused kernels where an EP has them, each fusion verified by running the model.

:class:`FuseForEpPass` tries each fusion of :data:`FUSIONS` in order. A fusion is applied
only when

1. the EP's kernel table has a kernel for the fused op (domain, op, version 1, the model's
   float type) -- so an EP without ``com.microsoft::GroupQueryAttention`` keeps the exact
   ONNX form; and
2. the fused model computes the same function where it will run
   (:mod:`~onnxscript_ep_passes.fusion.verify`): on generated inputs that exercise what a
   fused kernel is sensitive to (batch 1 and 2, left and right padding, several sequence
   lengths, around each sliding window, a past where there is a KV cache) every output
   of the fused model, on ORT's CPU EP and -- when it loads here -- on the target EP, is
   within tolerance of the model before the pass on the CPU EP
   (``|fused - unfused| <= tol + tol * |unfused|``) at **every position**. The tolerance is
   the fusion's own plus those of the fusions kept before it (in this pass and, given as
   ``prior_tolerance``, in earlier ones): the target EP's kernels for those differ from
   the CPU EP's too, and each fused model is compared with the unfused one. With
   ``allow_padding_differences`` the positions ``attention_mask`` drops are not compared
   (fused kernels leave them unspecified); the record says which were excluded and by how
   much they differ. A fusion that fails, or that cannot be run, is dropped and the model
   is left as it was before it.

The pass returns a :class:`FusionResult` whose ``records`` hold one :class:`FusionRecord`
per fusion tried: how many nodes
it created, the op and kernel, the verified maximum absolute difference, each EP's check,
whether it was kept and why not (in user terms: which EP, how much, on which inputs, and
what would accept it). Tolerances (fp32 models) are documented in docs/ep.md.
"""

from __future__ import annotations

__all__ = [
    "ACTIVATION_FUSIONS",
    "ATTENTION_FUSIONS",
    "EMBEDDING_FUSIONS",
    "FUSIONS",
    "NORM_FUSIONS",
    "FuseForEpPass",
    "FusionRecord",
    "FusionResult",
    "FusionSpec",
]

import dataclasses
import functools
import logging
import os
from collections.abc import Callable
from typing import Any

import onnx_ir as ir
import onnx_ir.passes.common as common_passes

from onnxscript_ep_passes.core.copies import adopt
from onnxscript_ep_passes.core.onnx_utils import get_schema
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.profiles import EpProfile
from onnxscript_ep_passes.ep.target import EpTarget, TargetRequest
from onnxscript_ep_passes.fusion.activation import fuse_bias_gelu, fuse_fast_gelu
from onnxscript_ep_passes.fusion.attention import fuse_attention_to_gqa
from onnxscript_ep_passes.fusion.causal_mha import fuse_causal_attention_to_mha
from onnxscript_ep_passes.fusion.embedding import (
    fuse_sliced_position_gather,
    fuse_uniform_index_gather,
)
from onnxscript_ep_passes.fusion.evaluate import Sizes
from onnxscript_ep_passes.fusion.multi_head import fuse_attention_to_mha
from onnxscript_ep_passes.fusion.normalization import (
    fuse_rms,
    fuse_skip_layer_norm,
    fuse_skip_rms,
    rms_to_simplified,
)
from onnxscript_ep_passes.fusion.positions import (
    fuse_gather_before_reshape,
    fuse_int32_positions,
)
from onnxscript_ep_passes.fusion.verify import Runs, decide, ep_loadable, verify_fusion

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class FusionSpec:
    """One fusion: its name, the fused op, how to apply it and its tolerance."""

    pattern: str
    domain: str
    op: str
    apply: Callable[[ir.Model, int], tuple[int, dict[str, str]]]
    tolerance: float
    types: dict[str, str] | None = None
    """The fused op's types the kernel table must have (default: ``T`` the model's float)."""


def _simple(
    fuse: Callable[[ir.Model], int],
) -> Callable[[ir.Model, int], tuple[int, dict[str, str]]]:
    @functools.wraps(fuse)
    def apply(model: ir.Model, max_length: int) -> tuple[int, dict[str, str]]:
        return fuse(model), {}

    return apply


def _reasons(
    fuse: Callable[[ir.Model], tuple[int, dict[str, str]]],
) -> Callable[[ir.Model, int], tuple[int, dict[str, str]]]:
    @functools.wraps(fuse)
    def apply(model: ir.Model, max_length: int) -> tuple[int, dict[str, str]]:
        return fuse(model)

    return apply


def _gqa(model: ir.Model, max_length: int) -> tuple[int, dict[str, str]]:
    result = fuse_attention_to_gqa(model, max_length=max_length)
    notes = {name: f"fused; {note}" for name, note in result.notes.items()}
    return result.fused, {**result.refused, **notes}


def _mha(model: ir.Model, max_length: int) -> tuple[int, dict[str, str]]:
    result = fuse_attention_to_mha(model, max_length=max_length)
    return result.fused, result.refused


def _causal_mha(pad_heads: bool) -> Callable[[ir.Model, int], tuple[int, dict[str, str]]]:
    def apply(model: ir.Model, max_length: int) -> tuple[int, dict[str, str]]:
        result = fuse_causal_attention_to_mha(model, max_length=max_length, pad_heads=pad_heads)
        return result.fused, result.refused

    return apply


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
    FusionSpec(
        "skip_layer_normalization",
        "com.microsoft",
        "SkipLayerNormalization",
        _simple(fuse_skip_layer_norm),
        1e-4,
    ),
)
"""Normalization fusions, in order (the skip RMS fusion matches the others' output). The
RMS ones create ``SimplifiedLayerNormalization`` in the ONNX domain, which has no ONNX
schema: the pipeline runs them after the lowering."""

ACTIVATION_FUSIONS: tuple[FusionSpec, ...] = (
    FusionSpec("fast_gelu", "com.microsoft", "FastGelu", _simple(fuse_fast_gelu), 1e-4),
    FusionSpec("bias_gelu", "com.microsoft", "BiasGelu", _simple(fuse_bias_gelu), 1e-4),
)
"""Gelu fusions (only to a fused op that is the same function); run after the lowering."""

EMBEDDING_FUSIONS: tuple[FusionSpec, ...] = (
    FusionSpec("sliced_position_gather", "", "Slice", _simple(fuse_sliced_position_gather), 1e-4),
    FusionSpec("uniform_index_gather", "", "Gather", _simple(fuse_uniform_index_gather), 1e-4),
    FusionSpec(
        "int32_positions",
        "",
        "Range",
        _reasons(fuse_int32_positions),
        1e-4,
        {"T": "tensor(int32)"},
    ),
    FusionSpec("gather_before_reshape", "", "Reshape", _reasons(fuse_gather_before_reshape), 1e-4),
)
"""Embedding lookups by constant indices, read from the float table instead, and position
ids and token lookups moved off int64 (:mod:`~onnxscript_ep_passes.fusion.positions`; exact:
no int64 index arithmetic left on the host); run after the lowering."""

ATTENTION_FUSIONS: tuple[FusionSpec, ...] = (
    FusionSpec("group_query_attention", "com.microsoft", "GroupQueryAttention", _gqa, 1e-3),
    FusionSpec(
        "causal_multi_head_attention",
        "com.microsoft",
        "MultiHeadAttention",
        _causal_mha(pad_heads=False),
        1e-3,
    ),
    FusionSpec(
        "causal_multi_head_attention_padded_heads",
        "com.microsoft",
        "MultiHeadAttention",
        _causal_mha(pad_heads=True),
        1e-3,
    ),
    FusionSpec("multi_head_attention", "com.microsoft", "MultiHeadAttention", _mha, 1e-3),
)
"""Attention fusions: run before the lowering, whose legalization would otherwise expand
ai.onnx Attention on an EP without an Attention kernel. A decoder's attention left unfused
by GroupQueryAttention (refused, or dropped by the verification) is tried as causal
MultiHeadAttention, then as the same with padded heads
(:mod:`~onnxscript_ep_passes.fusion.causal_mha`); an encoder's as MultiHeadAttention."""

FUSIONS = NORM_FUSIONS + ACTIVATION_FUSIONS + EMBEDDING_FUSIONS + ATTENTION_FUSIONS
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
    checks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """One :class:`~onnxscript_ep_passes.fusion.verify.EpCheck` per EP the fusion ran on."""
    excluded: str | None = None
    """Kept with ``allow_padding_differences``: the positions not compared, and how much
    they differ on each EP."""
    not_checked: str | None = None
    """Why the fusion was not run on the target EP (it does not load here)."""
    skipped: list[str] = dataclasses.field(default_factory=list)
    """Inputs not verified: the model before the fusion does not run there on ORT."""
    tolerance_own: float = 0.0
    """The fusion's own tolerance (``tolerance`` adds those of the fusions kept before it)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def summary(self) -> str:
        """One line: ``pattern: N x op, max diff D on EPs (kernel)`` or why it was not kept."""
        head = f"{self.pattern}: {self.count} x {self.op}"
        if not self.kept:
            return f"{head}, not applied: {self.reason}"
        eps = " and ".join(c["ep"] for c in self.checks) or "no EP"
        text = f"{head}, max difference {self.max_abs_diff:.3g} on {eps} (kernel {self.kernel})"
        if self.excluded:
            text += f"; {self.excluded}"
        if self.not_checked:
            text += f"; not run on the target EP: {self.not_checked}"
        return text


@dataclasses.dataclass
class FusionResult(ir.passes.PassResult):
    """The result of :class:`FuseForEpPass`: one record per fusion tried, in order."""

    records: list[FusionRecord] = dataclasses.field(default_factory=list)


def _since_version(spec: FusionSpec, model: ir.Model) -> int:
    """The fused op's since_version at the model's opset (com.microsoft ops: 1)."""
    if spec.domain:
        return 1
    schema = get_schema(spec.op, model.opset_imports.get("", 1))
    return 1 if schema is None else schema.since_version


def _float_type(model: ir.Model) -> str:
    for value in model.graph.outputs:
        if value.dtype is not None and value.dtype.is_floating_point():
            return f"tensor({value.dtype.name.lower()})"
    return "tensor(float)"


class FuseForEpPass(ir.passes.InPlacePass):
    """Fuse into ORT kernels the EP has, verified (see module docstring).

    Args:
        ep: EP name (``webgpu``, ``cuda``, ...), its profile, or an
            :class:`~onnxscript_ep_passes.ep.target.EpTarget`.
        ort_version: The ORT release the model will run on (default: the installed one).
        table: A kernel table to use instead of looking one up.
        kernel_table: A file with the EP's kernels in the snapshot format.
        max_length: Longest past + current sequence the fused attention supports (rows of
            its rotary caches).
        fusions: The fusions to try (default :data:`FUSIONS`).
        allow_padding_differences: Accept a fusion that agrees at every position
            ``attention_mask`` keeps, whatever it computes at padding positions.
        check_ep: Also run each fusion on ``ep`` (None: when it loads here; True: it must).
        prior_tolerance: The tolerances of fusions kept before this pass (module doc).
    """

    def __init__(
        self,
        ep: str | EpProfile | EpTarget,
        ort_version: str | None = None,
        *,
        table: KernelTable | None = None,
        kernel_table: str | os.PathLike[str] | None = None,
        max_length: int = 4096,
        fusions: tuple[FusionSpec, ...] = FUSIONS,
        allow_padding_differences: bool = False,
        check_ep: bool | None = None,
        prior_tolerance: float = 0.0,
    ) -> None:
        self.prior_tolerance = prior_tolerance
        self.allow_padding_differences = allow_padding_differences
        self.check_ep = check_ep
        self.request = TargetRequest(ep, ort_version, table, kernel_table)
        self.profile = self.request.profile
        self.ep = self.profile.ort_name
        self.max_length = max_length
        self.fusions = fusions

    def _ep_check(self) -> tuple[bool, str | None]:
        """Whether to run the fusions on the target EP too, and if not, why."""
        if self.check_ep is False:
            return False, "check_ep=False"
        loadable, why = ep_loadable(self.ep)
        if not loadable and self.check_ep:
            raise ValueError(f"cannot check the fusions on {self.ep} here: {why}")
        return loadable, None if loadable else why

    def call(self, model: ir.Model) -> FusionResult:
        table = self.request.resolve().table
        records: list[FusionRecord] = []
        common_passes.ShapeInferencePass()(model)
        check_ep, not_checked = self._ep_check()
        if self.profile.is_host:
            not_checked = None
        original = model.clone()
        reference: Runs = {}
        skipped: dict[Sizes, str] = {}
        types = {"T": _float_type(model)}
        modified = False
        for spec in self.fusions:
            op_name = f"{spec.domain}::{spec.op}" if spec.domain else spec.op
            kernel, why = table.explain(
                spec.domain, spec.op, _since_version(spec, model), spec.types or types
            )
            budget = spec.tolerance + self.prior_tolerance
            budget += sum(r.tolerance_own for r in records if r.kept)
            record = FusionRecord(spec.pattern, op_name, 0, None, None, budget, kept=False)
            record.tolerance_own = spec.tolerance
            records.append(record)
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
            record.not_checked = not_checked
            try:
                verification = verify_fusion(
                    original,
                    reference,
                    skipped,
                    candidate,
                    ep=self.ep,
                    fused_op=(spec.domain, spec.op),
                    tolerance=budget,
                    max_length=self.max_length,
                    check_ep=check_ep,
                )
            except Exception as error:  # ORT refuses a model: the fusion cannot be verified
                record.reason = f"not verified: ORT cannot run the fused model: {error}"
                logger.warning("fusion %s dropped: %s", spec.pattern, record.reason)
                continue
            record.checks = [c.to_dict() for c in verification.checks]
            record.skipped = verification.skipped
            padded = not self.allow_padding_differences
            record.max_abs_diff = max(
                max(c.max_abs_diff, (c.padded_max_abs_diff or 0.0) if padded else 0.0)
                for c in verification.checks
            )
            kept, reason, record.excluded = decide(
                verification, budget, self.allow_padding_differences
            )
            if not kept:
                record.reason = reason
                logger.warning("fusion %s dropped: %s", spec.pattern, record.reason)
                continue
            record.kept = True
            adopt(model, candidate)
            modified = True
            logger.info("fused %s", record.summary())
        return FusionResult(model, modified, records)
