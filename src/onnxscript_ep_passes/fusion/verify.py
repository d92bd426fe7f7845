"""Verify a fusion where the model will run: on ORT's CPU EP and on the target EP.

:func:`verify_fusion` compares a fused candidate with the reference outputs of the model
before the fusion. Rules:

1. **Inputs** (:func:`verification_sizes`): what a fused attention kernel is sensitive to:
   batch 1 and 2, several sequence lengths (3, 8, 13 and 40: WebGPU's GroupQueryAttention
   takes another path for a first prompt of 32 tokens or more, measured wrong there on
   lavapipe when no sliding window binds), the last batch row of ``attention_mask``
   left- or right-padded (at batch 1 too: some exports run only there); with a KV cache (a ``past*`` input) a chunk
   after a past, and decode steps at batch 2 with a padded past; for each sliding window
   ``W`` of the candidate (``local_window_size``) sequences ``W - 1``, ``W + 1`` and
   ``2W + 1`` and a past beyond the window. Sizes with more than ``max_length`` tokens are
   left out; inputs that a model with static shapes makes identical are run once.
   Batch > 1 with both a past and more than one new token is not run: ORT's
   GroupQueryAttention refuses it (a documented limit of the fused model). Inputs the
   model before the fusion cannot run on ORT itself (e.g. torch's opset-23 exports, whose
   ``RotaryEmbedding`` ORT runs at batch 1 only) are skipped and listed
   (:attr:`Verification.skipped`); when none is left the fusion is not verified.
2. **Runs.** The reference is the model before the fusion on the CPU EP (graph
   optimizations off). The candidate runs on the CPU EP the same way and, when the target
   EP loads here (:func:`ep_loadable`; WebGPU in CI, CUDA or DirectML where present), in a
   real session on it at ORT's default optimization level, as a user runs it.
3. **Positions.** An output axis whose graph dim is symbolic and whose size is the number
   of current (or past + current) tokens is a token axis; an element is at a *padding
   position* when ``attention_mask`` is 0 at its batch row and token (for current tokens:
   ``attention_mask[b, past + t]``). Outputs without a token axis have none.
4. **Comparison.** An element agrees when ``|fused - reference| <= tol + tol *
   |reference|`` (NaN agrees only with NaN). Per EP (:class:`EpCheck`): the largest
   difference at the positions the mask keeps and at padding positions, and the runs
   where they occur.
5. **Decision** (:func:`decide`): the fusion is kept when, on every EP checked, every kept
   position agrees and -- unless ``allow_padding_differences`` -- every padding position
   agrees too. Otherwise the reason names the EP, the largest difference, where it is and
   what to do.
"""

from __future__ import annotations

__all__ = [
    "EpCheck",
    "Verification",
    "decide",
    "ep_loadable",
    "verification_sizes",
    "verify_fusion",
]

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnxscript_ep_passes.ep.profiles import CPU, resolve_ep
from onnxscript_ep_passes.fusion.evaluate import (
    Sizes,
    cpu_session,
    generate_feeds,
    run_session,
)
from onnxscript_ep_passes.fusion.mask_terms import has_past_input

logger = logging.getLogger(__name__)

Outputs = list[np.ndarray]


def verification_sizes(model: ir.Model, windows: Iterable[int], max_length: int) -> list[Sizes]:
    """The input sizes a fusion is verified at (rule 1)."""
    sizes = [
        Sizes(1, 8),
        Sizes(1, 8, 0, "left"),
        Sizes(1, 8, 0, "right"),
        Sizes(2, 8, 0, "right"),
        Sizes(2, 8, 0, "left"),
        Sizes(2, 3, 0, "right"),
        Sizes(1, 13),
        Sizes(1, 40),
    ]
    past = has_past_input(model)
    if past:
        sizes += [Sizes(1, 5, 3), Sizes(1, 3, 6, "left"), Sizes(2, 1, 7, "left")]
        sizes += [Sizes(2, 1, 7, "right")]
    for window in sorted({w for w in windows if w > 0}):
        sizes += [Sizes(2, s, 0, "right") for s in (window - 1, window + 1, 2 * window + 1) if s]
        if past:
            sizes += [Sizes(2, 1, window + 1, "left"), Sizes(1, 3, window + 1)]
    return [s for s in dict.fromkeys(sizes) if s.total <= max_length]


def ep_loadable(ep: str) -> tuple[bool, str]:
    """Whether ORT can make a session on ``ep`` here, and if not, why (never raises)."""
    profile = resolve_ep(ep)
    if profile.is_host:
        return False, "the CPU EP is the reference"
    return profile.loadable()


@dataclasses.dataclass
class EpCheck:
    """How a fused candidate compared with the reference on one EP (rule 4)."""

    ep: str
    runs: int
    max_abs_diff: float = 0.0  # at the positions the mask keeps
    padded_max_abs_diff: float | None = None  # at padding positions (None: there were none)
    padded_positions: int = 0  # (batch row, token) pairs the mask drops, over all runs
    ok: bool = True
    padded_ok: bool = True
    worst: str | None = None  # the run with the largest kept difference
    worst_padded: str | None = None
    fused_on_ep: str | None = None  # how many fused nodes ORT placed on the EP

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Verification:
    """The checks of one candidate (one :class:`EpCheck` per EP) and the skipped EP."""

    checks: list[EpCheck]
    skipped: list[str] = dataclasses.field(default_factory=list)
    """Inputs the model before the fusion cannot run on ORT, with ORT's reason."""


Runs = dict[Sizes, tuple[dict[str, np.ndarray], Outputs]]
"""The reference: per size, the feeds and the reference model's CPU outputs."""


def _reference_runs(
    model: ir.Model, sizes: Sequence[Sizes], cache: Runs, skipped: dict[Sizes, str]
) -> list[Sizes]:
    """Fill ``cache`` for ``sizes`` (feeds a static model makes identical run once; sizes
    the model cannot run go to ``skipped``)."""
    keys = {_key(feeds): size for size, (feeds, _) in cache.items()}
    session: Any = None
    chosen: list[Sizes] = []
    for size in sizes:
        if size in skipped:
            continue
        if size not in cache:
            feeds = generate_feeds(model.graph.inputs, size, seed=_seed(size))
            if _key(feeds) in keys:
                chosen.append(keys[_key(feeds)])
                continue
            if session is None:
                session = cpu_session(ir.to_proto(model))
            try:
                cache[size] = (feeds, run_session(session, feeds))
            except Exception as error:  # ORT refuses the model itself at this size
                skipped[size] = str(error).splitlines()[0][-200:]
                continue
            keys[_key(feeds)] = size
        chosen.append(size)
    if not chosen:
        raise ValueError(f"the model before the fusion runs at none of {list(sizes)}")
    return list(dict.fromkeys(chosen))


def _seed(size: Sizes) -> int:
    return ((size.batch * 1009 + size.seq) * 1009 + size.past) * 3 + len(size.padding)


def _key(feeds: dict[str, np.ndarray]) -> tuple[Any, ...]:
    mask = feeds.get("attention_mask")
    shapes = tuple((k, v.shape) for k, v in sorted(feeds.items()))
    return shapes, None if mask is None else mask.tobytes()


def _keep(
    value: ir.Value, array: np.ndarray, sizes: Sizes, mask: np.ndarray | None
) -> np.ndarray | None:
    """Where ``array`` (an output) is at a kept position (rule 3); None: no token axis."""
    shape = value.shape
    if mask is None or shape is None or len(shape) != array.ndim or array.ndim < 2:
        return None
    if array.shape[0] != mask.shape[0]:
        return None
    keep: np.ndarray | None = None
    for axis in range(1, array.ndim):
        if isinstance(shape[axis], int) or array.shape[axis] not in (sizes.seq, sizes.total):
            continue
        rows = mask if array.shape[axis] == sizes.total else mask[:, sizes.past :]
        view = [1] * array.ndim
        view[0], view[axis] = rows.shape
        axis_keep = np.broadcast_to(rows.reshape(view) != 0, array.shape)
        keep = axis_keep if keep is None else keep & axis_keep
    return keep


def _differences(
    expected: np.ndarray, actual: np.ndarray, tol: float
) -> tuple[np.ndarray, np.ndarray]:
    """Element differences (NaN vs NaN: 0, NaN vs a number: inf) and agreement."""
    if not np.issubdtype(expected.dtype, np.floating):
        same = np.asarray(expected == actual)
        return np.where(same, 0.0, np.inf), same
    e, a = expected.astype(np.float64), actual.astype(np.float64)
    nan_e, nan_a = np.isnan(e), np.isnan(a)
    with np.errstate(invalid="ignore"):
        diff = np.abs(a - e)
    diff = np.where(nan_e & nan_a, 0.0, np.where(nan_e | nan_a, np.inf, diff))
    return diff, diff <= tol + tol * np.abs(np.where(nan_e, 0.0, e))


def _compare(
    check: EpCheck,
    outputs: Sequence[ir.Value],
    sizes: Sizes,
    mask: np.ndarray | None,
    expected: Outputs,
    actual: Outputs,
    tol: float,
) -> None:
    where = (
        sizes.describe()
        if mask is not None
        else Sizes(sizes.batch, sizes.seq, sizes.past).describe()
    )
    if len(expected) != len(actual):
        check.ok, check.max_abs_diff, check.worst = False, float("inf"), where
        return
    padded_here = False
    for value, e, a in zip(outputs, expected, actual):
        if e.shape != a.shape:
            check.ok, check.max_abs_diff, check.worst = False, float("inf"), where
            continue
        diff, agree = _differences(e, a, tol)
        keep = _keep(value, e, sizes, mask)
        kept = np.ones(e.shape, bool) if keep is None else keep
        if kept.any():
            worst = float(diff[kept].max())
            if worst > check.max_abs_diff or check.worst is None:
                check.worst = where
            check.max_abs_diff = max(worst, check.max_abs_diff)
            check.ok = check.ok and bool(agree[kept].all())
        dropped = ~kept
        if dropped.any():
            padded_here = True
            worst = float(diff[dropped].max())
            if check.padded_max_abs_diff is None or worst > check.padded_max_abs_diff:
                check.padded_max_abs_diff, check.worst_padded = worst, where
            check.padded_ok = check.padded_ok and bool(agree[dropped].all())
    if padded_here and mask is not None:
        check.padded_positions += int((mask == 0).sum())


class _EpRunner:
    """The candidate in one real session on the target EP (rule 2)."""

    def __init__(self, proto: onnx.ModelProto, ep: str, fused_op: tuple[str, str]) -> None:
        import onnxruntime as ort

        from onnxscript_ep_passes.ep.sessions import measured_session

        self.session, placement = measured_session(
            proto.SerializeToString(),
            ep,
            graph_optimization_level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        )
        domain, op = fused_op
        fused = [n for n in placement.nodes if n.op_type == op and n.domain == domain]
        on_ep = sum(n.provider == placement.ep for n in fused)
        self.fused_on_ep = f"{on_ep} of {len(fused)} {op} on {placement.ep}" if fused else None


def verify_fusion(
    reference_model: ir.Model,
    reference: Runs,
    skipped: dict[Sizes, str],
    candidate: ir.Model,
    *,
    ep: str,
    fused_op: tuple[str, str],
    tolerance: float,
    max_length: int,
    check_ep: bool,
) -> Verification:
    """Run ``candidate`` on the CPU EP (and ``ep`` when ``check_ep``) and compare (rules 1-4).

    ``reference`` caches ``reference_model``'s feeds and CPU outputs per size (filled on
    demand; the fusions keep the graph inputs, so the feeds fit every candidate);
    ``skipped`` the sizes it cannot run, with ORT's reason.

    Raises:
        Exception: ORT refuses to build or run the candidate (or the reference).
    """
    windows = [
        n.attributes.get_int("local_window_size", -1)
        for n in candidate.graph
        if "local_window_size" in n.attributes
    ]
    wanted = verification_sizes(candidate, windows, max_length)
    runs = _reference_runs(reference_model, wanted, reference, skipped)
    proto = ir.to_proto(candidate)
    outputs = list(candidate.graph.outputs)
    sessions: list[tuple[EpCheck, Any]] = [(EpCheck(CPU.ort_name, len(runs)), cpu_session(proto))]
    if check_ep:
        runner = _EpRunner(proto, ep, fused_op)
        check = EpCheck(resolve_ep(ep).ort_name, len(runs), fused_on_ep=runner.fused_on_ep)
        sessions.append((check, runner.session))
    for check, session in sessions:
        for sizes in runs:
            feeds, expected = reference[sizes]
            actual = run_session(session, feeds)
            mask = feeds.get("attention_mask")
            _compare(check, outputs, sizes, mask, expected, actual, tolerance)
        logger.debug("fusion check %s", check)
    skips = [f"{size.describe()}: {skipped[size]}" for size in wanted if size in skipped]
    return Verification([check for check, _ in sessions], skips)


def decide(
    verification: Verification, tolerance: float, allow_padding_differences: bool
) -> tuple[bool, str | None, str | None]:
    """``(kept, reason, excluded)`` (rule 5): why a fusion is dropped, in user terms, and
    (kept with padding differences) which positions were excluded and by how much."""
    for check in verification.checks:
        if not check.ok:
            no_padding = check.padded_max_abs_diff is None
            where = "every position" if no_padding else "positions attention_mask keeps"
            return (
                False,
                f"outputs differ on {check.ep} by up to {check.max_abs_diff:.3g} at {where} "
                f"(tolerance {tolerance:g}; {check.worst})",
                None,
            )
    differing = [c for c in verification.checks if not c.padded_ok]
    if differing and not allow_padding_differences:
        worst = max(differing, key=lambda c: c.padded_max_abs_diff or 0.0)
        return (
            False,
            f"equal at every position attention_mask keeps, but differs on {worst.ep} by up "
            f"to {worst.padded_max_abs_diff:.3g} at padding positions ({worst.worst_padded}); "
            "--allow-padding-differences (allow_padding_differences=True) accepts it",
            None,
        )
    if not differing:
        return True, None, None
    parts = [
        f"{c.ep} differs there by up to {c.padded_max_abs_diff:.3g}"
        for c in verification.checks
        if c.padded_max_abs_diff is not None
    ]
    positions = max(c.padded_positions for c in differing)
    excluded = (
        f"positions where attention_mask is 0 ({positions} padded tokens over "
        f"{differing[0].runs} runs) not compared: {'; '.join(parts)}"
    )
    return True, None, excluded
