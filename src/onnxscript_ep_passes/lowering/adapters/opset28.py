"""Undo what ai.onnx opset 28 changed (28 -> 27).

Type-only changes of this step (float6 for Cast and Q/DQ, the Optional ops' new
types, ReduceLogSum(Exp)'s removed integer types, Einsum's bfloat16) are derived from
``onnx.defs`` by the registry. The adapters here cover the rest, and the type
additions that have an exact equivalent below: bfloat16 for the data-movement ops
(Compress, OneHot, ReverseSequence, Unique), the new Celu types (the half types in
float32, rounded once; double through Celu's function body) and BitShift on signed integers (and its now-defined shift amounts).
"""

from __future__ import annotations

__all__ = [
    "bitshift_28",
    "celu_28",
    "compress_28",
    "depthtospace_28",
    "mod_28",
    "onehot_28",
    "reversesequence_28",
    "spacetodepth_28",
    "swiglu_28",
    "unique_28",
]

import numpy as np
import onnx_ir as ir

from onnxscript_ep_passes.lowering.context import DowngradeContext
from onnxscript_ep_passes.lowering.registry import register_downgrade

_FLOATS = frozenset(
    {ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE}
)
_SIGNED_TO_UNSIGNED = {
    ir.DataType.INT8: ir.DataType.UINT8,
    ir.DataType.INT16: ir.DataType.UINT16,
    ir.DataType.INT32: ir.DataType.UINT32,
    ir.DataType.INT64: ir.DataType.UINT64,
}


def _ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _is_bfloat16(ctx: DowngradeContext, value: ir.Value | None, what: str) -> bool:
    """True for a bfloat16 value; otherwise checks the node's types against the old schema."""
    if ctx.require_dtype(value, what) == ir.DataType.BFLOAT16:
        return True
    ctx.require_types_allowed_below()
    return False


@register_downgrade("SwiGLU", 28, kind="expansion")
def swiglu_28(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None]:
    """SwiGLU-28 is new: Swish(A, alpha) * B (its function body); half types in float32.

    A float16 or bfloat16 SwiGLU computes ``Swish(Cast(A, float)) * Cast(B, float)`` and
    rounds once, Cast back to the input's type, as SwiGLU-28's outputs are (ONNX's
    reference and ``test_swiglu_float16``, bit for bit); the body in float16 rounds
    after the Sigmoid and after each Mul (one float16 ulp off on that test). Other types
    are expanded through the function body.
    """
    a, b = node.inputs[0], node.inputs[1]
    dtype = ctx.require_dtype(a, "A")
    if dtype not in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16) or b is None:
        return ctx.expand_function()
    float_a = ctx.op("Cast", [a], to=ir.DataType.FLOAT)
    swish = ctx.op("Swish", [float_a], alpha=ctx.attribute("alpha", 1.0))
    product = ctx.op("Mul", [swish, ctx.op("Cast", [b], to=ir.DataType.FLOAT)])
    return [ctx.op("Cast", [product], to=dtype)]


@register_downgrade("DepthToSpace", 28, kind="attribute")
def depthtospace_28(node: ir.Node, ctx: DowngradeContext) -> None:
    """DepthToSpace-28 only gained a function body: the node is valid at 27 as it is."""
    return None


@register_downgrade("SpaceToDepth", 28, kind="rewrite")
def spacetodepth_28(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None] | None:
    """SpaceToDepth-28 added ``mode``: drop DCR (the old behaviour), expand CRD.

    ``mode='DCR'`` is what SpaceToDepth always did, so the attribute is dropped.
    ``mode='CRD'`` is expanded through SpaceToDepth-28's function body, which is the
    definition: Reshape to (N, C, H/b, b, W/b, b), Transpose (0, 1, 3, 5, 2, 4),
    Reshape to (N, C*b*b, H/b, W/b); pure data movement.
    """
    mode = ctx.attribute("mode", "DCR")
    if mode == "DCR":
        node.attributes.pop("mode", None)
        return None
    if mode == "CRD":
        return ctx.expand_function()
    ctx.refuse(f"attribute mode={mode!r} is not a SpaceToDepth mode (DCR or CRD)")


@register_downgrade("Mod", 28, kind="rewrite")
def mod_28(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None] | None:
    """Mod-28 defined fmod=0 for floats (floor modulo) and fmod=1 for integers: rewrite both.

    Mod-13 only defines fmod=0 on integers and fmod=1 on floats; those are unchanged.

    Floats, fmod=0: ``r = Mod(a, b, fmod=1)`` is exact (C fmod); where ``r`` is nonzero
    and its sign differs from ``b``'s, the floor remainder is ``r + b`` (one rounding,
    as in the definition ``a - floor(a/b)*b`` carried out exactly); a zero result
    takes the sign of ``b``. This is the reference's (numpy's) floor-mod step for step
    and meets every special case of Mod-28: an infinite ``a`` or zero ``b`` gives NaN
    from fmod; an infinite ``b`` gives ``a`` (same sign) or ``a + b = b`` (opposite
    sign); NaN propagates. The zero's sign is made as ``+0 * Sign(b)``.

    Integers, fmod=1: unsigned is the same as fmod=0. For signed, the truncated
    remainder is the floor remainder ``m`` less ``b`` where ``m`` is nonzero and the
    signs of ``a`` and ``b`` differ (exact integer arithmetic; ``|m - b| < |b|``).
    """
    a, b = node.inputs[0], node.inputs[1]
    assert a is not None and b is not None
    dtype = ctx.require_dtype(a, "A")
    fmod = int(ctx.attribute("fmod", 0))
    if (dtype in _FLOATS) == (fmod == 1):
        return None
    if dtype in _FLOATS:
        np_dtype = dtype.numpy()
        zero = ctx.constant(np.array(0, dtype=np_dtype))
        r = ctx.op("Mod", [a, b], fmod=1)
        adjust = ctx.op("Xor", [ctx.op("Less", [r, zero]), ctx.op("Less", [b, zero])])
        floored = ctx.op("Where", [adjust, ctx.op("Add", [r, b]), r])
        # A zero result takes b's sign: +0 times Sign(b). (Where only ever selects
        # nonzero values or +0 here: some runtimes' Where loses the sign of zero.)
        is_zero = ctx.op("Equal", [r, zero])
        magnitude = ctx.op("Where", [is_zero, zero, floored])
        sign = ctx.op(
            "Where",
            [is_zero, ctx.op("Sign", [b]), ctx.constant(np.array(1, dtype=np_dtype))],
        )
        return [ctx.op("Mul", [magnitude, sign])]
    if dtype not in _SIGNED_TO_UNSIGNED:
        node.attributes.pop("fmod", None)
        return None
    np_dtype = dtype.numpy()
    zero_int = ctx.constant(np.array(0, dtype=np_dtype))
    m = ctx.op("Mod", [a, b])
    signs_differ = ctx.op("Xor", [ctx.op("Less", [a, zero_int]), ctx.op("Less", [b, zero_int])])
    nonzero = ctx.op("Not", [ctx.op("Equal", [m, zero_int])])
    adjust = ctx.op("Cast", [ctx.op("And", [nonzero, signs_differ])], to=dtype)
    return [ctx.op("Sub", [m, ctx.op("Mul", [b, adjust])])]


@register_downgrade("Celu", 28, kind="expansion")
def celu_28(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None] | None:
    """Celu-28 added bfloat16 and float16 (run in float32, rounded once) and double (body).

    A bfloat16 or float16 Celu computes in float32 and rounds once:
    ``Cast(Celu(Cast(X, float)), X's type)`` (widening is exact), which is what Celu-28
    gives (ONNX's reference and its ``test_celu_bfloat16`` / ``test_celu_float16``
    outputs); Celu's function body in the half type would round after each of its Div,
    Elu and Mul (one bfloat16 ulp off on ``test_celu_bfloat16``). A double Celu is
    expanded through the function body (``alpha * Elu(x / alpha)``) in double, which
    float32 could not hold. Float stays Celu.
    """
    x = node.inputs[0]
    dtype = ctx.require_dtype(x, "X")
    if dtype == ir.DataType.FLOAT:
        return None
    if dtype == ir.DataType.DOUBLE:
        return ctx.expand_function()
    alpha = ctx.attribute("alpha", 1.0)
    wide = ctx.op("Celu", [ctx.op("Cast", [x], to=ir.DataType.FLOAT)], alpha=alpha)
    return [ctx.op("Cast", [wide], to=dtype)]


@register_downgrade("BitShift", 28, kind="rewrite")
def bitshift_28(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None] | None:
    """BitShift-28 added signed integers and defined shifts by a negative or >= width amount.

    Out-of-range amounts now give 0 (or -1 for a right shift of a negative X);
    BitShift-11 left them undefined. Unsigned: kept as is when Y is a constant in
    range, else the shift amount is zeroed and the result multiplied by 0 or 1.
    Signed: X is reinterpreted as unsigned with BitCast (exact; lowered further by the
    BitCast-26 adapter), shifted, and reinterpreted back. An arithmetic right shift of
    a negative X is ``~((~X) >> Y)``, done with XOR against an all-ones mask, and an
    out-of-range right shift equals a shift by width - 1 (all sign bits). Every
    multiplication is by 0 or 1, so nothing overflows. Constant in-range amounts need
    none of the range handling.
    """
    x, y = node.inputs[0], node.inputs[1]
    assert x is not None and y is not None
    dtype = ctx.require_dtype(x, "X")
    bits = dtype.bitwidth
    direction = ctx.attribute("direction")
    constant = None if y.is_graph_input() else ir.convenience.get_const_tensor(y)
    amounts = None if constant is None else constant.numpy()
    constant_in_range = amounts is not None and bool(np.all((amounts >= 0) & (amounts < bits)))
    if dtype not in _SIGNED_TO_UNSIGNED:
        ctx.require_types_allowed_below()
        if constant_in_range:
            return None
        np_dtype = dtype.numpy()
        below = ctx.op(
            "Cast", [ctx.op("Less", [y, ctx.constant(np.array(bits, np_dtype))])], to=dtype
        )
        shifted = ctx.op("BitShift", [x, ctx.op("Mul", [y, below])], direction=direction)
        return [ctx.op("Mul", [shifted, below])]

    unsigned = _SIGNED_TO_UNSIGNED[dtype]
    np_dtype, np_unsigned = dtype.numpy(), unsigned.numpy()
    keep: ir.Value | None = None
    if constant_in_range:
        assert amounts is not None
        amount = ctx.constant(amounts.astype(np_unsigned))
    else:
        in_range = ctx.op(
            "And",
            [
                ctx.op("GreaterOrEqual", [y, ctx.constant(np.array(0, np_dtype))]),
                ctx.op("Less", [y, ctx.constant(np.array(bits, np_dtype))]),
            ],
        )
        keep = ctx.op("Cast", [in_range], to=dtype)
        if direction == "LEFT":
            amount = ctx.op("Mul", [y, keep])
        else:
            # Out of range: shift by width - 1, which leaves only copies of the sign bit.
            fill = ctx.op(
                "Mul",
                [
                    ctx.op("Sub", [ctx.constant(np.array(1, np_dtype)), keep]),
                    ctx.constant(np.array(bits - 1, np_dtype)),
                ],
            )
            amount = ctx.op("Add", [ctx.op("Mul", [y, keep]), fill])
        amount = ctx.op("Cast", [amount], to=unsigned)
    u = ctx.op("BitCast", [x], to=unsigned)
    if direction == "LEFT":
        shifted = ctx.op("BitShift", [u, amount], direction="LEFT")
        result = ctx.op("BitCast", [shifted], to=dtype)
        return [result if keep is None else ctx.op("Mul", [result, keep])]
    negative = ctx.op("Less", [x, ctx.constant(np.array(0, np_dtype))])
    flip = ctx.op(
        "Mul",
        [
            ctx.op("Cast", [negative], to=unsigned),
            ctx.constant(np.array(np.iinfo(np_unsigned).max, np_unsigned)),
        ],
    )
    shifted = ctx.op("BitShift", [ctx.op("BitwiseXor", [u, flip]), amount], direction="RIGHT")
    return [ctx.op("BitCast", [ctx.op("BitwiseXor", [shifted, flip])], to=dtype)]


@register_downgrade("Compress", 28, kind="rewrite")
def compress_28(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None] | None:
    """Compress-28 added bfloat16: Gather the indices where the condition holds.

    ``Compress(x, c, axis)`` keeps, in order, the slices at the indices where ``c`` is
    true, which is ``Gather(x, NonZero(c), axis)`` (on the flattened input without
    ``axis``); Gather moves bfloat16 bits unchanged.
    """
    x, condition = node.inputs[0], node.inputs[1]
    assert x is not None and condition is not None
    if not _is_bfloat16(ctx, x, "input"):
        return None
    indices = ctx.op("Squeeze", [ctx.op("NonZero", [condition]), ctx.constant(_ints(0))])
    axis = ctx.attribute("axis")
    if axis is None:
        x = ctx.op("Reshape", [x, ctx.constant(_ints(-1))])
        axis = 0
    return [ctx.op("Gather", [x, indices], axis=int(axis))]


@register_downgrade("OneHot", 28, kind="rewrite")
def onehot_28(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None] | None:
    """OneHot-28 added bfloat16 values: one-hot to 0/1 indices, then Gather the values.

    ``OneHot(indices, depth, [0, 1])`` marks each position off (0) or on (1);
    gathering ``values`` (``[off, on]``) at those marks gives the bfloat16 result
    bit for bit.
    """
    indices, depth, values = node.inputs[0], node.inputs[1], node.inputs[2]
    assert indices is not None and depth is not None and values is not None
    if not _is_bfloat16(ctx, values, "values"):
        return None
    marks = ctx.op(
        "OneHot",
        [indices, depth, ctx.constant(_ints(0, 1))],
        axis=int(ctx.attribute("axis", -1)),
    )
    return [ctx.op("Gather", [values, marks], axis=0)]


@register_downgrade("ReverseSequence", 28, kind="rewrite")
def reversesequence_28(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None] | None:
    """ReverseSequence-28 added bfloat16: GatherElements along time with reversed indices.

    For batch ``b`` and time ``t`` the source index is ``len[b] - 1 - t`` when
    ``t < len[b]``, else ``t``; broadcast over the other axes, GatherElements moves
    the bfloat16 bits unchanged.
    """
    x, lengths = node.inputs[0], node.inputs[1]
    assert x is not None and lengths is not None
    if not _is_bfloat16(ctx, x, "input"):
        return None
    time_axis = int(ctx.attribute("time_axis", 0))
    shape = ctx.op("Shape", [x])
    steps = ctx.op("Shape", [x], start=time_axis, end=time_axis + 1)
    positions = ctx.op(
        "Range",
        [
            ctx.constant(np.array(0, np.int64)),
            ctx.op("Squeeze", [steps, ctx.constant(_ints(0))]),
            ctx.constant(np.array(1, np.int64)),
        ],
    )
    # (time, batch) when time_axis == 0, else (batch, time).
    pos_axis, len_axis = (1, 0) if time_axis == 0 else (0, 1)
    positions = ctx.op("Unsqueeze", [positions, ctx.constant(_ints(pos_axis))])
    lengths = ctx.op("Unsqueeze", [lengths, ctx.constant(_ints(len_axis))])
    reversed_ = ctx.op(
        "Sub", [ctx.op("Sub", [lengths, ctx.constant(np.array(1, np.int64))]), positions]
    )
    source = ctx.op("Where", [ctx.op("Less", [positions, lengths]), reversed_, positions])
    # Append one unit axis per remaining input axis, then broadcast to the input shape.
    rest = ctx.op("Sub", [ctx.op("Shape", [shape]), ctx.constant(_ints(2))])
    ones = ctx.op("ConstantOfShape", [rest], value=ir.tensor(_ints(1)))
    source = ctx.op(
        "Reshape", [source, ctx.op("Concat", [ctx.op("Shape", [source]), ones], axis=0)]
    )
    source = ctx.op("Expand", [source, shape])
    return [ctx.op("GatherElements", [x, source], axis=time_axis)]


@register_downgrade("Unique", 28, kind="rewrite")
def unique_28(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None] | None:
    """Unique-28 added bfloat16: run Unique on float, take the values from the input.

    bfloat16 -> float is exact and keeps order and equality (NaN stays NaN, -0 == +0),
    so Unique on the float copy makes the same decisions: its ``indices``,
    ``inverse_indices`` and ``counts`` are the bfloat16 ones. ``Y`` is gathered from
    the input at ``indices`` (each value's first occurrence), so its bits are the
    input's.
    """
    x = node.inputs[0]
    assert x is not None
    if not _is_bfloat16(ctx, x, "X"):
        return None
    axis = ctx.attribute("axis")
    _, indices, inverse, counts = ctx.op_multi(
        "Unique",
        [ctx.op("Cast", [x], to=ir.DataType.FLOAT)],
        num_outputs=4,
        axis=axis,
        sorted=ctx.attribute("sorted"),
    )
    data = x if axis is not None else ctx.op("Reshape", [x, ctx.constant(_ints(-1))])
    values = ctx.op("Gather", [data, indices], axis=0 if axis is None else int(axis))
    return [values, indices, inverse, counts]
