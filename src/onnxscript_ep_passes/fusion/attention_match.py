"""The structure torch.onnx gives a decoder's ai.onnx ``Attention``, matched on the IR.

:func:`match_attention` walks back from an ``Attention`` node through the rotary
(``x*cos + rotate_half(x)*sin`` or ai.onnx ``RotaryEmbedding-23``), repeat_kv
(Unsqueeze axis 2 / Expand / Reshape) and the KV-cache ``Concat`` and returns an
:class:`AttentionMatch`, or raises :class:`RefusedError` naming what does not fit. It only
reads the graph; the numeric conditions (mask, rotary caches) and the rewrite are in
:mod:`~onnxscript_ep_passes.fusion.attention`.
"""

from __future__ import annotations

__all__ = ["AttentionMatch", "RefusedError", "match_attention", "split_cache"]

import dataclasses

import numpy as np
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import is_onnx_op


class RefusedError(Exception):
    """Why a fusion was not applied, in user terms (its message); ``detail`` holds the
    internal reason where the message leaves it out (logged at debug level: ``-v``)."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail


def _producer(value: ir.Value | None, op_type: str, domain: str = "") -> ir.Node:
    node = None if value is None else value.producer()
    if node is None or node.op_type != op_type or node.domain != domain:
        raise RefusedError(f"expected {op_type} producing {None if value is None else value.name}")
    return node


def _ints(value: ir.Value | None) -> list[int] | None:
    tensor = None if value is None else ir.convenience.get_const_tensor(value)
    return None if tensor is None else [int(x) for x in tensor.numpy().reshape(-1)]


def _static_dims(value: ir.Value, rank: int) -> list[int | None]:
    shape = value.shape
    if shape is None or len(shape) != rank:
        raise RefusedError(f"{value.name}: rank {rank} with known shape needed")
    return [d if isinstance(d, int) else None for d in shape]


def _is_slice(node: ir.Node, start: int, end_at_least: int, axis: int) -> bool:
    starts, ends = _ints(node.inputs[1]), _ints(node.inputs[2])
    axes = _ints(node.inputs[3]) if len(node.inputs) > 3 else None
    steps = _ints(node.inputs[4]) if len(node.inputs) > 4 else None
    return (
        starts == [start]
        and ends is not None
        and len(ends) == 1
        and ends[0] >= end_at_least
        and axes in ([-1], [axis])
        and steps in (None, [1])
    )


def _rotate_half_of(rotated: ir.Value, x: ir.Value, head: int) -> bool:
    try:
        concat = _producer(rotated, "Concat")
        neg = _producer(concat.inputs[0], "Neg")
        upper = _producer(neg.inputs[0], "Slice")
        lower = _producer(concat.inputs[1], "Slice")
    except RefusedError:
        return False
    half = head // 2
    return (
        len(concat.inputs) == 2
        and concat.attributes.get_int("axis", 0) in (-1, 3)
        and upper.inputs[0] is x
        and lower.inputs[0] is x
        and _is_slice(upper, half, head, 3)
        and _is_slice(lower, 0, half, 3)
    )


def _match_onnx_rope(value: ir.Value, head: int) -> tuple[ir.Value, ir.Value, ir.Value] | None:
    """``(x, cos, sin)`` when ``value = RotaryEmbedding-23(x, cos, sin)`` (4-D, full, plain)."""
    node = value.producer()
    if not is_onnx_op(node, "RotaryEmbedding"):
        return None
    x, cos, sin = (list(node.inputs) + [None] * 3)[:3]
    if x is None or cos is None or sin is None or any(v is not None for v in node.inputs[3:]):
        return None
    if node.attributes.get_int("interleaved", 0) != 0:
        return None
    if node.attributes.get_int("rotary_embedding_dim", 0) not in (0, head):
        return None
    if x.shape is None or len(x.shape) != 4:
        return None
    return x, cos, sin


def _match_rope(value: ir.Value, head: int) -> tuple[ir.Value, ir.Value, ir.Value] | None:
    """``(x, cos, sin)`` when ``value = x*cos + rotate_half(x)*sin``."""
    try:
        add = _producer(value, "Add")
        a, b = add.inputs
        for first, second in ((a, b), (b, a)):
            try:
                m1, m2 = _producer(first, "Mul"), _producer(second, "Mul")
            except RefusedError:
                continue
            for x, cos in (m1.inputs, tuple(reversed(m1.inputs))):
                for rot, sin in (m2.inputs, tuple(reversed(m2.inputs))):
                    if (
                        x is not None
                        and rot is not None
                        and cos is not None
                        and sin is not None
                        and _rotate_half_of(rot, x, head)
                    ):
                        return x, cos, sin
    except RefusedError:
        pass
    return None


def _match_repeat(value: ir.Value, heads: int) -> tuple[ir.Value, int]:
    """``(k_all, kv_heads)``: undo repeat_kv, or ``(value, heads)`` when there is none."""
    try:
        reshape = _producer(value, "Reshape")
        expand = _producer(reshape.inputs[0], "Expand")
        unsqueeze = _producer(expand.inputs[0], "Unsqueeze")
    except RefusedError:
        return value, heads
    if _ints(unsqueeze.inputs[1]) != [2]:
        raise RefusedError("the key/value head repetition (repeat_kv) is not on the head axis")
    source = unsqueeze.inputs[0]
    assert source is not None
    kv_heads = _static_dims(source, 4)[1]
    expanded = _static_dims(expand.outputs[0], 5)
    if kv_heads is None or expanded[1] != kv_heads or expanded[2] is None:
        raise RefusedError(
            "the key/value head repetition (repeat_kv) has head counts the shapes do not give"
        )
    if kv_heads * expanded[2] != heads or _static_dims(value, 4)[1] != heads:
        raise RefusedError(
            "the key/value head repetition (repeat_kv) does not give the query's head count"
        )
    return source, kv_heads


def split_cache(value: ir.Value, graph: ir.Graph) -> tuple[ir.Value | None, ir.Value]:
    """``(past, new)`` when ``value = Concat(past_input, new, axis=2)``, else ``(None, value)``."""
    node = value.producer()
    if node is None or node.op_type != "Concat" or node.domain != "" or len(node.inputs) != 2:
        return None, value
    if node.attributes.get_int("axis", 0) not in (2, -2):
        return None, value
    past, new = node.inputs
    if past is None or new is None or past not in graph.inputs:
        kind = "" if past is None else f" (it is computed by {_producer_name(past)})"
        raise RefusedError(
            f"KV Concat whose past is not a graph input{kind}: a cache the graph trims or "
            "rewrites (e.g. a sliding-window cache keeping only the last window of past "
            "tokens) is not fused, GroupQueryAttention appends to the whole past it is given"
        )
    return past, new


def _producer_name(value: ir.Value) -> str:
    node = value.producer()
    return "nothing" if node is None else f"{node.op_type} node '{node.name}'"


@dataclasses.dataclass
class AttentionMatch:
    node: ir.Node
    q: ir.Value  # BHSD, before rotary when ``rotary`` is set
    k: ir.Value  # BHkvSD new tokens
    v: ir.Value
    past_key: ir.Value | None
    past_value: ir.Value | None
    present_key: ir.Value | None  # the Concat outputs replaced by GQA's present outputs
    present_value: ir.Value | None
    rotary: tuple[ir.Value, ir.Value] | None
    rotary_halves: bool  # cos/sin are (.., head) with equal halves, not (.., head/2)
    q_rotated: ir.Value  # the Attention's own q/k (rotary applied), for do_rotary=0
    k_rotated: ir.Value
    heads: int
    kv_heads: int
    head_size: int
    scale: float


def match_attention(node: ir.Node, graph: ir.Graph) -> AttentionMatch:
    if node.attributes.get_float("softcap", 0.0) != 0.0:
        raise RefusedError(
            "the attention caps its scores (softcap), which the fusion does not carry over"
        )
    if any(v is not None for v in node.inputs[4:]):
        raise RefusedError(
            "the Attention node takes a KV cache or non-padding lengths as inputs of its own, "
            "which the fusion does not read"
        )
    if any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
        raise RefusedError(
            "the Attention node's present key/value or scores outputs are used, and the fused "
            "node does not give them"
        )
    q_in, k_in, v_in = node.inputs[:3]
    if q_in is None or k_in is None or v_in is None:
        raise RefusedError("the Attention node lacks its query, key or value")
    _, heads, _, head = _static_dims(q_in, 4)
    if heads is None or head is None:
        raise RefusedError("the number of heads or the head size is not known from the shapes")
    k_all, kv_heads = _match_repeat(k_in, heads)
    v_all, v_heads = _match_repeat(v_in, heads)
    if v_heads != kv_heads or _static_dims(v_all, 4)[3] != head:
        raise RefusedError("key and value have different head counts or head sizes")
    past_key, k_new = split_cache(k_all, graph)
    past_value, v_new = split_cache(v_all, graph)
    if (past_key is None) != (past_value is None):
        raise RefusedError("only one of key and value has a KV cache")
    rotary, halves = None, True
    q, k = q_in, k_new
    for matcher, full_width in ((_match_rope, True), (_match_onnx_rope, False)):
        rope_q, rope_k = matcher(q_in, head), matcher(k_new, head)
        if rope_q and rope_k and rope_q[1:] == rope_k[1:]:
            q, k = rope_q[0], rope_k[0]
            rotary, halves = (rope_q[1], rope_q[2]), full_width
    scale = node.attributes.get_float("scale", 1.0 / float(np.sqrt(head)))
    return AttentionMatch(
        node=node,
        q=q,
        k=k,
        v=v_new,
        past_key=past_key,
        past_value=past_value,
        present_key=k_all if past_key is not None else None,
        present_value=v_all if past_key is not None else None,
        rotary=rotary,
        rotary_halves=halves,
        q_rotated=q_in,
        k_rotated=k_new,
        heads=heads,
        kv_heads=kv_heads,
        head_size=head,
        scale=scale,
    )
