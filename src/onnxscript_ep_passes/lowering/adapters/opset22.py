"""Undo what ai.onnx opset 22 changed (22 -> 21).

Opset 22 added bfloat16 to ~47 operators. Those type-only steps are derived from
``onnx.defs`` by the registry (a bfloat16 node is refused). The adapters here replace
that rule for the operators that only move, compare or round values: their bfloat16
node runs exactly in float32 between two Casts (bfloat16 -> float32 is exact, and every
result is one of the inputs, 0, 1 or an integer that bfloat16 holds, so the Cast back
is exact too). Arithmetic operators keep the derived refusal: computing them in float32
and rounding once is not what a bfloat16 computation gives.

Opset 22 also changed the pools' output size in ``ceil_mode``: a sliding window that would
start in the right padding is dropped (AveragePool, LpPool, MaxPool; ONNX's shape
inference computes the old size up to 21, the new one from 22; ORT 1.32 and onnx.reference
compute the new size at every opset). Where the new size is the floor-mode size, the node
is lowered with ``ceil_mode=0`` (the same windows); where no window is dropped it is kept;
otherwise (mixed axes, or an unknown spatial size where a window could start in the
padding) it is refused.
"""

from __future__ import annotations

__all__ = [
    "averagepool_22",
    "dropout_22",
    "eyelike_22",
    "globalmaxpool_22",
    "lppool_22",
    "maxpool_22",
    "maxunpool_22",
    "round_22",
    "thresholdedrelu_22",
]

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
import onnx_ir as ir

from onnxscript_ep_passes.lowering.adapters._common import FLOAT, static_dim
from onnxscript_ep_passes.lowering.context import DowngradeContext
from onnxscript_ep_passes.lowering.registry import register_downgrade

_BF16 = ir.DataType.BFLOAT16


def _through_float(
    node: ir.Node, ctx: DowngradeContext, cast_inputs: Sequence[int], **attributes: Any
) -> Sequence[ir.Value] | None:
    """Run ``node`` in float32 when its data input is bfloat16; else the derived rule.

    Inputs at ``cast_inputs`` are widened to float32; output 0 is narrowed back to
    bfloat16; other outputs (indices) are kept. ``attributes`` override the node's.
    """
    data = ctx.input(cast_inputs[0])
    if ctx.dtype_of(data) != _BF16:
        ctx.require_types_allowed_below()
        return None
    inputs: list[ir.Value | None] = list(node.inputs)
    for index in cast_inputs:
        value = inputs[index]
        if value is not None:
            inputs[index] = ctx.op("Cast", [value], to=FLOAT)
    attrs: dict[str, Any] = {a.name: a for a in node.attributes.values()}
    attrs.update(attributes)
    outputs = ctx.op_multi(
        node.op_type, inputs, num_outputs=len(node.outputs), domain=node.domain, **attrs
    )
    return [ctx.op("Cast", [outputs[0]], to=_BF16), *outputs[1:]]


def _ceil_mode_windows(node: ir.Node, ctx: DowngradeContext) -> None:
    """Make a ceil-mode pool mean at the older schema what it means at the 22 one.

    Per spatial axis, with L = size + pads and extent = dilation * (kernel - 1) + 1, the
    older schemas give ceil((L - extent) / stride) + 1 windows; opset 22 drops the last
    one when it starts at or after size + pad_begin. Sets ``ceil_mode=0`` when every axis
    needs the floor-mode size, keeps the node when none drops a window, else refuses.
    """
    if not ctx.attribute("ceil_mode", 0):
        return
    auto_pad = ctx.attribute("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return  # the output size is ceil(size / stride) at every opset
    kernel = list(ctx.attribute("kernel_shape", []))
    rank = len(kernel)
    strides = list(ctx.attribute("strides", [1] * rank))
    dilations = list(ctx.attribute("dilations", [1] * rank))
    pads = [0] * (2 * rank) if auto_pad == "VALID" else list(ctx.attribute("pads", [0] * 2 * rank))
    floor_ok = ceil_ok = True
    sizes: list[str] = []
    for axis in range(rank):
        extent = dilations[axis] * (kernel[axis] - 1) + 1
        begin, end, stride = pads[axis], pads[axis + rank], strides[axis]
        size = static_dim(ctx.input(0), 2 + axis)
        if size is None:
            if stride + end <= extent:
                floor_ok = False  # no window can start in the padding: ceil sizes agree
                continue
            ctx.refuse(
                f"ceil_mode=1 and spatial axis {axis} has no static size: a window may "
                f"start in the right padding, which {node.op_type}-22 drops and "
                f"{node.op_type}-{ctx.previous} keeps (a different output size)"
            )
        span = size + begin + end - extent
        if span < 0:
            return  # no window at all: invalid at every opset, left to the checker
        ceil_size = -(-span // stride) + 1
        floor_size = span // stride + 1
        new_size = ceil_size - 1 if (ceil_size - 1) * stride >= size + begin else ceil_size
        ceil_ok = ceil_ok and new_size == ceil_size
        floor_ok = floor_ok and new_size == floor_size
        sizes.append(f"axis {axis}: {new_size} (ceil {ceil_size}, floor {floor_size})")
    if not (ceil_ok or floor_ok):
        ctx.refuse(
            f"ceil_mode=1: {node.op_type}-22 drops windows that start in the right padding "
            f"and no ceil_mode of {node.op_type}-{ctx.previous} gives its window counts on "
            f"every spatial axis ({'; '.join(sizes)})"
        )
    if not ceil_ok:
        node.attributes["ceil_mode"] = ir.AttrInt64("ceil_mode", 0)


@register_downgrade("MaxPool", 22, kind="rewrite")
def maxpool_22(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """MaxPool-22 added bfloat16 and dropped ceil-mode windows starting in the padding.

    A bfloat16 node pools in float32 between exact Casts (a max is an input); the
    ceil-mode windows are matched as the module docstring says.
    """
    _ceil_mode_windows(node, ctx)
    return _through_float(node, ctx, [0])


@register_downgrade("AveragePool", 22, kind="attribute")
def averagepool_22(node: ir.Node, ctx: DowngradeContext) -> None:
    """AveragePool-22 added bfloat16 (refused) and dropped ceil-mode windows starting in the
    padding (matched with ``ceil_mode=0`` where that gives the same windows)."""
    _ceil_mode_windows(node, ctx)
    ctx.require_types_allowed_below()


@register_downgrade("LpPool", 22, kind="attribute")
def lppool_22(node: ir.Node, ctx: DowngradeContext) -> None:
    """LpPool-22 added bfloat16 (refused) and dropped ceil-mode windows starting in the
    padding (matched with ``ceil_mode=0`` where that gives the same windows)."""
    _ceil_mode_windows(node, ctx)
    ctx.require_types_allowed_below()


@register_downgrade("GlobalMaxPool", 22, kind="rewrite")
def globalmaxpool_22(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """GlobalMaxPool-22 added bfloat16: pool in float32 between exact Casts."""
    return _through_float(node, ctx, [0])


@register_downgrade("MaxUnpool", 22, kind="rewrite")
def maxunpool_22(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """MaxUnpool-22 added bfloat16: scatter in float32 between exact Casts (values and 0)."""
    return _through_float(node, ctx, [0])


@register_downgrade("Round", 22, kind="rewrite")
def round_22(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """Round-22 added bfloat16: round in float32 between exact Casts.

    Halves round to even in both; a bfloat16 of magnitude 2^7 or more is already an
    integer, and every smaller integer is a bfloat16, so the Cast back is exact.
    """
    return _through_float(node, ctx, [0])


@register_downgrade("ThresholdedRelu", 22, kind="rewrite")
def thresholdedrelu_22(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """ThresholdedRelu-22 added bfloat16: compare in float32 when alpha is a bfloat16.

    The result is X or 0, so only the comparison X > alpha matters. When alpha is
    exactly a bfloat16 every reading agrees (the function body compares with
    CastLike(alpha, X); kernels and the reference compare X with the float alpha), and
    ThresholdedRelu-10 in float32 selects the same elements. Otherwise those readings
    differ for X between alpha and its bfloat16 rounding, and the node is refused.
    """
    if ctx.dtype_of(ctx.input(0)) == _BF16:
        alpha = np.float32(ctx.attribute("alpha", 1.0))
        if np.float32(alpha.astype(ml_dtypes.bfloat16)) != alpha:
            ctx.refuse(
                f"alpha={float(alpha)!r} is not a bfloat16: the function body compares with "
                "alpha rounded to bfloat16, kernels with the float alpha"
            )
    return _through_float(node, ctx, [0])


@register_downgrade("EyeLike", 22, kind="rewrite")
def eyelike_22(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """EyeLike-22 added bfloat16: widen a bfloat16 input, build a bfloat16 output by Cast.

    The input only gives the shape, so widening it changes nothing; a bfloat16 output
    (``dtype`` or the input's type) is built in float32 and Cast: 0 and 1 are exact.
    """
    value = ctx.input(0)
    in_type = ctx.require_dtype(value, "input")
    dtype = ctx.attribute("dtype")
    out_type = ir.DataType(dtype) if dtype is not None else in_type
    if _BF16 not in (in_type, out_type):
        ctx.require_types_allowed_below()
        return None
    if in_type == _BF16:
        value = ctx.op("Cast", [value], to=FLOAT)
    k = ctx.attribute("k", 0)
    if out_type == _BF16:
        eye = ctx.op("EyeLike", [value], k=k, dtype=FLOAT)
        return [ctx.op("Cast", [eye], to=_BF16)]
    return [ctx.op("EyeLike", [value], k=k, dtype=out_type)]


@register_downgrade("Dropout", 22, kind="rewrite")
def dropout_22(node: ir.Node, ctx: DowngradeContext) -> None:
    """Dropout-22 added bfloat16 ratios and float8 data: widen a bfloat16 ratio.

    The ratio is a probability read as a number; widening it to float32 is exact, and
    bfloat16 data is already allowed by Dropout-13. float8 data are refused.
    """
    ratio = ctx.input(1)
    if ratio is not None and ctx.dtype_of(ratio) == _BF16:
        node.replace_input_with(1, ctx.op("Cast", [ratio], to=FLOAT))
    ctx.require_types_allowed_below()
