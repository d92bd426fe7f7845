"""Causal ai.onnx ``Attention`` -> com.microsoft ``MultiHeadAttention`` (the decoder fallback).

Where :mod:`~onnxscript_ep_passes.fusion.attention`'s ``GroupQueryAttention`` is refused or
dropped by the verification (WebGPU's differs from the unfused attention on long prompts
here), a decoder's attention can still run in one fused kernel: ``MultiHeadAttention``
with the causal mask and the padding as its ``attention_bias``. This module rewrites each
ai.onnx ``Attention`` node into one when every condition below holds; otherwise the node
is left alone and the reason is returned.

Conditions (proved from the graph, or refused):

- attributes: ``softcap`` 0, ``qk_matmul_output_mode`` 0, only output 0 used, no ai.onnx
  past inputs (4..6); q/k/v 4-D (BHSD) with static head counts and head size, the query's
  heads a multiple of the key's and value's (grouped KV heads).
- **mask**: a tensor that
  :func:`~onnxscript_ep_passes.fusion.mask_proof.prove_causal_mask` proves to be
  ``causal(j <= past + i) [AND j > past + i - W] AND attention_mask[b, j]``, or none with
  ``is_causal=1`` and no KV cache (``past = 0``: ONNX aligns that mask to the first key).

The rewrite keeps everything around the node: the KV cache (the ``Concat`` of the past and
the new keys, whose outputs are the model's ``present`` outputs), the rotary and any
repeat of the KV heads. The fused node takes the Attention's own q (as BSD) and k/v (BNSH,
all ``total = past + S`` keys), so it has no cache input of its own and its cache
semantics cannot differ; grouped KV heads are repeated in place before it
(``Unsqueeze`` axis 2, ``Expand`` by a constant, ``Reshape``: head ``h`` reads KV head
``h // (H / Hkv)``, as ONNX Attention's grouping). Its ``attention_bias`` is
``[B, 1, S, total]``: 0 where the proven mask keeps the key, the lowest float elsewhere,
built once for all layers (its sizes read where the graph has them,
:func:`~onnxscript_ep_passes.fusion.shape_dims.dim_of`) from ``attention_mask`` with float ops the EP runs (no int64
arithmetic, which ORT puts on the CPU): the distances from the end ``total - j`` and
``S - i`` (``CumSum`` of ones, reversed), ``S - i <= total - j`` (causal; a window ``W``
adds ``total - j < S - i + W``), ``And`` with ``attention_mask != 0`` and ``Where``. A query that sees no key (a left-padded row's first tokens) gets 0, as ONNX
``Attention`` gives on the CPU EP (``MultiHeadAttention`` averages every value there): the
output is multiplied by ``1 - max_j(bias) / lowest`` (0 or 1). The scale is the
Attention's (default ``1/sqrt(head_size)``).

``pad_heads``: WebGPU's ``MultiHeadAttention`` on lavapipe (ORT 1.32, plugin 0.4) differs
from the CPU EP for prompts of 32 tokens or more when the head size is a multiple of 4
(measured: every query row from 8 on, by 0.1-0.4; head size 6 exact), the path its flash
attention takes. With ``pad_heads`` the fused node gets q/k/v zero-padded by two features
per head (``QK^T`` is unchanged, the extra output features are zero and sliced off; the
scale stays that of the real head size), which leaves that path. It is a separate fusion
tried after the plain one (:data:`~onnxscript_ep_passes.fusion.fuse_for_ep.ATTENTION_FUSIONS`),
so an EP whose plain kernel verifies keeps it.
"""

from __future__ import annotations

__all__ = ["fuse_causal_attention_to_mha"]

import numpy as np
import onnx_ir as ir

from onnxscript_ep_passes.fusion.attention import (
    MS_DOMAIN,
    AttentionFusionResult,
    Constants,
    fuse_attention_nodes,
    padding_bias,
    replace_output,
)
from onnxscript_ep_passes.fusion.attention_match import RefusedError
from onnxscript_ep_passes.fusion.mask_proof import prove_causal_mask
from onnxscript_ep_passes.fusion.mask_terms import has_past_input
from onnxscript_ep_passes.fusion.shape_dims import dim_of

_HEAD_PAD = 2
"""Features added to each head by ``pad_heads`` (a multiple of 4 becomes 2 mod 4)."""


def _shape(node: ir.Node) -> tuple[int, int, int]:
    """(heads, KV heads, head size) of an Attention that meets the conditions."""
    if node.attributes.get_float("softcap", 0.0) != 0.0:
        raise RefusedError(
            "the attention caps its scores (softcap), which the fusion does not carry over"
        )
    if node.attributes.get_int("qk_matmul_output_mode", 0) != 0:
        raise RefusedError("the Attention node outputs its scores (qk_matmul_output_mode)")
    if any(v is not None for v in node.inputs[4:]):
        raise RefusedError("the Attention node takes a KV cache or lengths as inputs of its own")
    if any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
        raise RefusedError("the Attention node's present key/value or scores outputs are used")
    shapes = [None if v is None else v.shape for v in node.inputs[:3]]
    if any(s is None or len(s) != 4 for s in shapes):
        raise RefusedError("query, key and value are not 4-D (batch, heads, sequence, head size)")
    dims = [shape[axis] for shape in shapes for axis in (1, 3)]  # type: ignore[index]
    known = [d for d in dims if isinstance(d, int)]
    if len(known) != len(dims):
        raise RefusedError("the number of heads or the head size is not known from the shapes")
    heads, head, kv_heads, k_head, v_heads, v_head = known
    if kv_heads != v_heads or len({head, k_head, v_head}) != 1 or heads % kv_heads:
        raise RefusedError(
            f"query/key/value heads {heads}/{kv_heads}/{v_heads} and head sizes "
            f"{head}/{k_head}/{v_head}: not grouped attention with one head size"
        )
    return heads, kv_heads, head


def _prove(model: ir.Model, node: ir.Node, max_length: int) -> int | None:
    """The proven mask's sliding window (None: none binds); refuses otherwise."""
    mask = node.inputs[3] if len(node.inputs) > 3 else None
    causal = node.attributes.get_int("is_causal", 0)
    if mask is None:
        if not causal:
            raise RefusedError("no mask and is_causal=0: bidirectional attention, not causal")
        if has_past_input(model):
            raise RefusedError(
                "is_causal=1 with a KV cache: ONNX aligns that mask to the first key, "
                "which the fusion does not build"
            )
        return None
    if causal:
        raise RefusedError("both a mask and is_causal=1 (the fusion reads one or the other)")
    return prove_causal_mask(model, mask, max_length=max_length)


class _Builder:
    """Makes the nodes around each fused node; one bias per (window) for all layers."""

    def __init__(self, model: ir.Model, pad_heads: bool) -> None:
        self.model = model
        self.pad_heads = pad_heads
        self.biases: dict[int | None, tuple[ir.Value, ir.Value | None]] = {}
        self.const = Constants(model.graph, "causal_mha_fusion")
        self.mask = next((v for v in model.graph.inputs if v.name == "attention_mask"), None)

    def bias(
        self, q: ir.Value, k: ir.Value, window: int | None, dtype: ir.DataType, nodes: list[ir.Node]
    ) -> tuple[ir.Value, ir.Value | None]:
        """``attention_bias`` ``(B or 1, 1, S, total)`` of the proven mask and, with
        padding, ``seen`` ``(B, 1, S, 1)``: 1 where a query sees a key, else 0 (module doc)."""
        if window in self.biases:
            return self.biases[window]

        def add(op: str, inputs: list[ir.Value | None], **attrs: object) -> ir.Value:
            nodes.append(ir.node(op, inputs, attributes=attrs))  # type: ignore[arg-type]
            return nodes[-1].outputs[0]

        int64, boolean = ir.DataType.INT64, ir.DataType.BOOL
        batch, seq, total = dim_of(q, 0, add), dim_of(q, 2, add), dim_of(k, 2, add)
        one = self.const("one", np.array(1, dtype.numpy()))
        axis0 = self.const("axis0", np.array(0, np.int64))
        axes0 = self.const("axes0", np.array([0], np.int64))

        def countdown(length: ir.Value) -> ir.Value:
            """``[n, n - 1, ..., 1]`` (float: exact below 2**24 positions)."""
            counts = add("CumSum", [add("Expand", [one, length]), axis0], reverse=1)
            counts.dtype = counts.producer().inputs[0].dtype = dtype  # type: ignore[union-attr]
            return counts

        # key j is at total - j from the end, query i at S - i: j <= past + i iff
        # S - i <= total - j, and j > past + i - W iff total - j < S - i + W
        keys = add("Unsqueeze", [countdown(total), axes0])
        queries = add("Unsqueeze", [countdown(seq), self.const("axis1", np.array([1], np.int64))])
        keep = add("LessOrEqual", [queries, keys])
        for value, value_type in ((batch, int64), (seq, int64), (total, int64), (keep, boolean)):
            value.dtype = value_type
        keys.dtype = queries.dtype = dtype
        if window is not None:
            reach = add("Add", [queries, self.const("window", np.array(window, dtype.numpy()))])
            near = add("Less", [keys, reach])
            keep = add("And", [keep, near])
            reach.dtype, near.dtype, keep.dtype = dtype, boolean, boolean
        if self.mask is not None:
            bias = padding_bias(self.const, add, self.mask, dtype, (batch, seq, total), keep)
            lowest = np.array(np.finfo(dtype.numpy()).min, dtype.numpy())
            axis = self.const("axis3", np.array([3], np.int64))
            best = add("ReduceMax", [bias, axis], keepdims=1)  # 0 if any key is kept
            ratio = add("Div", [best, self.const("bias_lowest", lowest)])
            seen = add("Sub", [self.const("one", np.array(1, dtype.numpy())), ratio])
            best.dtype = ratio.dtype = seen.dtype = dtype
        else:
            seen = None
            lowest = np.array(np.finfo(dtype.numpy()).min, dtype.numpy())
            zero = self.const("bias_zero", np.array(0, dtype.numpy()))
            row = add("Where", [keep, zero, self.const("bias_lowest", lowest)])
            bias = add("Unsqueeze", [row, self.const("axes01", np.array([0, 1], np.int64))])
            row.dtype = bias.dtype = dtype
        for node in nodes[:-1]:  # ONNX shape inference: the bias is built at its first use
            for output in node.outputs:
                output.dtype = output.dtype or dtype
        self.biases[window] = (bias, seen)
        return bias, seen

    def rewrite(self, node: ir.Node, shape: tuple[int, int, int], window: int | None) -> None:
        heads, kv_heads, head_size = shape
        q, k, v = node.inputs[:3]
        assert q is not None and k is not None and v is not None
        dtype = q.dtype or ir.DataType.FLOAT
        nodes: list[ir.Node] = []
        bias, seen = self.bias(q, k, window, dtype, nodes)

        def add(op: str, inputs: list[ir.Value | None], **attrs: object) -> ir.Value:
            domain = MS_DOMAIN if op == "MultiHeadAttention" else ""
            new = ir.node(op, inputs, attributes=attrs, domain=domain)  # type: ignore[arg-type]
            nodes.append(new)
            new.outputs[0].dtype = dtype
            return new.outputs[0]

        pad = _HEAD_PAD if self.pad_heads else 0
        pads = self.const("pads", np.array([0, 0, 0, 0, 0, 0, 0, pad], np.int64))

        def prepare(x: ir.Value, repeat: int) -> ir.Value:
            if repeat > 1:  # head h reads KV head h // repeat
                axes = self.const("axis2", np.array([2], np.int64))
                times = self.const("repeat", np.array([1, 1, repeat, 1, 1], np.int64))
                grouped = self.const("bhsd", np.array([0, heads, -1, head_size], np.int64))
                x = add("Reshape", [add("Expand", [add("Unsqueeze", [x, axes]), times]), grouped])
            return add("Pad", [x, pads]) if pad else x

        flat = self.const("bsd", np.array([0, 0, -1], np.int64))
        query = add("Reshape", [add("Transpose", [prepare(q, 1)], perm=[0, 2, 1, 3]), flat])
        key = prepare(k, heads // kv_heads)
        value = prepare(v, heads // kv_heads)
        scale = node.attributes.get_float("scale", 1.0 / float(np.sqrt(head_size)))
        inputs = [query, key, value, None, None, bias]
        fused = add("MultiHeadAttention", inputs, num_heads=heads, scale=scale)
        nodes[-1].name = f"{node.name or 'Attention'}/MultiHeadAttention"
        bshd = self.const("bshd", np.array([0, 0, heads, head_size + pad], np.int64))
        out = add("Reshape", [fused, bshd])
        if pad:
            start = self.const("start", np.array([0], np.int64))
            end = self.const("end", np.array([head_size], np.int64))
            out = add("Slice", [out, start, end, self.const("axis3", np.array([3], np.int64))])
        out = add("Transpose", [out], perm=[0, 2, 1, 3])
        if seen is not None:  # a query that sees no key: ONNX Attention gives 0
            out = add("Mul", [out, seen])
        out.shape = node.outputs[0].shape
        self.model.graph.insert_before(node, nodes)
        replace_output(node.outputs[0], out)


def fuse_causal_attention_to_mha(
    model: ir.Model, *, max_length: int = 4096, pad_heads: bool = False
) -> AttentionFusionResult:
    """Rewrite the main graph's causal ai.onnx Attention nodes into MultiHeadAttention, in
    place (module docstring); ``max_length`` bounds the mask proof, ``pad_heads`` pads each
    head by two zero features (module docstring)."""
    builder = _Builder(model, pad_heads)

    def fuse_one(node: ir.Node, label: str, result: AttentionFusionResult) -> None:
        shape = _shape(node)
        if pad_heads and shape[2] % 4:
            raise RefusedError(
                f"head size {shape[2]} is not a multiple of 4: the unpadded fusion fits it"
            )
        window = _prove(model, node, max_length)
        builder.rewrite(node, shape, window)

    return fuse_attention_nodes(model, fuse_one)
