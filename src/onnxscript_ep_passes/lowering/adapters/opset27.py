"""Undo what ai.onnx opset 27 changed (27 -> 26).

Opset 27 introduced CausalConvWithState and LinearAttention (both with function
bodies) and gave Range float16/bfloat16 with ``stash_type``; the adapters here cover
all three.
"""

from __future__ import annotations

__all__ = ["causalconvwithstate_27", "linearattention_27", "range_27"]

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxscript_ep_passes.lowering import function_body, schemas
from onnxscript_ep_passes.lowering.adapters._common import static_dim
from onnxscript_ep_passes.lowering.context import DowngradeContext
from onnxscript_ep_passes.lowering.registry import register_downgrade

_STASH_TYPES = (int(ir.DataType.FLOAT), int(ir.DataType.DOUBLE))

# The most time steps whose Scan is unrolled when LinearAttention is expanded.
MAX_UNROLLED_STEPS = 64


def _type_name(code: int) -> str:
    try:
        return ir.DataType(code).name
    except ValueError:
        return str(code)


@register_downgrade("CausalConvWithState", 27, kind="expansion")
def causalconvwithstate_27(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None]:
    """CausalConvWithState-27 is new: expand it through its ONNX function body.

    The body (Concat of the carried state or zeros, depthwise Conv, optional SiLU,
    Slice for the new state) depends on the input types: the channel count must be
    known statically (from the input or the weight), as the Conv's ``group``.
    """
    x, weight = node.inputs[0], node.inputs[1]
    if static_dim(x, 1) is None and static_dim(weight, 0) is None:
        ctx.refuse(
            "the channel count is not static (input dim 1, weight dim 0): the function "
            "body's depthwise Conv needs it as its group attribute"
        )
    return ctx.expand_function()


@register_downgrade("LinearAttention", 27, kind="expansion")
def linearattention_27(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None]:
    """LinearAttention-27 is new: expand its ONNX function body, unrolling the body's Scan.

    The body runs the recurrence one token at a time in a Scan over the sequence axis.
    With a static sequence length T (at most ``MAX_UNROLLED_STEPS``), the Scan is
    unrolled: its body is inlined T times, step t reading slice t of each scanned input
    (Gather at t) and the state left by step t - 1, and the per-step outputs are
    stacked along axis 0 (Unsqueeze + Concat). That is Scan's definition applied step
    by step, with the same operators in the same order, so the result is identical.
    A dynamic or longer sequence is refused.
    """
    query = node.inputs[0]
    steps = None
    if query is not None and query.shape is not None and len(query.shape) == 3:
        dim = query.shape[1]
        steps = dim if isinstance(dim, int) else None
    if steps is None or not 0 < steps <= MAX_UNROLLED_STEPS:
        ctx.refuse(
            "LinearAttention's function body loops over the sequence with a Scan; it is "
            f"unrolled only for a static sequence length of 1 to {MAX_UNROLLED_STEPS} "
            f"(query shape {None if query is None else query.shape})"
        )
    return _Inliner(ctx, steps).expand()


class _Inliner:
    """Inline a function body before the node, unrolling Scans over ``steps`` slices."""

    def __init__(self, ctx: DowngradeContext, steps: int) -> None:
        self.ctx = ctx
        self.steps = steps
        proto = function_body.function_body(ctx)
        self.opset = next(
            (o.version for o in proto.opset_import if schemas.is_default_domain(o.domain)),
            ctx.version,
        )
        self.function = ir.serde.deserialize_function(proto)
        self.attributes = function_body.bound_attributes(ctx.node, ctx.version)

    def expand(self) -> list[ir.Value | None]:
        node = self.ctx.node
        mapping: dict[ir.Value, ir.Value | None] = {}
        for index, formal in enumerate(self.function.inputs):
            mapping[formal] = node.inputs[index] if index < len(node.inputs) else None
        self.inline(self.function, mapping)
        return [mapping.get(out) for out in self.function.outputs[: len(node.outputs)]]

    def inline(
        self, nodes: ir.Function | ir.Graph, mapping: dict[ir.Value, ir.Value | None]
    ) -> None:
        for inner in nodes:
            if inner.op_type == "Scan" and schemas.is_default_domain(inner.domain):
                self.unroll_scan(inner, mapping)
            else:
                self.copy(inner, mapping)

    def copy(self, inner: ir.Node, mapping: dict[ir.Value, ir.Value | None]) -> None:
        function_body.copy_body_node(self.ctx, inner, mapping, self.attributes, self.opset)

    def op(self, op_type: str, inputs: Sequence[ir.Value | None], **attributes: Any) -> ir.Value:
        return self.ctx.op(op_type, inputs, opset=self.opset, **attributes)

    def unroll_scan(self, scan: ir.Node, mapping: dict[ir.Value, ir.Value | None]) -> None:
        body = scan.attributes["body"].as_graph()
        scanned = int(scan.attributes["num_scan_inputs"].as_int())
        for name in (
            "scan_input_axes",
            "scan_input_directions",
            "scan_output_axes",
            "scan_output_directions",
        ):
            attr = scan.attributes.get(name)
            if attr is not None and any(attr.as_ints()):
                self.ctx.refuse(f"cannot unroll the body's Scan: it sets {name}")
        if any(v is None for v in scan.inputs):
            self.ctx.refuse("cannot unroll the body's Scan: it has an omitted input")
        inputs = [mapping[v] for v in scan.inputs if v is not None]
        states = inputs[: len(inputs) - scanned]
        sequences = inputs[len(inputs) - scanned :]
        carried = len(states)
        per_step: list[list[ir.Value | None]] = []
        for step in range(self.steps):
            index = self.ctx.constant(np.array(step, dtype=np.int64))
            local = dict(mapping)
            for formal, state in zip(body.inputs[:carried], states):
                local[formal] = state
            for formal, sequence in zip(body.inputs[carried:], sequences):
                local[formal] = self.op("Gather", [sequence, index], axis=0)
            self.inline(body, local)
            states = [local[v] for v in body.outputs[:carried]]
            per_step.append([local[v] for v in body.outputs[carried:]])
        for formal, state in zip(scan.outputs[:carried], states):
            mapping[formal] = state
        axis0 = self.ctx.constant(np.array([0], dtype=np.int64))
        for k, formal in enumerate(scan.outputs[carried:]):
            stacked = [self.op("Unsqueeze", [outputs[k], axis0]) for outputs in per_step]
            mapping[formal] = (
                stacked[0] if len(stacked) == 1 else self.op("Concat", stacked, axis=0)
            )


@register_downgrade("Range", 27, kind="rewrite")
def range_27(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None] | None:
    """Range-27 added float16/bfloat16 and ``stash_type``: compute in the stash type, Cast back.

    For float16/bfloat16, Range-27 is defined as: Cast ``start``, ``limit`` and
    ``delta`` to ``stash_type`` (FLOAT or DOUBLE), run the range there, Cast the result
    back (its function body does exactly that). Range-26 computes FLOAT and DOUBLE
    ranges by the same definition, so ``Cast(Range(Cast(start), Cast(limit),
    Cast(delta)))`` is that definition step for step. For the other types
    ``stash_type`` has no effect and is dropped. Any other ``stash_type`` on a
    float16/bfloat16 range has no defined meaning and is refused.

    (Range-11's function body rounds a double range's ``limit - start`` to float before
    counting; runtimes and the reference count in double, as Range-27's body does for a
    double stash, and the cases check such an input.)
    """
    start = node.inputs[0]
    dtype = ctx.require_dtype(start, "start")
    stash = int(ctx.attribute("stash_type", int(ir.DataType.FLOAT)))
    if dtype not in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
        node.attributes.pop("stash_type", None)
        ctx.require_types_allowed_below()
        return None
    if stash not in _STASH_TYPES:
        ctx.refuse(
            f"Range on {dtype.name} with stash_type={_type_name(stash)}: Range-27 defines only "
            "FLOAT or DOUBLE as stash types"
        )
    wide = [ctx.op("Cast", [value], to=ir.DataType(stash)) for value in node.inputs]
    return [ctx.op("Cast", [ctx.op("Range", wide)], to=dtype)]
