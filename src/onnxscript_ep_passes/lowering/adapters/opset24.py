"""Undo what ai.onnx opset 24 changed (24 -> 23).

Type-only changes of this step (float8e8m0 for the shape/cast family and Q/DQ) are
derived from ``onnx.defs`` by the registry; the adapters here cover the rest.
"""

from __future__ import annotations

__all__ = [
    "attention_24",
    "cast_24",
    "castlike_24",
    "splittosequence_24",
    "swish_24",
    "tensorscatter_24",
    "topk_24",
]

from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnxscript_ep_passes.lowering import schemas
from onnxscript_ep_passes.lowering.adapters._common import int64s, static_dim
from onnxscript_ep_passes.lowering.context import DowngradeContext
from onnxscript_ep_passes.lowering.registry import register_downgrade


def _drop_round_mode(node: ir.Node, ctx: DowngradeContext) -> None:
    ctx.require_types_allowed_below()
    node.attributes.pop("round_mode", None)


def _no_round_mode(node: onnx.NodeProto) -> bool:
    """Cast-24 and CastLike-24 added ``round_mode`` (and float8e8m0 to T1 and T2): a node
    without the attribute needs only the type rule (float8e8m0 refused), which is all
    :func:`_drop_round_mode` then does."""
    return all(attr.name != "round_mode" for attr in node.attribute)


@register_downgrade("Cast", 24, kind="attribute", lend_shapes=False, types_only=_no_round_mode)
def cast_24(node: ir.Node, ctx: DowngradeContext) -> None:
    """Cast-24 added float8e8m0 and ``round_mode``: drop ``round_mode``, refuse float8e8m0.

    ``round_mode`` only selects how values are rounded when casting *to* float8e8m0; any
    other cast ignores it, so dropping it keeps the meaning. A float8e8m0 cast has no
    equivalent at opset 23.
    """
    _drop_round_mode(node, ctx)


@register_downgrade("CastLike", 24, kind="attribute", lend_shapes=False, types_only=_no_round_mode)
def castlike_24(node: ir.Node, ctx: DowngradeContext) -> None:
    """CastLike-24 added float8e8m0 and ``round_mode``: as for Cast-24."""
    _drop_round_mode(node, ctx)


@register_downgrade("Swish", 24, kind="expansion")
def swish_24(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None]:
    """Swish-24 is new: expand it through its ONNX function body (x * Sigmoid(alpha * x))."""
    return ctx.expand_function()


# -- Attention ---------------------------------------------------------------------------

_MASK, _PAST_KEY, _PAST_VALUE, _NONPAD = 3, 4, 5, 6


def _same_dim(a: object, b: object) -> bool:
    """Whether two static dims are provably equal (equal ints, or one named symbol)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, ir.SymbolicDim) and isinstance(b, ir.SymbolicDim):
        return a.value is not None and a.value == b.value
    return False


def _mask_covers_keys(mask: ir.Value, key: ir.Value, past_key: ir.Value | None) -> bool:
    """Whether ``attn_mask``'s last dim provably equals past + current kv length."""
    if mask.shape is None or key.shape is None or mask.shape.rank() == 0:
        return False
    last, current = mask.shape[-1], key.shape[-2]
    if past_key is None:
        return _same_dim(last, current)
    if past_key.shape is None:
        return False
    past = past_key.shape[-2]
    if isinstance(last, int) and isinstance(current, int) and isinstance(past, int):
        return last == current + past
    return False


def _seq_len(ctx: DowngradeContext, value: ir.Value) -> ir.Value:
    """Dim -2 of Q/K/past_key (the sequence axis in both the 3D and the 4D layout), as [1]."""
    static = static_dim(value, -2)
    if static is not None:
        return ctx.constant(int64s(static))
    return ctx.op("Shape", [value], start=-2, end=-1)


def _arange(ctx: DowngradeContext, length: ir.Value) -> ir.Value:
    """``0, 1, ..., length - 1`` (int64) for a length given as a 1-element tensor."""
    scalar = ctx.op("Squeeze", [length, ctx.constant(int64s(0))])
    zero, one = ctx.constant(np.array(0, np.int64)), ctx.constant(np.array(1, np.int64))
    return ctx.op("Range", [zero, scalar, one])


def _axis_positions(ctx: DowngradeContext, value: ir.Value, axis: int) -> ir.Value:
    """``0, 1, ..., n - 1`` for n = dim ``axis`` of ``value``; a constant when n is static."""
    static = static_dim(value, axis)
    if static is not None:
        return ctx.constant(np.arange(static, dtype=np.int64))
    length = ctx.op("Shape", [value], start=axis, end=axis + 1 if axis != -1 else None)
    return _arange(ctx, length)


def _pad_mask(
    ctx: DowngradeContext, mask: ir.Value, dtype: ir.DataType, total: ir.Value
) -> ir.Value:
    """Pad (or crop) the mask's last axis to ``total`` keys: False, or -inf, at the end."""
    if dtype == ir.DataType.BOOL:
        fill = ctx.constant(np.array(False))
    else:
        fill = ctx.constant(np.array(-np.inf, dtype=dtype.numpy()))
    missing = ctx.op("Sub", [total, ctx.op("Shape", [mask], start=-1)])
    pads = ctx.op("Concat", [ctx.constant(int64s(0)), missing], axis=0)
    return ctx.op("Pad", [mask, pads, fill, ctx.constant(int64s(-1))], mode="constant")


def _allowed_keys(
    ctx: DowngradeContext, query: ir.Value, key: ir.Value, nonpad: ir.Value, causal: bool
) -> ir.Value:
    """Boolean mask of the keys ``nonpad_kv_seqlen`` (and ``is_causal``) let a query see.

    Key ``j`` is valid for batch ``b`` iff ``j < nonpad[b]``; with ``is_causal`` query
    ``i`` also needs ``j <= i + nonpad[b] - q_len`` (the bottom-right alignment
    Attention-24 uses for an external cache). Shape ``(batch, 1, q, kv)``.
    """
    columns = _axis_positions(ctx, key, -2)  # (kv,)
    lengths = ctx.op("Unsqueeze", [nonpad, ctx.constant(int64s(1))])  # (batch, 1)
    valid = ctx.op("Less", [columns, lengths])  # (batch, kv)
    q_len = _seq_len(ctx, query)
    if not causal:
        # Spelled out over the query axis too: ORT's Attention-23 kernel requires the
        # mask's dim -2 to equal q_sequence_length rather than broadcast from 1.
        valid = ctx.op("Unsqueeze", [valid, ctx.constant(int64s(1, 2))])
        ones = ctx.constant(int64s(1, 1))
        rows_shape = ctx.op("Concat", [ones, q_len, ctx.constant(int64s(1))], axis=0)
        return ctx.op("Expand", [valid, rows_shape])  # (batch, 1, q, kv)
    rows = _axis_positions(ctx, query, -2)
    rows = ctx.op("Unsqueeze", [rows, ctx.constant(int64s(1))])  # (q, 1)
    offset = ctx.op("Sub", [nonpad, q_len])  # (batch,)
    offset = ctx.op("Unsqueeze", [offset, ctx.constant(int64s(1, 2))])  # (batch, 1, 1)
    frontier = ctx.op("Add", [rows, offset])  # (batch, q, 1)
    before_frontier = ctx.op("LessOrEqual", [columns, frontier])  # (batch, q, kv)
    valid = ctx.op("Unsqueeze", [valid, ctx.constant(int64s(1))])  # (batch, 1, kv)
    allowed = ctx.op("And", [valid, before_frontier])  # (batch, q, kv)
    return ctx.op("Unsqueeze", [allowed, ctx.constant(int64s(1))])


@register_downgrade("Attention", 24, kind="rewrite")
def attention_24(node: ir.Node, ctx: DowngradeContext) -> None:
    """Attention-24 added input ``nonpad_kv_seqlen`` and let ``attn_mask`` be shorter than the keys: fold both into the ``attn_mask`` of one Attention-23 node.

    What Attention-24 adds to the attention bias (spec, reference and function body
    agree): a mask whose last dim is shorter than ``total_sequence_length`` (even 1) is
    padded at the end with ``-inf`` (False for a bool mask), not broadcast; key ``j`` of
    batch ``b`` is masked when ``j >= nonpad_kv_seqlen[b]``; and with ``is_causal`` the
    causal frontier of an external cache is bottom-right aligned *per batch*: query ``i``
    sees key ``j`` iff ``j <= i + nonpad_kv_seqlen[b] - q_sequence_length``.

    The rewrite pads the mask to the key length (Pad, skipped when the shapes prove it
    already matches) and, with ``nonpad_kv_seqlen``, builds that padding/causal allowance
    as a bool tensor of shape ``(batch, 1, q, kv)`` and combines it with the mask:
    And for a bool mask; for a float mask ``mask + Where(allowed, 0, -inf)`` in the
    mask's type; the bool allowance itself when there is no mask. ``is_causal`` is then
    cleared (Attention-23 would align it top-left). Exactness: Attention-24's bias is
    ``mask + causal + padding`` with the last two each 0 or -inf, so adding ``0`` or
    ``-inf`` once gives the same value for every float, including NaN and +inf (NaN
    either way) and -0 (+0 either way); a bool mask means a 0/-inf bias in both
    versions. The combined mask broadcasts like the original one (right-aligned against
    ``(batch, q_num_heads, q, kv)``, for 3D and 4D inputs and any head counts), and a
    row with no allowed key is zeroed by Attention-23's fully-masked-row rule exactly as
    Attention-24 zeroes it.

    Refused: ``nonpad_kv_seqlen`` together with ``past_key``/``past_value`` (the spec
    forbids it and the function body is inconsistent for it), and a scalar or integer
    ``attn_mask`` that would have to be padded or combined (Attention-24 leaves those
    undefined: no last axis to pad, no -inf to pad an integer with).
    """
    query, key, mask = node.inputs[0], node.inputs[1], ctx.input(_MASK)
    past_key, past_value, nonpad = ctx.input(_PAST_KEY), ctx.input(_PAST_VALUE), ctx.input(_NONPAD)
    assert query is not None and key is not None
    if nonpad is not None and (past_key is not None or past_value is not None):
        ctx.refuse(
            "input 'nonpad_kv_seqlen' is used together with past_key/past_value, which "
            "Attention-24 does not define (its spec says they must not be combined)"
        )
    pad = mask is not None and not _mask_covers_keys(mask, key, past_key)
    mask_dtype: ir.DataType | None = None
    if mask is not None and (pad or nonpad is not None):
        if mask.shape is not None and mask.shape.rank() == 0:
            ctx.refuse(
                f"attn_mask '{mask.name}' is a scalar: Attention-24 pads the mask along its "
                "last axis, which a scalar lacks"
            )
        mask_dtype = ctx.require_dtype(mask, "input attn_mask")
        if mask_dtype != ir.DataType.BOOL and not mask_dtype.is_floating_point():
            ctx.refuse(
                f"attn_mask '{mask.name}' is {mask_dtype.name}: an integer mask cannot be "
                "padded with -inf or combined with nonpad_kv_seqlen"
            )
    new_mask = mask
    if mask is not None and pad:
        assert mask_dtype is not None
        total = _seq_len(ctx, key)
        if past_key is not None:
            total = ctx.op("Add", [_seq_len(ctx, past_key), total])
        new_mask = _pad_mask(ctx, mask, mask_dtype, total)
    if nonpad is not None:
        causal = bool(ctx.attribute("is_causal", 0))
        allowed = _allowed_keys(ctx, query, key, nonpad, causal)
        if new_mask is None:
            new_mask = allowed
        elif mask_dtype == ir.DataType.BOOL:
            new_mask = ctx.op("And", [new_mask, allowed])
        else:
            assert mask_dtype is not None
            numpy_type = mask_dtype.numpy()
            zero = ctx.constant(np.array(0, dtype=numpy_type))
            minus_inf = ctx.constant(np.array(-np.inf, dtype=numpy_type))
            bias = ctx.op("Where", [allowed, zero, minus_inf])
            new_mask = ctx.op("Add", [new_mask, bias])
        node.attributes.pop("is_causal", None)
    # Attention-23 has six inputs; drop input 6 and trailing empty slots.
    count = min(len(node.inputs), _NONPAD)
    if new_mask is not mask:
        node.replace_input_with(_MASK, new_mask)
    while count > 3 and node.inputs[count - 1] is None:
        count -= 1
    node.resize_inputs(count)
    return None


# -- TensorScatter -----------------------------------------------------------------------

_INT64_MAX = int(np.iinfo(np.int64).max)


def _ones(ctx: DowngradeContext, shape: ir.Value, start: int, end: int) -> ir.Value:
    """As many int64 ones as ``shape[start:end]`` has entries."""
    starts, ends = ctx.constant(int64s(start)), ctx.constant(int64s(end))
    count = ctx.op("Shape", [ctx.op("Slice", [shape, starts, ends])])
    return ctx.op("ConstantOfShape", [count], value=ir.tensor(int64s(1)))


def _along_axis(ctx: DowngradeContext, vector: ir.Value, axis: int, like: ir.Value) -> ir.Value:
    """Reshape the 1-D ``vector`` to run along ``axis`` of ``like``, with size 1 elsewhere."""
    if like.shape is not None:
        rank = like.shape.rank()
        axes = [i for i in range(rank) if i != axis % rank]
        return ctx.op("Unsqueeze", [vector, ctx.constant(int64s(*axes))]) if axes else vector
    # Rank unknown: the target shape is [1] * len(before) + [-1] + [1] * len(after).
    shape = ctx.op("Shape", [like])
    parts = [_ones(ctx, shape, 0, axis), ctx.constant(int64s(-1))]
    if axis != -1:
        parts.append(_ones(ctx, shape, axis + 1, _INT64_MAX))
    return ctx.op("Reshape", [vector, ctx.op("Concat", parts, axis=0)])


@register_downgrade("TensorScatter", 24, kind="rewrite")
def tensorscatter_24(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None]:
    """TensorScatter-24 is new: rewrite it as ScatterElements with computed write positions.

    ``present = ScatterElements(past_cache, index, update, axis=axis)`` where ``index``
    has the shape of ``update`` and holds, at sequence position ``s`` of batch ``b``,
    ``write_indices[b] + s`` (``s`` alone without ``write_indices``), taken modulo
    ``max_sequence_length`` (Mod, floor semantics for int64 like the spec's ``%``) in
    ``circular`` mode. This is the spec's loop written as one scatter: every element of
    ``update`` goes to the cache position the loop writes it to, all other elements keep
    ``past_cache``; the positions are distinct whenever the spec's preconditions hold
    (``sequence_length <= max_sequence_length``, and in ``linear`` mode
    ``write_indices + sequence_length <= max_sequence_length``), so write order cannot
    matter. A negative in-range position counts from the end in both (numpy indexing
    in the spec, ScatterElements' negative indices).

    Refused: ``axis`` 0 (the batch axis, which the spec forbids), an unknown ``mode``,
    and element types ScatterElements-18 lacks (float8, float4, int4/uint4, float8e8m0).
    """
    past, update, write_indices = node.inputs[0], node.inputs[1], ctx.input(2)
    assert past is not None and update is not None
    mode = ctx.attribute("mode", "linear")
    axis = int(ctx.attribute("axis", -2))
    if mode not in ("linear", "circular"):
        ctx.refuse(f"attribute mode='{mode}' is not a TensorScatter mode")
    rank = past.shape.rank() if past.shape is not None else None
    if axis == 0 or (rank is not None and axis % rank == 0):
        ctx.refuse(f"attribute axis={axis} is the batch axis, which TensorScatter forbids")
    dtype = ctx.require_dtype(past, "input past_cache")
    scatter = schemas.get_schema("ScatterElements", ctx.opset)
    assert scatter is not None
    allowed = next(c.allowed_type_strs for c in scatter.type_constraints if c.type_param_str == "T")
    if schemas.type_string(ctx.type_of(past)) not in allowed:
        ctx.refuse(
            f"input 'past_cache' is {dtype.name}, which ScatterElements-"
            f"{scatter.since_version} (the opset-{ctx.opset} rewrite) does not allow"
        )
    positions = _axis_positions(ctx, update, axis)
    index = _along_axis(ctx, positions, axis, update)
    if write_indices is not None:
        index = ctx.op("Add", [_along_axis(ctx, write_indices, 0, update), index])
    if mode == "circular":
        capacity = static_dim(past, axis)
        if capacity is not None:
            modulus = ctx.constant(int64s(capacity))
        else:
            modulus = ctx.op("Shape", [past], start=axis, end=axis + 1 if axis != -1 else None)
        index = ctx.op("Mod", [index, modulus])
    index = ctx.op("Expand", [index, ctx.op("Shape", [update])])
    return [ctx.op("ScatterElements", [past, index, update], axis=axis)]


# -- bfloat16 additions ------------------------------------------------------------------


@register_downgrade("TopK", 24, kind="rewrite")
def topk_24(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None] | None:
    """TopK-24 added bfloat16: run a bfloat16 TopK in float32 and cast the values back.

    ``Cast(TopK(Cast(x, float)), bfloat16)`` with the same ``k``, ``axis``, ``largest``
    and ``sorted``; the indices come straight from the float TopK. Exact: every
    bfloat16 value (NaN, +-inf, -0 and subnormals included) is exactly representable in
    float32 and the cast preserves the order and equality of all values, so the float
    TopK selects the same elements in the same order with the same index tie-breaks;
    casting a float32 that came from a bfloat16 back to bfloat16 is lossless. Other
    types were already allowed by TopK-11.
    """
    data = node.inputs[0]
    assert data is not None
    if ctx.dtype_of(data) != ir.DataType.BFLOAT16:
        ctx.require_types_allowed_below()
        return None
    as_float = ctx.op("Cast", [data], to=ir.DataType.FLOAT)
    attrs: dict[str, Any] = dict(node.attributes)  # axis, largest, sorted as they are
    values, indices = ctx.op_multi("TopK", [as_float, node.inputs[1]], num_outputs=2, **attrs)
    return [ctx.op("Cast", [values], to=ir.DataType.BFLOAT16), indices]


@register_downgrade("SplitToSequence", 24, kind="refusal")
def splittosequence_24(node: ir.Node, ctx: DowngradeContext) -> None:
    """SplitToSequence-24 added bfloat16: refused for bfloat16 input, other types are kept.

    The output would be a ``seq(tensor(bfloat16))``, a type no opset-23 operator can
    produce: SequenceConstruct, SequenceInsert, SequenceEmpty and SequenceMap all exclude
    bfloat16 there, so a sequence of float32 parts cannot be cast back element-wise.
    """
    data = node.inputs[0]
    if ctx.dtype_of(data) == ir.DataType.BFLOAT16:
        ctx.refuse(
            "input is BFLOAT16: SplitToSequence-24 would output seq(tensor(bfloat16)), a "
            "type no opset-23 operator can produce (SequenceConstruct/SequenceInsert/"
            "SequenceMap exclude bfloat16)"
        )
    ctx.require_types_allowed_below()
