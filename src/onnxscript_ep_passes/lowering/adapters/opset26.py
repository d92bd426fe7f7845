"""Undo what ai.onnx opset 26 changed (26 -> 25).

Opset 26 only introduced two operators without function bodies, BitCast and CumProd;
the adapters here rewrite them with older operators where an exact equivalent exists.
"""

from __future__ import annotations

__all__ = ["bitcast_26", "cumprod_26"]

import numpy as np
import onnx_ir as ir

from onnxscript_ep_passes.lowering.adapters._common import static_dim
from onnxscript_ep_passes.lowering.context import DowngradeContext
from onnxscript_ep_passes.lowering.registry import register_downgrade

# Two's-complement integer types by bit width: (signed, unsigned).
_INTEGER_PAIRS: dict[int, tuple[ir.DataType, ir.DataType]] = {
    2: (ir.DataType.INT2, ir.DataType.UINT2),
    4: (ir.DataType.INT4, ir.DataType.UINT4),
    8: (ir.DataType.INT8, ir.DataType.UINT8),
    16: (ir.DataType.INT16, ir.DataType.UINT16),
    32: (ir.DataType.INT32, ir.DataType.UINT32),
    64: (ir.DataType.INT64, ir.DataType.UINT64),
}
_SIGNED = {pair[0]: bits for bits, pair in _INTEGER_PAIRS.items()}
_UNSIGNED = {pair[1]: bits for bits, pair in _INTEGER_PAIRS.items()}
_INT64_MIN = np.iinfo(np.int64).min


def _i64(value: int) -> np.ndarray:
    return np.array(value, dtype=np.int64)


def _signed_to_unsigned(ctx: DowngradeContext, x: ir.Value, bits: int) -> ir.Value:
    """Reinterpret a two's-complement ``bits``-bit integer as unsigned: x mod 2**bits.

    Only exact integer arithmetic is used: no intermediate value leaves the range of
    its type, and every Cast converts an in-range value.
    """
    target = _INTEGER_PAIRS[bits][1]
    if bits < 64:
        wide = ctx.op("Cast", [x], to=ir.DataType.INT64)
        negative = ctx.op("Less", [wide, ctx.constant(_i64(0))])
        wrapped = ctx.op("Add", [wide, ctx.constant(_i64(1 << bits))])
        return ctx.op("Cast", [ctx.op("Where", [negative, wrapped, wide])], to=target)
    # 64 bits: move negatives into [0, 2**63) first, add 2**63 back as uint64.
    negative = ctx.op("Less", [x, ctx.constant(_i64(0))])
    shift = ctx.op("Where", [negative, ctx.constant(_i64(_INT64_MIN)), ctx.constant(_i64(0))])
    low = ctx.op("Cast", [ctx.op("Sub", [x, shift])], to=ir.DataType.UINT64)
    high = ctx.op(
        "Mul",
        [
            ctx.op("Cast", [negative], to=ir.DataType.UINT64),
            ctx.constant(np.array(1 << 63, dtype=np.uint64)),
        ],
    )
    return ctx.op("Add", [low, high])


def _unsigned_to_signed(ctx: DowngradeContext, x: ir.Value, bits: int) -> ir.Value:
    """Reinterpret a ``bits``-bit unsigned integer as two's complement (exact arithmetic)."""
    target = _INTEGER_PAIRS[bits][0]
    if bits < 64:
        wide = ctx.op("Cast", [x], to=ir.DataType.INT64)
        high = ctx.op("GreaterOrEqual", [wide, ctx.constant(_i64(1 << (bits - 1)))])
        wrapped = ctx.op("Sub", [wide, ctx.constant(_i64(1 << bits))])
        return ctx.op("Cast", [ctx.op("Where", [high, wrapped, wide])], to=target)
    high = ctx.op("GreaterOrEqual", [x, ctx.constant(np.array(1 << 63, dtype=np.uint64))])
    top = ctx.op(
        "Mul",
        [
            ctx.op("Cast", [high], to=ir.DataType.UINT64),
            ctx.constant(np.array(1 << 63, dtype=np.uint64)),
        ],
    )
    low = ctx.op("Cast", [ctx.op("Sub", [x, top])], to=ir.DataType.INT64)
    offset = ctx.op("Where", [high, ctx.constant(_i64(_INT64_MIN)), ctx.constant(_i64(0))])
    return ctx.op("Add", [low, offset])


@register_downgrade("BitCast", 26, kind="rewrite")
def bitcast_26(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None]:
    """BitCast-26 is new: rewrite it where the reinterpretation is integer arithmetic.

    * Same type: the input itself.
    * Signed <-> unsigned integers of one width (2, 4, 8, 16, 32, 64 bits): two's
      complement reinterpretation is ``x mod 2**bits``, computed with exact integer
      arithmetic (in int64, or for 64 bits by moving the sign bit separately) and
      Casts of in-range values only, so every bit pattern maps exactly.
    * BOOL -> INT8/UINT8: a bool is stored as the byte 0 or 1, which Cast produces.

    Everything else is refused: no operator before opset 26 exposes or sets the bit
    pattern of a floating-point (or float8/float4/complex) value, since arithmetic can
    neither read nor produce a NaN's payload and sign; and a byte other than 0 or 1
    has no bool value to cast to.
    """
    x = node.inputs[0]
    assert x is not None
    source = ctx.require_dtype(x, "input")
    target = ir.DataType(int(ctx.attribute("to")))
    if source == target:
        return [x]
    if source in _SIGNED and _UNSIGNED.get(target) == _SIGNED[source]:
        return [_signed_to_unsigned(ctx, x, _SIGNED[source])]
    if source in _UNSIGNED and _SIGNED.get(target) == _UNSIGNED[source]:
        return [_unsigned_to_signed(ctx, x, _UNSIGNED[source])]
    if source == ir.DataType.BOOL and target in (ir.DataType.INT8, ir.DataType.UINT8):
        return [ctx.op("Cast", [x], to=target)]
    if target == ir.DataType.BOOL:
        ctx.refuse(
            f"BitCast from {source.name} to BOOL: a byte other than 0 or 1 is no valid "
            "bool before opset 26 (Cast maps it to true, changing the bits)"
        )
    ctx.refuse(
        f"BitCast from {source.name} to {target.name}: no operator before opset 26 reads "
        "or writes the bit pattern of a floating-point, complex or float8/float4 value "
        "(arithmetic cannot observe or produce a NaN's payload and sign)"
    )


def _cumprod_body(ctx: DowngradeContext, dtype: ir.DataType, exclusive: bool) -> ir.Graph:
    """Scan body: state <- state * x_t; emit the state after (or before) the product."""
    tensor = ir.TensorType(dtype)
    state_in = ir.Value(name=ctx.fresh_name("state_in"), type=tensor)
    x_t = ir.Value(name=ctx.fresh_name("x_t"), type=tensor)
    mul = ir.Node("", "Mul", [state_in, x_t], name=ctx.fresh_name("Mul"))
    state_out = mul.outputs[0]
    state_out.name = ctx.fresh_name("state_out")
    state_out.type = tensor
    emitted = state_in if exclusive else state_out
    copy = ir.Node("", "Identity", [emitted], name=ctx.fresh_name("Identity"))
    scan_out = copy.outputs[0]
    scan_out.name = ctx.fresh_name("scan_out")
    scan_out.type = tensor
    return ir.Graph(
        [state_in, x_t],
        [state_out, scan_out],
        nodes=[mul, copy],
        name=ctx.fresh_name("cumprod_body"),
    )


@register_downgrade("CumProd", 26, kind="rewrite")
def cumprod_26(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None]:
    """CumProd-26 is new: rewrite it as a Scan that multiplies along the axis in order.

    The Scan carries a running product, starting at 1, and multiplies it by each
    slice along ``axis`` in turn (backwards when ``reverse=1``), emitting the product
    after each step (or before it when ``exclusive=1``). This is the cumulative
    product's definition performed as the same sequence of multiplications in T:
    ``1 * x0`` equals ``x0`` for every value (NaN, infinities and -0 included), each
    further step is one Mul in T in the same order, and integer overflow behaves as
    Mul in T does. The Scan body holds only Mul and Identity, which are valid for
    every CumProd type at every opset from 18 on. The axis must be a constant.

    When the axis may be empty (ONNX Runtime's Scan rejects a zero-length scan axis),
    a factor 1 is padded where the scan ends and sliced off afterwards: it is
    multiplied in last, so no emitted product changes.

    For float16/bfloat16 the spec leaves the running product's precision open: this
    rounds every product to T, as the reference (numpy) does; ONNX Runtime's CPU
    kernel keeps a float32 accumulator and can differ in the last bits (or in an
    intermediate overflow) from three factors on.
    """
    x, axis_value = node.inputs[0], node.inputs[1]
    assert x is not None
    dtype = ctx.require_dtype(x, "input")
    axis_tensor = None
    if axis_value is not None and not axis_value.is_graph_input():  # an input can be fed
        axis_tensor = ir.convenience.get_const_tensor(axis_value)
    if axis_tensor is None:
        ctx.refuse("CumProd with a non-constant axis input: Scan needs the axis as an attribute")
    axis = int(np.asarray(axis_tensor.numpy()).reshape(-1)[0])
    exclusive = bool(ctx.attribute("exclusive", 0))
    reverse = int(bool(ctx.attribute("reverse", 0)))

    # The running product's shape: x's shape without the scanned axis.
    parts = []
    if axis != 0:
        parts.append(ctx.op("Shape", [x], start=0, end=axis))
    if axis != -1:
        parts.append(ctx.op("Shape", [x], start=axis + 1))
    shape = parts[0] if len(parts) == 1 else ctx.op("Concat", parts, axis=0)
    one = ctx.constant(np.array(1, dtype=dtype.numpy()))
    initial = ctx.op("Expand", [one, shape])
    length = static_dim(x, axis)
    scanned = x
    if length is None or length == 0:
        # ONNX Runtime's Scan fails on an empty scan axis: append one factor 1 where
        # the scan ends (the far end of its direction), then Slice it off again.
        pads = np.zeros(2, dtype=np.int64)
        pads[1 - reverse] = 1
        scanned = ctx.op("Pad", [x, ctx.constant(pads), one, ctx.constant(_i64(axis).reshape(1))])
    _, result = ctx.op_multi(
        "Scan",
        [initial, scanned],
        num_outputs=2,
        body=_cumprod_body(ctx, dtype, exclusive),
        num_scan_inputs=1,
        scan_input_axes=[axis],
        scan_input_directions=[reverse],
        scan_output_axes=[axis],
        scan_output_directions=[reverse],
    )
    if scanned is not x:
        result = ctx.op(
            "Slice",
            [
                result,
                ctx.constant(_i64(reverse).reshape(1)),
                ctx.op(
                    "Add",
                    [
                        ctx.op("Shape", [x], start=axis, end=axis + 1 if axis != -1 else None),
                        ctx.constant(_i64(reverse).reshape(1)),
                    ],
                ),
                ctx.constant(_i64(axis).reshape(1)),
            ],
        )
    return [result]
