"""Undo what ai.onnx opset 25 changed (25 -> 24).

Type-only changes of this step (int2/uint2 for the shape/cast family and Q/DQ) are
derived from ``onnx.defs`` by the registry; the adapters here cover the rest.
"""

from __future__ import annotations

__all__ = ["attention_25"]

import numpy as np
import onnx_ir as ir

from onnxscript_ep_passes.lowering.adapters._common import static_dim
from onnxscript_ep_passes.lowering.context import DowngradeContext
from onnxscript_ep_passes.lowering.registry import register_downgrade

_FLOAT_MASK_TYPES = frozenset(
    {ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE}
)


def _window_bound(ctx: DowngradeContext, name: str) -> int:
    value = int(ctx.attribute(name, -1))
    if value < -1:
        ctx.refuse(f"attribute {name}={value} is invalid (must be -1 or nonnegative)")
    return value


def _window_ok(
    ctx: DowngradeContext,
    left: int,
    right: int,
    query: ir.Value,
    key: ir.Value,
    past_key: ir.Value | None,
    nonpad: ir.Value | None,
) -> tuple[ir.Value, ir.Value]:
    """The boolean sliding-window mask and the total key length it spans.

    The mask is ``(q_len, total)``, or ``(batch, 1, q_len, total)`` when the offset
    comes per batch from ``nonpad_kv_seqlen``; True where key ``j`` lies within the
    window of the query at absolute position ``p = offset + i``.
    """
    q_len = ctx.op("Shape", [query], start=-2, end=-1)
    kv_len = ctx.op("Shape", [key], start=-2, end=-1)
    past_len = None
    total = kv_len
    if past_key is not None:
        past_len = ctx.op("Shape", [past_key], start=-2, end=-1)
        total = ctx.op("Add", [past_len, kv_len])
    axis0 = ctx.constant(np.array([0], dtype=np.int64))
    zero = ctx.constant(np.array(0, dtype=np.int64))
    one = ctx.constant(np.array(1, dtype=np.int64))
    rows = ctx.op("Range", [zero, ctx.op("Squeeze", [q_len, axis0]), one])
    cols = ctx.op("Range", [zero, ctx.op("Squeeze", [total, axis0]), one])
    rows = ctx.op("Unsqueeze", [rows, ctx.constant(np.array([1], dtype=np.int64))])
    cols = ctx.op("Unsqueeze", [cols, axis0])
    if nonpad is not None:
        # External cache: offset = nonpad_kv_seqlen - q_len, one per batch entry.
        offset = ctx.op("Sub", [nonpad, q_len])
        offset = ctx.op("Unsqueeze", [offset, ctx.constant(np.array([1, 2, 3], dtype=np.int64))])
        axes01 = ctx.constant(np.array([0, 1], dtype=np.int64))
        rows = ctx.op("Add", [ctx.op("Unsqueeze", [rows, axes01]), offset])
        cols = ctx.op("Unsqueeze", [cols, axes01])
    elif past_len is not None:
        rows = ctx.op("Add", [rows, past_len])
    diff = ctx.op("Sub", [rows, cols])  # p - j
    checks: list[ir.Value] = []
    if left >= 0:
        checks.append(ctx.op("LessOrEqual", [diff, ctx.constant(np.array(left, dtype=np.int64))]))
    if right >= 0:
        checks.append(
            ctx.op("GreaterOrEqual", [diff, ctx.constant(np.array(-right, dtype=np.int64))])
        )
    ok = checks[0] if len(checks) == 1 else ctx.op("And", checks)
    return ok, total


def _pad_to_total(
    ctx: DowngradeContext,
    mask: ir.Value,
    total: ir.Value,
    fill: ir.Value,
    static_total: int | None,
) -> ir.Value:
    """Pad (or cut) the mask's last axis to ``total``, as Attention does itself."""
    if static_total is not None and static_dim(mask, -1) == static_total:
        return mask
    mask_len = ctx.op("Shape", [mask], start=-1)
    pads = ctx.op(
        "Concat",
        [ctx.constant(np.array([0], dtype=np.int64)), ctx.op("Sub", [total, mask_len])],
        axis=0,
    )
    return ctx.op("Pad", [mask, pads, fill, ctx.constant(np.array([-1], dtype=np.int64))])


@register_downgrade("Attention", 25, kind="rewrite")
def attention_25(node: ir.Node, ctx: DowngradeContext) -> None:
    """Attention-25 added ``left_window_size``/``right_window_size``: fold the window into ``attn_mask``.

    At the default (-1, -1) the attributes are dropped. Otherwise the window (query at
    absolute position ``p = offset + i`` sees keys ``p - left <= j <= p + right``, with
    ``offset`` the past length, or ``nonpad_kv_seqlen - q_len`` per batch) is built
    as a boolean mask and combined with ``attn_mask`` in one Attention-24 node, which
    keeps ``is_causal``, the caches and every other input.

    Exact: Attention-25's function body adds the window as a bias of 0 / -inf to the
    (padded) mask bias, next to the causal and padding biases. A boolean mask becomes
    ``attn_mask AND window`` (padded with False, which is the -inf padding), a float
    mask becomes ``attn_mask + Where(window, 0, -inf)`` in the mask's own type (padded
    with -inf), and with no mask the window itself is the mask. Adding terms that are
    each 0 or -inf gives the same result in any order (no rounding occurs: finite
    values are unchanged, -inf absorbs, +inf meets -inf as NaN either way), so
    Attention-24 adding the causal bias afterwards yields the same bias bit for bit,
    and hence the same outputs, including ``qk_matmul_output`` in every mode and the
    fully-masked-row guard (decided on that bias). Integer masks (their -inf padding
    is undefined) and ``nonpad_kv_seqlen`` together with ``past_key`` (which
    Attention-25 does not define) are refused.
    """
    left = _window_bound(ctx, "left_window_size")
    right = _window_bound(ctx, "right_window_size")
    if left < 0 and right < 0:
        node.attributes.pop("left_window_size", None)
        node.attributes.pop("right_window_size", None)
        return None
    query, key = ctx.input(0), ctx.input(1)
    mask, past_key, nonpad = ctx.input(3), ctx.input(4), ctx.input(6)
    assert query is not None and key is not None
    if past_key is not None and nonpad is not None:
        ctx.refuse(
            "sliding window with both past_key and nonpad_kv_seqlen: Attention-25 "
            "defines no window offset for this combination"
        )
    mask_dtype = None
    if mask is not None:
        mask_dtype = ctx.require_dtype(mask, "attn_mask")
        if mask_dtype != ir.DataType.BOOL and mask_dtype not in _FLOAT_MASK_TYPES:
            ctx.refuse(
                f"sliding window with an integer attn_mask ({mask_dtype.name}): the -inf "
                "window bias has no defined value in an integer mask"
            )
    ok, total = _window_ok(ctx, left, right, query, key, past_key, nonpad)
    static_total = static_dim(key, -2)
    if past_key is not None and static_total is not None:
        past = static_dim(past_key, -2)
        static_total = None if past is None else static_total + past
    if mask is None:
        new_mask = ok
    elif mask_dtype == ir.DataType.BOOL:
        padded = _pad_to_total(ctx, mask, total, ctx.constant(np.array(False)), static_total)
        new_mask = ctx.op("And", [padded, ok])
    else:
        assert mask_dtype is not None
        np_dtype = mask_dtype.numpy()
        neg_inf = ctx.constant(np.array(-np.inf, dtype=np_dtype))
        padded = _pad_to_total(ctx, mask, total, neg_inf, static_total)
        bias = ctx.op("Where", [ok, ctx.constant(np.array(0, dtype=np_dtype)), neg_inf])
        new_mask = ctx.op("Add", [padded, bias])
    if len(node.inputs) < 4:
        node.resize_inputs(4)
    node.replace_input_with(3, new_mask)
    node.attributes.pop("left_window_size", None)
    node.attributes.pop("right_window_size", None)
    return None
