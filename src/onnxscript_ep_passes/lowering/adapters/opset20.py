"""Undo what ai.onnx opset 20 changed (20 -> 19).

Type-only changes of this step (ConstantOfShape, IsInf, IsNaN, ReduceMax/Min bool) are
derived from ``onnx.defs`` by the registry; the adapters here cover the rest.
"""

from __future__ import annotations

__all__ = [
    "affinegrid_20",
    "constantofshape_20",
    "dft_20",
    "gelu_20",
    "gridsample_20",
    "imagedecoder_20",
    "isinf_20",
    "isnan_20",
    "reducemax_20",
    "reducemin_20",
    "regexfullmatch_20",
    "stringconcat_20",
    "stringsplit_20",
]

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxscript_ep_passes.lowering.adapters._common import (
    FLOAT,
    FLOAT8_TYPES,
    constant_array,
    rank_of,
)
from onnxscript_ep_passes.lowering.context import DowngradeContext
from onnxscript_ep_passes.lowering.registry import register_downgrade


@register_downgrade("Gelu", 20, kind="expansion")
def gelu_20(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None]:
    """Gelu-20 is new: expand it through its ONNX function body (erf or tanh form)."""
    return ctx.expand_function()


def _grid_positions(
    ctx: DowngradeContext, size: ir.Value, index: int, theta: ir.Value, align_corners: bool
) -> tuple[ir.Value, ir.Value]:
    """The normalized positions along spatial axis ``size[index]``, and that length."""
    length = ctx.op("Gather", [size, ctx.constant(np.array(index, dtype=np.int64))])
    steps = ctx.op(
        "Range",
        [ctx.constant(np.array(0, np.int64)), length, ctx.constant(np.array(1, np.int64))],
    )
    steps_f = ctx.op("CastLike", [steps, theta])
    length_f = ctx.op("CastLike", [length, theta])
    one = ctx.op("CastLike", [ctx.constant(np.array(1.0, np.float32)), theta])
    two = ctx.op("CastLike", [ctx.constant(np.array(2.0, np.float32)), theta])
    minus_one = ctx.op("Neg", [one])
    if align_corners:
        step = ctx.op("Div", [two, ctx.op("Sub", [length_f, one])])
        start = minus_one
    else:
        step = ctx.op("Div", [two, length_f])
        start = ctx.op("Add", [minus_one, ctx.op("Div", [step, two])])
    positions = ctx.op("Add", [start, ctx.op("Mul", [steps_f, step])])
    return positions, ctx.op("Unsqueeze", [length, ctx.constant(np.array([0], np.int64))])


@register_downgrade("AffineGrid", 20, kind="rewrite")
def affinegrid_20(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value]:
    """AffineGrid-20 is new: rebuild it from Range, MatMul and shape ops.

    The positions along each spatial axis of length S are ``start + i * step`` with
    ``step = 2 / S, start = -1 + step / 2`` (``align_corners=0``) or ``step = 2 / (S - 1),
    start = -1`` (``align_corners=1``), as in ONNX's function body; the grid is
    ``[x, y(, z), 1] @ theta^T``, the matrix product the operator defines. (ONNX's own
    body cannot be used: it gives Range 1-D inputs, which ONNX Runtime rejects, and its
    Squeeze fails for a batch of 1.) With ``align_corners=1`` a spatial size of 1 has
    no defined spacing (the body gives NaN, ONNX Runtime 1, PyTorch 0), so the sizes
    must then be constant and above 1. The static shape of ``size`` or ``theta`` tells
    2-D from 3-D.
    """
    theta, size = ctx.input(0), ctx.input(1)
    assert theta is not None and size is not None
    align_corners = bool(ctx.attribute("align_corners", 0))
    if size.shape is not None and isinstance(size.shape[0], int):
        spatial = size.shape[0] - 2
    elif theta.shape is not None and isinstance(theta.shape[1], int):
        spatial = theta.shape[1]
    else:
        ctx.refuse("neither 'size' nor 'theta' has a static shape telling 2-D from 3-D")
    if align_corners:
        sizes = constant_array(size)
        if sizes is None or any(int(s) <= 1 for s in sizes.reshape(-1)[2:]):
            ctx.refuse(
                "align_corners=1 with a spatial size that is 1 or not constant: the grid "
                "spacing of a size-1 axis is undefined and implementations disagree"
            )
    grids: list[ir.Value] = []
    lengths: list[ir.Value] = []
    for index in range(2, 2 + spatial):
        positions, length = _grid_positions(ctx, size, index, theta, align_corners)
        grids.append(positions)
        lengths.append(length)
    spatial_shape = ctx.op("Concat", lengths, axis=0)
    columns: list[ir.Value] = []
    for k in range(spatial - 1, -1, -1):  # x first: the last spatial axis
        shape = [1] * spatial
        shape[k] = -1
        line = ctx.op("Reshape", [grids[k], ctx.constant(np.array(shape, np.int64))])
        columns.append(ctx.op("Expand", [line, spatial_shape]))
    one = ctx.op("CastLike", [ctx.constant(np.array(1.0, np.float32)), theta])
    columns.append(ctx.op("Expand", [one, spatial_shape]))
    last = ctx.constant(np.array([-1], np.int64))
    base = ctx.op("Concat", [ctx.op("Unsqueeze", [c, last]) for c in columns], axis=-1)
    flat = ctx.op("Reshape", [base, ctx.constant(np.array([-1, spatial + 1], np.int64))])
    grid = ctx.op("MatMul", [flat, ctx.op("Transpose", [theta], perm=[0, 2, 1])])
    batch = ctx.op("Slice", [size, *(ctx.constant(np.array([v], np.int64)) for v in (0, 1))])
    out_shape = ctx.op(
        "Concat",
        [batch, spatial_shape, ctx.constant(np.array([spatial], np.int64))],
        axis=0,
    )
    return [ctx.op("Reshape", [grid, out_shape])]


@register_downgrade("DFT", 20, kind="rewrite")
def dft_20(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value]:
    """DFT-20 moved ``axis`` from an attribute (default 1) to an input (default -2).

    A constant (or absent) ``axis`` input becomes the attribute of DFT-17, normalized to
    a non-negative axis when the input's rank is known; ``inverse``, ``onesided`` and
    ``dft_length`` mean the same in both. A runtime axis is refused.
    """
    signal, length, axis_value = ctx.input(0), ctx.input(1), ctx.input(2)
    if axis_value is None:
        axis = -2
    else:
        data = constant_array(axis_value)
        if data is None or data.size != 1:
            ctx.refuse(f"input 'axis' ('{axis_value.name}') is not a constant scalar")
        axis = int(data.reshape(-1)[0])
    rank = rank_of(signal)
    if axis < 0 and rank is not None:
        axis += rank
    inputs: list[ir.Value | None] = [signal] if length is None else [signal, length]
    return [
        ctx.op(
            "DFT",
            inputs,
            axis=axis,
            inverse=ctx.attribute("inverse", 0),
            onesided=ctx.attribute("onesided", 0),
        )
    ]


_GRID_SAMPLE_MODES = {"linear": "bilinear", "cubic": "bicubic", "nearest": "nearest"}


@register_downgrade("GridSample", 20, kind="attribute")
def gridsample_20(node: ir.Node, ctx: DowngradeContext) -> None:
    """GridSample-20 renamed modes ('linear', 'cubic') and allowed N-D inputs.

    For a 4-D input the modes map to GridSample-16's 'bilinear' / 'bicubic' ('nearest'
    is unchanged, rounding halves to even in both); ``align_corners`` and
    ``padding_mode`` mean the same. Other ranks have no equivalent and are refused.
    """
    rank = rank_of(ctx.input(0))
    if rank != 4:
        what = "unknown" if rank is None else str(rank)
        ctx.refuse(f"input X has rank {what}: GridSample before opset 20 is 2-D (rank 4) only")
    mode = ctx.attribute("mode", "linear")
    node.attributes["mode"] = ir.AttrString("mode", _GRID_SAMPLE_MODES[mode])


def _refuse_new(ctx: DowngradeContext, why: str) -> None:
    ctx.refuse(f"{ctx.node.op_type} does not exist before opset 20 and {why}")


@register_downgrade("ImageDecoder", 20, kind="refusal")
def imagedecoder_20(node: ir.Node, ctx: DowngradeContext) -> None:
    """ImageDecoder-20 is new and has no function body: refuse (no op decodes images)."""
    _refuse_new(ctx, "no earlier operator decodes an image")


@register_downgrade("RegexFullMatch", 20, kind="refusal")
def regexfullmatch_20(node: ir.Node, ctx: DowngradeContext) -> None:
    """RegexFullMatch-20 is new and has no function body: refuse (no op matches regexes)."""
    _refuse_new(ctx, "no earlier operator matches a regular expression")


@register_downgrade("StringConcat", 20, kind="refusal")
def stringconcat_20(node: ir.Node, ctx: DowngradeContext) -> None:
    """StringConcat-20 is new and has no function body: refuse.

    Before opset 20 the only string operators are Cast, comparisons, StringNormalizer
    and data movement; none builds a new string from two.
    """
    _refuse_new(ctx, "no earlier operator concatenates strings")


@register_downgrade("StringSplit", 20, kind="refusal")
def stringsplit_20(node: ir.Node, ctx: DowngradeContext) -> None:
    """StringSplit-20 is new and has no function body: refuse (no op splits strings)."""
    _refuse_new(ctx, "no earlier operator splits a string")


def _require_float8_readable(ctx: DowngradeContext, dtype: ir.DataType | None) -> None:
    if dtype in FLOAT8_TYPES and ctx.target_opset < 19:
        assert dtype is not None
        ctx.refuse(f"a {dtype.name} tensor cannot be read or built below opset 19")


def _test_in_float(
    node: ir.Node, ctx: DowngradeContext, widen: tuple[ir.DataType, ...]
) -> Sequence[ir.Value] | None:
    """IsInf/IsNaN on float32 when the input has a type in ``widen``; else the type rule."""
    value = ctx.input(0)
    dtype = ctx.dtype_of(value)
    if dtype not in widen:
        ctx.require_types_allowed_below()
        return None
    _require_float8_readable(ctx, dtype)
    attrs: dict[str, Any] = {a.name: a for a in node.attributes.values()}
    return [ctx.op(node.op_type, [ctx.op("Cast", [value], to=FLOAT)], **attrs)]


@register_downgrade("IsInf", 20, kind="rewrite")
def isinf_20(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """IsInf-20 added float16, bfloat16 and float8 inputs: test them widened to float32.

    Widening to float32 is exact and keeps infinities, NaNs and finite values apart
    (float8e4m3fn and the fnuz types have no infinity, and stay finite or NaN).
    """
    return _test_in_float(node, ctx, (ir.DataType.FLOAT16, ir.DataType.BFLOAT16, *FLOAT8_TYPES))


@register_downgrade("IsNaN", 20, kind="rewrite")
def isnan_20(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """IsNaN-20 added float8 inputs: test them widened to float32 (exact, NaN stays NaN)."""
    return _test_in_float(node, ctx, FLOAT8_TYPES)


def _reduce_bool(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    data = ctx.input(0)
    if ctx.dtype_of(data) != ir.DataType.BOOL:
        ctx.require_types_allowed_below()
        return None
    inputs: list[ir.Value | None] = [ctx.op("Cast", [data], to=ir.DataType.UINT8)]
    inputs.extend(node.inputs[1:])
    attrs: dict[str, Any] = {a.name: a for a in node.attributes.values()}
    reduced = ctx.op(node.op_type, inputs, **attrs)
    return [ctx.op("Cast", [reduced], to=ir.DataType.BOOL)]


@register_downgrade("ReduceMax", 20, kind="rewrite")
def reducemax_20(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """ReduceMax-20 added bool: reduce it as uint8 0/1 and Cast back.

    With False < True the maximum of booleans is the maximum of their 0/1 values; an
    empty reduction gives uint8's minimum 0, i.e. False, bool's minimum.
    """
    return _reduce_bool(node, ctx)


@register_downgrade("ReduceMin", 20, kind="rewrite")
def reducemin_20(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """ReduceMin-20 added bool: reduce it as uint8 0/1 and Cast back.

    The minimum of booleans is the minimum of their 0/1 values; an empty reduction gives
    uint8's maximum 255, which casts to True, bool's maximum.
    """
    return _reduce_bool(node, ctx)


@register_downgrade("ConstantOfShape", 20, kind="rewrite")
def constantofshape_20(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """ConstantOfShape-20 added bfloat16 and float8 values: fill with float32, then Cast.

    The fill value is a number of the narrow type, so it is exact in float32 and the
    Cast back returns it unchanged (NaN stays NaN).
    """
    attr = node.attributes.get("value")
    tensor = None if attr is None else attr.as_tensor()
    if tensor is None or tensor.dtype not in (ir.DataType.BFLOAT16, *FLOAT8_TYPES):
        ctx.require_types_allowed_below()
        return None
    _require_float8_readable(ctx, tensor.dtype)
    wide = np.asarray(tensor.numpy(), dtype=np.float32).reshape(1)
    filled = ctx.op("ConstantOfShape", [ctx.input(0)], value=ir.tensor(wide))
    return [ctx.op("Cast", [filled], to=tensor.dtype)]
