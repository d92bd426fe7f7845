"""Undo what ai.onnx opset 23 changed (23 -> 22).

Type-only changes of this step (float4e2m1 for the shape/cast family) are derived from
``onnx.defs`` by the registry; the adapters here cover the rest.
"""

from __future__ import annotations

__all__ = [
    "attention_23",
    "dequantizelinear_23",
    "quantizelinear_23",
    "rmsnormalization_23",
    "rotaryembedding_23",
]

from collections.abc import Sequence

import onnx_ir as ir

from onnxscript_ep_passes.lowering.adapters._common import FLOAT, quantized_type
from onnxscript_ep_passes.lowering.context import DowngradeContext
from onnxscript_ep_passes.lowering.registry import register_downgrade

_FLOAT_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
_FLOAT4 = ir.DataType.FLOAT4E2M1


@register_downgrade("Attention", 23, kind="expansion")
def attention_23(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None]:
    """Attention-23 is new: expand it through its ONNX function body.

    The body (built from the node's attributes and input types) covers masks, causal
    masking, grouped-query heads, 3-D inputs, past key/value, softcap and every
    ``qk_matmul_output_mode``; the outputs the node does not use are left out.
    """
    return ctx.expand_function()


@register_downgrade("RMSNormalization", 23, kind="expansion")
def rmsnormalization_23(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None]:
    """RMSNormalization-23 is new: expand it through its ONNX function body."""
    return ctx.expand_function()


@register_downgrade("RotaryEmbedding", 23, kind="expansion")
def rotaryembedding_23(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None]:
    """RotaryEmbedding-23 is new: expand it through its ONNX function body."""
    return ctx.expand_function()


def _widens(source: ir.DataType, target: ir.DataType) -> bool:
    """Whether converting ``source`` to ``target`` is exact for every value."""
    return source == target or (target == FLOAT and source in _FLOAT_TYPES)


@register_downgrade("DequantizeLinear", 23, kind="rewrite")
def dequantizelinear_23(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """DequantizeLinear-23 added ``output_dtype`` and float4e2m1 inputs.

    ``output_dtype`` equal to the scale's type is dropped. A float output from a
    float16/bfloat16 scale becomes DequantizeLinear with the scale Cast to float
    (exact): the product is then computed and rounded in float32, the output type, as
    opset 23 says and as the reference does. A narrower output type is refused: opset 23
    computes the product at the output's precision, while the reference rounds a float32
    product, and no earlier node expresses the former. float4e2m1 inputs are refused.
    """
    x, scale = ctx.input(0), ctx.input(1)
    x_type = ctx.require_dtype(x, "input")
    if x_type == _FLOAT4:
        ctx.refuse("input is FLOAT4E2M1, which DequantizeLinear-21 does not allow")
    scale_type = ctx.require_dtype(scale, "x_scale")
    output_dtype = int(ctx.attribute("output_dtype", 0))
    node.attributes.pop("output_dtype", None)
    if output_dtype == 0 or ir.DataType(output_dtype) == scale_type:
        return None
    out_type = ir.DataType(output_dtype)
    if out_type != FLOAT:
        ctx.refuse(
            f"output_dtype {out_type.name} differs from the {scale_type.name} scale: the "
            "product's precision is ambiguous when narrowed"
        )
    node.replace_input_with(1, ctx.op("Cast", [scale], to=FLOAT))
    return None


@register_downgrade("QuantizeLinear", 23, kind="rewrite")
def quantizelinear_23(node: ir.Node, ctx: DowngradeContext) -> Sequence[ir.Value] | None:
    """QuantizeLinear-23 added ``precision``, mixed x/scale types and float4e2m1 outputs.

    The division runs at ``precision`` (default: the scale's type). When converting x
    and the scale to that type is exact (same type, or half -> float), both are Cast to
    it and QuantizeLinear-21, whose x and scale share one type, divides at that
    precision: the same computation. That holds for a float32 (or int32) precision
    only: a float16/bfloat16 precision rounds the quotient to that type first, while
    QuantizeLinear-21 on half inputs divides in float32 (ONNX Runtime; the
    QuantizeLinear-19 adapter relies on it), and the two round some quotients near
    k + 0.5 to different integers; it is refused. A narrowing
    conversion is refused (where rounding happens is then ambiguous), as are
    int32/float mixes and float4e2m1 outputs.
    """
    x, scale, zero_point = ctx.input(0), ctx.input(1), ctx.input(2)
    out_type = quantized_type(ctx, zero_point)
    if out_type == _FLOAT4:
        ctx.refuse("output is FLOAT4E2M1, which QuantizeLinear-21 does not allow")
    x_type = ctx.require_dtype(x, "input")
    scale_type = ctx.require_dtype(scale, "y_scale")
    precision_attr = int(ctx.attribute("precision", 0))
    precision = ir.DataType(precision_attr) if precision_attr else scale_type
    if not (_widens(x_type, precision) and _widens(scale_type, precision)):
        ctx.refuse(
            f"input {x_type.name} and y_scale {scale_type.name} divided at "
            f"{precision.name} precision: the conversion is not exact"
        )
    if precision in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
        ctx.refuse(
            f"the division runs at {precision.name} precision (the quotient is rounded to "
            f"{precision.name} before rounding to an integer), while QuantizeLinear-21 "
            "divides half-precision inputs in float32 (ONNX Runtime) and so rounds some "
            "quotients near k + 0.5 differently"
        )
    node.attributes.pop("precision", None)
    if x_type == scale_type == precision:
        return None
    if x_type != precision:
        node.replace_input_with(0, ctx.op("Cast", [x], to=precision))
    if scale_type != precision:
        node.replace_input_with(1, ctx.op("Cast", [scale], to=precision))
    return None
