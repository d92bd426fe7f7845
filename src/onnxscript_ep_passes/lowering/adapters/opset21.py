"""Undo what ai.onnx opset 21 changed (21 -> 20).

Type-only changes of this step (int4/uint4 and float8 for the shape/cast family) are
derived from ``onnx.defs`` by the registry; the adapters here cover the rest.
"""

from __future__ import annotations

__all__ = [
    "dequantizelinear_21",
    "groupnormalization_21",
    "qlinearmatmul_21",
    "quantizelinear_21",
]

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from onnxscript_ep_passes.lowering.adapters._common import (
    FLOAT,
    FLOAT8_TYPES,
    HALF_TYPES,
    quantized_type,
)
from onnxscript_ep_passes.lowering.context import DowngradeContext
from onnxscript_ep_passes.lowering.registry import register_downgrade

# Integer types whose differences (x - zero_point) are exact in float32.
_SMALL_INTS = (ir.DataType.INT8, ir.DataType.UINT8, ir.DataType.INT16, ir.DataType.UINT16)


def _spread(
    ctx: DowngradeContext, param: ir.Value, x: ir.Value, axis: int, block_size: int
) -> ir.Value:
    """``param`` (a scale or zero point) made to broadcast against ``x`` along ``axis``.

    Blocked: repeat each entry ``block_size`` times along ``axis`` (Gather with indices
    ``i // block_size``). Otherwise (a scalar or a 1-D tensor): reshape to
    ``[-1, 1, ..., 1]`` with one 1 per axis after ``axis``; a scalar then broadcasts as
    a scalar. Both work for an input of unknown rank and a negative axis.
    """
    zero = ctx.constant(np.array(0, np.int64))
    if block_size > 0:
        length = ctx.op("Gather", [ctx.op("Shape", [x], start=axis), zero])
        positions = ctx.op("Range", [zero, length, ctx.constant(np.array(1, np.int64))])
        blocks = ctx.op("Div", [positions, ctx.constant(np.array(block_size, np.int64))])
        return ctx.op("Gather", [param, blocks], axis=axis)
    if axis < 0:
        trailing = ctx.constant(np.ones(-axis - 1, np.int64))
    else:
        after = ctx.op("Shape", [ctx.op("Shape", [x], start=axis + 1)])
        trailing = ctx.op("ConstantOfShape", [after], value=ir.tensor(np.array([1], np.int64)))
    shape = ctx.op("Concat", [ctx.constant(np.array([-1], np.int64)), trailing], axis=0)
    return ctx.op("Reshape", [param, shape])


def _dequantize(ctx: DowngradeContext, block_size: int) -> ir.Value:
    """``(float(x) - float(zero_point)) * float(scale)``, cast to the scale's type."""
    x, scale, zero_point = ctx.input(0), ctx.input(1), ctx.input(2)
    assert x is not None and scale is not None
    x_type = ctx.require_dtype(x, "input")
    scale_type = ctx.require_dtype(scale, "x_scale")
    if x_type in FLOAT8_TYPES:
        zero_point = None  # float8 zero points are zero ("usually not used")
    elif x_type == ir.DataType.INT32 and zero_point is not None:
        ctx.refuse("INT32 input with a zero point: x - zero_point is not exact in float32")
    elif x_type not in (*_SMALL_INTS, ir.DataType.INT32):
        ctx.refuse(f"input is {x_type.name}, which no earlier operator converts exactly")
    axis = int(ctx.attribute("axis", 1))
    value = ctx.op("Cast", [x], to=FLOAT)
    if zero_point is not None:
        zero = ctx.op("Cast", [_spread(ctx, zero_point, x, axis, block_size)], to=FLOAT)
        value = ctx.op("Sub", [value, zero])
    factor = _spread(ctx, scale, x, axis, block_size)
    if scale_type != FLOAT:
        factor = ctx.op("Cast", [factor], to=FLOAT)
    value = ctx.op("Mul", [value, factor])
    return value if scale_type == FLOAT else ctx.op("Cast", [value], to=scale_type)


@register_downgrade("DequantizeLinear", 21, kind="rewrite")
def dequantizelinear_21(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """DequantizeLinear-21 added ``block_size`` and int4/uint4/int16/uint16 inputs.

    Unblocked 8-bit/32-bit/float8 nodes are unchanged. Blocked nodes and 16-bit inputs
    become ``(Cast(x) - Cast(zero_point)) * scale`` in float32, the scale and zero point
    repeated along ``axis`` by Gather (blocked) or reshaped (per-axis), then Cast to the
    scale's type. Exact: the difference of two integers of at most 16 bits is exact in
    float32, so the product is rounded once, in float32, as DequantizeLinear does it
    (``(x - zero_point) * scale`` computed in float32, then converted to the scale's
    type). int4/uint4 inputs (no earlier Cast reads them) are refused.
    """
    block_size = int(ctx.attribute("block_size", 0))
    x_type = ctx.require_dtype(ctx.input(0), "input")
    if block_size == 0 and x_type not in (ir.DataType.INT16, ir.DataType.UINT16):
        ctx.require_types_allowed_below()
        node.attributes.pop("block_size", None)
        return None
    return [_dequantize(ctx, block_size)]


def _quantize_blocked(ctx: DowngradeContext, block_size: int, out_type: ir.DataType) -> ir.Value:
    x, scale, zero_point = ctx.input(0), ctx.input(1), ctx.input(2)
    assert x is not None and scale is not None
    x_type = ctx.require_dtype(x, "input")
    if x_type not in (FLOAT, *HALF_TYPES):
        ctx.refuse(f"blocked quantization of a {x_type.name} input")
    if out_type not in (ir.DataType.INT8, ir.DataType.UINT8):
        ctx.refuse(f"blocked quantization to {out_type.name} (only 8-bit integers are rebuilt)")
    axis = int(ctx.attribute("axis", 1))
    x_f = x if x_type == FLOAT else ctx.op("Cast", [x], to=FLOAT)
    scale_f = _spread(ctx, scale, x, axis, block_size)
    if x_type != FLOAT:
        scale_f = ctx.op("Cast", [scale_f], to=FLOAT)
    value = ctx.op("Round", [ctx.op("Div", [x_f, scale_f])])
    if zero_point is not None:
        zero = ctx.op("Cast", [_spread(ctx, zero_point, x, axis, block_size)], to=FLOAT)
        value = ctx.op("Add", [value, zero])
    unit = ctx.constant(np.array(1.0, np.float32))
    no_shift = ctx.constant(np.array(0, out_type.numpy()))
    return ctx.op("QuantizeLinear", [value, unit, no_shift])


@register_downgrade("QuantizeLinear", 21, kind="rewrite")
def quantizelinear_21(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """QuantizeLinear-21 added ``block_size``, ``output_dtype`` and 4/16-bit outputs.

    ``output_dtype`` is dropped when a zero point already gives that type (or it is the
    default uint8), else a zero zero point of that type is added. A blocked node with a
    float/half input and an 8-bit output becomes ``Round(x / scale) + zero_point``
    (scale and zero point repeated along ``axis`` by Gather, in float32) then
    QuantizeLinear with scale 1 and zero point 0, which only saturates and converts.
    Exact: Round rounds halves to even as QuantizeLinear does; adding an 8-bit zero
    point to an integer below 2^24 is exact and larger ones saturate alike; a half
    input's quotient computed in float32 rounds like the exact quotient (see
    QuantizeLinear-19). 4-bit and 16-bit outputs are refused (derived type rule).
    """
    x, scale, zero_point = ctx.input(0), ctx.input(1), ctx.input(2)
    out_type = quantized_type(ctx, zero_point)
    block_size = int(ctx.attribute("block_size", 0))
    if block_size > 0:
        return [_quantize_blocked(ctx, block_size, out_type)]
    ctx.require_types_allowed_below()
    node.attributes.pop("block_size", None)
    node.attributes.pop("output_dtype", None)
    if zero_point is None and out_type != ir.DataType.UINT8:
        assert scale is not None
        zeros = ctx.op("ConstantOfShape", [ctx.op("Shape", [scale])])
        node.resize_inputs(3)
        node.replace_input_with(2, ctx.op("Cast", [zeros], to=out_type))
    del x
    return None


@register_downgrade("GroupNormalization", 21, kind="expansion")
def groupnormalization_21(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None]:
    """GroupNormalization-21 takes per-channel scale/bias and ``stash_type``: expand it.

    GroupNormalization-18 scales and shifts per *group* and normalizes in the input's
    type, so it is no equivalent; the node is expanded through ONNX's function body for
    opset 21 (normalize in the stash type, then scale and shift per channel).
    """
    return ctx.expand_function()


@register_downgrade("QLinearMatMul", 21, kind="rewrite")
def qlinearmatmul_21(node: ir.Node, ctx: DowngradeContext) -> None:
    """QLinearMatMul-21 added float8 operands and float16/bfloat16 scales.

    Half-precision scales are widened to float32 (exact) for QLinearMatMul-10, whose
    result is defined by the scale values, not their storage type. float8 operands are
    refused.
    """
    for index in (1, 4, 6):
        scale = ctx.input(index)
        if scale is not None and ctx.require_dtype(scale, "scale") in HALF_TYPES:
            node.replace_input_with(index, ctx.op("Cast", [scale], to=FLOAT))
    ctx.require_types_allowed_below()
