"""Undo what ai.onnx opset 19 changed (19 -> 18).

Type-only changes of this step (float8 for the shape family, string for Equal) are
derived from ``onnx.defs`` by the registry; the adapters here cover the rest.
"""

from __future__ import annotations

__all__ = [
    "averagepool_19",
    "cast_19",
    "castlike_19",
    "deformconv_19",
    "dequantizelinear_19",
    "pad_19",
    "quantizelinear_19",
    "resize_19",
]

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from onnxscript_ep_passes.lowering.adapters._common import (
    FLOAT8_TYPES,
    HALF_TYPES,
    constant_array,
    rank_of,
)
from onnxscript_ep_passes.lowering.context import DowngradeContext
from onnxscript_ep_passes.lowering.registry import register_downgrade


def _inputs(*values: ir.Value | None) -> list[ir.Value | None]:
    """The inputs without trailing missing optional ones."""
    kept = list(values)
    while kept and kept[-1] is None:
        kept.pop()
    return kept


def _drop_saturate(node: ir.Node, ctx: DowngradeContext) -> None:
    ctx.require_types_allowed_below()
    node.attributes.pop("saturate", None)


@register_downgrade("Cast", 19, kind="attribute", lend_shapes=False)
def cast_19(node: ir.Node, ctx: DowngradeContext) -> None:
    """Cast-19 added float8 types and ``saturate``: drop ``saturate``, refuse float8.

    ``saturate`` only changes casts *to* a float8 type; every other cast ignores it, so
    dropping it keeps the meaning. A float8 cast has no equivalent at opset 18.
    """
    _drop_saturate(node, ctx)


@register_downgrade("CastLike", 19, kind="attribute", lend_shapes=False)
def castlike_19(node: ir.Node, ctx: DowngradeContext) -> None:
    """CastLike-19 added float8 types and ``saturate``: as for Cast-19."""
    _drop_saturate(node, ctx)


@register_downgrade("AveragePool", 19, kind="attribute")
def averagepool_19(node: ir.Node, ctx: DowngradeContext) -> None:
    """AveragePool-19 added ``dilations``: drop it when every dilation is 1, else refuse.

    Dilations of 1 are the default and the only behaviour of AveragePool-11. No pooling
    operator before opset 19 averages a dilated window, and summing the window's
    elements with Slice/Add would change the floating-point summation the kernel does.
    """
    dilations = ctx.attribute("dilations")
    if dilations is not None and any(d != 1 for d in dilations):
        ctx.refuse(
            f"attribute dilations={list(dilations)}: no AveragePool before opset 19 "
            "supports a dilated window"
        )
    node.attributes.pop("dilations", None)


@register_downgrade("DeformConv", 19, kind="refusal")
def deformconv_19(node: ir.Node, ctx: DowngradeContext) -> None:
    """DeformConv-19 is new and has no function body: refuse.

    No operator before opset 19 samples the input at learned offsets; rebuilding it from
    GridSample and Conv would reorder the floating-point sums of the convolution.
    """
    ctx.refuse(
        "DeformConv does not exist before opset 19 and has no exact decomposition "
        "(sampling at learned offsets then convolving reorders the floating-point sums)"
    )


@register_downgrade("DequantizeLinear", 19, kind="rewrite")
def dequantizelinear_19(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """DequantizeLinear-19 added float8 inputs and float16/bfloat16 scales: rewrite the scales.

    A float16/bfloat16 ``x_scale`` with an 8-bit ``x`` becomes Cast(scale, float),
    DequantizeLinear-13, Cast(result, scale type). This is exact: widening the scale is
    exact, and ``(x - zero_point) * scale`` (|x - zero_point| <= 255, 8 bits, times an
    11-bit significand) is exact in float32, so the final Cast is the only rounding, as
    in the half-precision op. float8 inputs, and int32 inputs with a half-precision
    scale, are refused.
    """
    x, scale, zero_point = ctx.input(0), ctx.input(1), ctx.input(2)
    x_type = ctx.require_dtype(x, "input")
    if x_type in FLOAT8_TYPES:
        ctx.refuse(f"input '{x.name if x else ''}' is {x_type.name}: float8 needs opset 19")
    scale_type = ctx.require_dtype(scale, "x_scale")
    if scale_type == ir.DataType.FLOAT:
        return None
    if scale_type not in HALF_TYPES or x_type not in (ir.DataType.INT8, ir.DataType.UINT8):
        ctx.refuse(
            f"x_scale is {scale_type.name} with input {x_type.name}: DequantizeLinear-13 "
            "takes float scales only, and only 8-bit inputs dequantize exactly through float"
        )
    scale_f = ctx.op("Cast", [scale], to=ir.DataType.FLOAT)
    axis = ctx.attribute("axis", 1)
    y_f = ctx.op("DequantizeLinear", _inputs(x, scale_f, zero_point), axis=axis)
    return [ctx.op("Cast", [y_f], to=scale_type)]


@register_downgrade("QuantizeLinear", 19, kind="rewrite")
def quantizelinear_19(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """QuantizeLinear-19 added float8 outputs, half-precision inputs and ``saturate``.

    ``saturate`` only applies to float8 outputs, which are refused, so it is dropped. A
    float16/bfloat16 ``x`` and ``y_scale`` are widened to float (exact) for
    QuantizeLinear-13. The quotient q of two numbers with at most 11 significant bits,
    computed in float32, rounds to the same integer as the exact quotient: for
    |q| <= 2^10 a q that is not a tie lies at least 2^-13 from every half-integer while
    float32 errs by at most 2^-14, and a tie is exact in float32; a larger |q| saturates
    the 8-bit output either way (half-precision overflow included).
    """
    x, scale, zero_point = ctx.input(0), ctx.input(1), ctx.input(2)
    out_type = ctx.dtype_of(zero_point) if zero_point is not None else ir.DataType.UINT8
    if out_type is None:
        out_type = ctx.require_dtype(node.outputs[0], "output")
    if out_type in FLOAT8_TYPES:
        ctx.refuse(f"output is {out_type.name}: float8 quantization needs opset 19")
    node.attributes.pop("saturate", None)
    x_type = ctx.require_dtype(x, "input")
    if x_type not in HALF_TYPES:
        scale_type = ctx.require_dtype(scale, "y_scale")
        if scale_type != ir.DataType.FLOAT:
            ctx.refuse(f"y_scale is {scale_type.name}: QuantizeLinear-13 takes float scales only")
        return None
    x_f = ctx.op("Cast", [x], to=ir.DataType.FLOAT)
    scale_f = ctx.op("Cast", [scale], to=ir.DataType.FLOAT)
    axis = ctx.attribute("axis", 1)
    return [ctx.op("QuantizeLinear", _inputs(x_f, scale_f, zero_point), axis=axis)]


def _wrap_pad(ctx: DowngradeContext, data: ir.Value) -> ir.Value:
    """Pad 'wrap' as one Gather per padded axis."""
    pads_value, axes_value = ctx.input(1), ctx.input(3)
    pads = constant_array(pads_value)
    if axes_value is not None:
        axes_array = constant_array(axes_value)
        if axes_array is None:
            ctx.refuse("mode='wrap' with a non-constant 'axes' input")
        axes = [int(a) for a in axes_array.reshape(-1)]
    else:
        rank = len(pads) // 2 if pads is not None else rank_of(data)
        if rank is None:
            ctx.refuse("mode='wrap' with non-constant pads and an input of unknown rank")
        axes = list(range(rank))
    rank = rank_of(data)
    if any(a < 0 for a in axes):
        if rank is None:
            ctx.refuse("mode='wrap' with negative axes and an input of unknown rank")
        axes = [a + rank if a < 0 else a for a in axes]
    n = len(axes)
    zero = ctx.constant(np.array(0, dtype=np.int64))
    one = ctx.constant(np.array(1, dtype=np.int64))
    result = data
    for i, axis in enumerate(axes):
        length = ctx.op("Squeeze", [ctx.op("Shape", [data], start=axis, end=axis + 1)])
        if pads is not None:
            begin, end = int(pads[i]), int(pads[i + n])
            if begin == 0 and end == 0:
                continue
            crop_begin = ctx.constant(np.array(max(-begin, 0), dtype=np.int64))
            crop = ctx.constant(np.array(max(-begin, 0) + max(-end, 0), dtype=np.int64))
            start = ctx.constant(np.array(-max(begin, 0), dtype=np.int64))
            pad_end = ctx.constant(np.array(max(end, 0), dtype=np.int64))
        else:
            assert pads_value is not None
            begin_v = ctx.op("Gather", [pads_value, ctx.constant(np.array(i, dtype=np.int64))])
            end_v = ctx.op("Gather", [pads_value, ctx.constant(np.array(i + n, dtype=np.int64))])
            crop_begin = ctx.op("Max", [ctx.op("Neg", [begin_v]), zero])
            crop_end = ctx.op("Max", [ctx.op("Neg", [end_v]), zero])
            crop = ctx.op("Add", [crop_begin, crop_end])
            start = ctx.op("Neg", [ctx.op("Max", [begin_v, zero])])
            pad_end = ctx.op("Max", [end_v, zero])
        kept = ctx.op("Sub", [length, crop])  # the length left after negative pads crop
        positions = ctx.op("Range", [start, ctx.op("Add", [kept, pad_end]), one])
        # Max(kept, 1): an empty axis with nonzero pads then fails in Gather, not in Mod.
        wrapped = ctx.op("Mod", [positions, ctx.op("Max", [kept, one])])
        indices = ctx.op("Add", [wrapped, crop_begin])
        result = ctx.op("Gather", [result, indices], axis=axis)
    return result


@register_downgrade("Pad", 19, kind="rewrite")
def pad_19(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """Pad-19 added ``mode='wrap'``: other modes are unchanged; 'wrap' becomes Gathers.

    Negative pads crop first (as ONNX Runtime does); wrap padding of the kept length K
    by (b, e) >= 0 is then Gather with indices ``c + (i mod K)`` for i in [-b, K + e),
    c the cropped start. Pure data movement, exact for every input, also for pads larger
    than K (the torus wraps again). Pads may be a runtime input; the axes must be
    constant or absent.
    """
    mode = ctx.attribute("mode", "constant")
    if mode != "wrap":
        return None
    data = ctx.input(0)
    assert data is not None
    return [_wrap_pad(ctx, data)]


def _resize_axes(ctx: DowngradeContext, rank: int) -> list[int]:
    axes = ctx.attribute("axes")
    if axes is None:
        return list(range(rank))
    return [a + rank if a < 0 else a for a in axes]


@register_downgrade("Resize", 19, kind="attribute")
def resize_19(node: ir.Node, ctx: DowngradeContext) -> None:
    """Resize-19 added coordinate_transformation_mode 'half_pixel_symmetric'.

    Other modes are unchanged. 'half_pixel_symmetric' shifts 'half_pixel' by
    ``center * (1 - output_width_int / output_width)``, which is exactly 0 when every
    resized axis's output width ``length * scale`` is an integer (checked in real and in
    float32 arithmetic from constant scales or sizes and a static input shape); the
    node then becomes 'half_pixel'. Otherwise the shift is a fraction of a pixel that no
    earlier mode expresses, and the node is refused.
    """
    mode = ctx.attribute("coordinate_transformation_mode", "half_pixel")
    if mode != "half_pixel_symmetric":
        return None
    x = ctx.input(0)
    shape = x.shape if x is not None else None
    dims = None if shape is None else [d if isinstance(d, int) else None for d in shape]
    if dims is None or any(d is None for d in dims):
        ctx.refuse(
            "coordinate_transformation_mode='half_pixel_symmetric' on an input of "
            "unknown static shape"
        )
    axes = _resize_axes(ctx, len(dims))
    scales, sizes = constant_array(ctx.input(2)), constant_array(ctx.input(3))
    widths: list[tuple[int, np.float32]] = []  # (length, scale in float32)
    if ctx.input(3) is not None:
        if sizes is None:
            ctx.refuse("coordinate_transformation_mode='half_pixel_symmetric' with runtime sizes")
        policy = ctx.attribute("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            ctx.refuse(
                "coordinate_transformation_mode='half_pixel_symmetric' with "
                f"keep_aspect_ratio_policy='{policy}'"
            )
        for axis, size in zip(axes, sizes.reshape(-1)):
            length = dims[axis]
            assert length is not None
            if length == 0:
                continue
            widths.append((length, np.float32(size) / np.float32(length)))
    elif scales is not None and scales.size:
        for axis, scale in zip(axes, scales.reshape(-1)):
            length = dims[axis]
            assert length is not None
            widths.append((length, np.float32(scale)))
    else:
        ctx.refuse("coordinate_transformation_mode='half_pixel_symmetric' with runtime scales")
    for length, scale in widths:
        exact = float(scale) * length  # exact in float64: 24 bits times < 2^29
        rounded = np.float32(scale) * np.float32(length)
        if not (float(exact).is_integer() and float(rounded) == exact):
            ctx.refuse(
                "coordinate_transformation_mode='half_pixel_symmetric' with a fractional "
                f"output width {exact!r} (input length {length}): its sub-pixel shift has "
                "no equivalent before opset 19"
            )
    node.attributes["coordinate_transformation_mode"] = ir.AttrString(
        "coordinate_transformation_mode", "half_pixel"
    )
