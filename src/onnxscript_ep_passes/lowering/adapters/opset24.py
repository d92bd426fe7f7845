"""Undo what ai.onnx opset 24 changed (24 -> 23).

Type-only changes of this step (float8e8m0 for the shape/cast family and Q/DQ) are
derived from ``onnx.defs`` by the registry; the adapters here cover the rest.
"""

from __future__ import annotations

__all__ = ["cast_24", "castlike_24", "swish_24"]

import onnx_ir as ir

from onnxscript_ep_passes.lowering.context import DowngradeContext
from onnxscript_ep_passes.lowering.registry import register_downgrade


def _drop_round_mode(node: ir.Node, ctx: DowngradeContext) -> None:
    ctx.require_types_allowed_below()
    node.attributes.pop("round_mode", None)


@register_downgrade("Cast", 24, kind="attribute")
def cast_24(node: ir.Node, ctx: DowngradeContext) -> None:
    """Cast-24 added float8e8m0 and ``round_mode``: drop ``round_mode``, refuse float8e8m0.

    ``round_mode`` only selects how values are rounded when casting *to* float8e8m0; any
    other cast ignores it, so dropping it keeps the meaning. A float8e8m0 cast has no
    equivalent at opset 23.
    """
    _drop_round_mode(node, ctx)


@register_downgrade("CastLike", 24, kind="attribute")
def castlike_24(node: ir.Node, ctx: DowngradeContext) -> None:
    """CastLike-24 added float8e8m0 and ``round_mode``: as for Cast-24."""
    _drop_round_mode(node, ctx)


@register_downgrade("Swish", 24, kind="expansion")
def swish_24(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None]:
    """Swish-24 is new: expand it through its ONNX function body (x * Sigmoid(alpha * x))."""
    return ctx.expand_function()
