"""Bidirectional ai.onnx ``Attention`` -> com.microsoft ``MultiHeadAttention`` (encoders).

torch.onnx exports the self-attention of an encoder (BERT-, ViT-, Whisper-encoder-style)
as one ``Attention(q, k, v[, mask])`` on BHSD tensors with ``is_causal=0``. This module
rewrites each such node into ``MultiHeadAttention`` when every condition below holds;
otherwise it is left alone and the reason is returned.

Conditions (proved from the graph, or refused):

- attributes: ``softcap`` 0, ``is_causal`` 0, only output 0 used, no ai.onnx past inputs;
  q/k/v 4-D with the same static head count (no grouped KV heads) and head size;
- **mask**: absent or one that keeps every key (every query sees every key: a constant
  all-true boolean or all-zero float mask, moved only by ops that copy its elements --
  Expand, Reshape, ... -- as transformers builds for an encoder without
  ``attention_mask``, e.g. ViT), or a tensor that
  :func:`~onnxscript_ep_passes.fusion.mask_proof.prove_padding_mask` proves to be
  ``attention_mask[b, j] != 0`` alone (bidirectional with padding; a causal mask is
  :mod:`~onnxscript_ep_passes.fusion.attention`'s). The padding goes to the fused node as
  ``attention_bias`` ``[B, 1, S, S]``: 0 where ``attention_mask[b, j]`` is set, the lowest
  float elsewhere (WebGPU's kernel has no ``key_padding_mask``).

The fused node takes q/k/v as BSD (``Transpose`` + ``Reshape``), the Attention's ``scale``
(default ``1/sqrt(head_size)``), and its output is turned back to BHSD. The padding bias
takes its batch and sequence sizes from ``attention_mask`` when shape inference gives q the
same symbolic sizes (one Shape node for the whole graph, not two per layer), else from q.

On lavapipe (WebGPU on a CPU), MultiHeadAttention and com.microsoft ``Attention`` were
measured wrong from 32 tokens on, with or without ``attention_bias``, at every head size
tried (16-128): 5-18 % of the output's scale, every query row. The fusion's verification
on the target EP (:mod:`~onnxscript_ep_passes.fusion.verify`, which runs 40 tokens) is
what drops it there; a model whose activations are small (random-init BERT) can stay
within tolerance.
"""

from __future__ import annotations

__all__ = ["fuse_attention_to_mha"]

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
from onnxscript_ep_passes.fusion.mask_proof import prove_padding_mask

_COPIES = frozenset(
    ("Expand", "Reshape", "Unsqueeze", "Squeeze", "Transpose", "Identity", "Tile", "Flatten")
)


def _keeps_every_key(mask: ir.Value) -> bool:
    """Whether every element of ``mask`` is a copy of a constant's, all of which keep
    their key (True for a boolean mask, 0 for a float one added to the scores)."""
    value: ir.Value | None = mask
    while value is not None:
        tensor = ir.convenience.get_const_tensor(value)
        if tensor is not None:
            array = tensor.numpy()
            if array.size == 0:
                return False
            if array.dtype == np.bool_:
                return bool(array.all())
            return bool(np.issubdtype(array.dtype, np.floating) and (array == 0).all())
        node = value.producer()
        if node is None or node.domain not in ("", "ai.onnx") or node.op_type not in _COPIES:
            return False
        value = node.inputs[0]
    return False


def _heads(node: ir.Node) -> tuple[int, int]:
    """(heads, head size) of a bidirectional Attention that meets the conditions."""
    if node.attributes.get_float("softcap", 0.0) != 0.0:
        raise RefusedError(
            "the attention caps its scores (softcap), which the fusion does not carry over"
        )
    if node.attributes.get_int("is_causal", 0):
        raise RefusedError("causal attention (is_causal=1): not a bidirectional one")
    if any(v is not None for v in node.inputs[4:]):
        raise RefusedError("the Attention node takes a KV cache or lengths as inputs of its own")
    if any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
        raise RefusedError("the Attention node's present key/value or scores outputs are used")
    shapes = [None if v is None or v.shape is None else v.shape for v in node.inputs[:3]]
    if any(s is None or len(s) != 4 for s in shapes):
        raise RefusedError("query, key and value are not 4-D (batch, heads, sequence, head size)")
    heads = {s[1] for s in shapes}  # type: ignore[index]
    sizes = {s[3] for s in shapes}  # type: ignore[index]
    if len(heads) != 1 or len(sizes) != 1:
        raise RefusedError("query, key and value have different head counts or head sizes")
    (head_count,), (head_size,) = heads, sizes
    if not isinstance(head_count, int) or not isinstance(head_size, int):
        raise RefusedError("the number of heads or the head size is not known from the shapes")
    return head_count, head_size


def _same_sizes(q: ir.Value, mask: ir.Value) -> bool:
    """Whether q ``(B, H, S, D)`` and ``attention_mask`` ``(B, S)`` have the same known
    batch and sequence dims."""
    if q.shape is None or mask.shape is None or len(q.shape) != 4 or len(mask.shape) != 2:
        return False
    pairs = ((q.shape[0], mask.shape[0]), (q.shape[2], mask.shape[1]))
    return all(
        a == b and (isinstance(a, int) or (isinstance(a, ir.SymbolicDim) and a.value))
        for a, b in pairs
    )


class _Builder:
    """Makes the nodes around each fused node; the padding bias is shared by all layers."""

    def __init__(self, model: ir.Model) -> None:
        self.model = model
        self.bias: ir.Value | None = None
        self.const = Constants(model.graph, "mha_fusion")

    def padding_bias(self, q: ir.Value, dtype: ir.DataType, nodes: list[ir.Node]) -> ir.Value:
        """The padding as ``attention_bias`` ``(B, 1, S, S)``, shared by all layers."""
        if self.bias is None:
            mask = next(v for v in self.model.graph.inputs if v.name == "attention_mask")

            def add(op: str, inputs: list[ir.Value], **attrs: object) -> ir.Value:
                nodes.append(ir.node(op, inputs, attributes=attrs))  # type: ignore[arg-type]
                return nodes[-1].outputs[0]

            source, (batch, seq) = (mask, (0, 1)) if _same_sizes(q, mask) else (q, (0, 2))
            length = add("Shape", [source], start=seq, end=seq + 1)
            sizes = (add("Shape", [source], start=batch, end=batch + 1), length, length)
            self.bias = padding_bias(self.const, add, mask, dtype, sizes)
        return self.bias

    def rewrite(self, node: ir.Node, heads: int, head_size: int, padded: bool) -> None:
        q, k, v = node.inputs[:3]
        assert q is not None and k is not None and v is not None
        dtype = q.dtype or ir.DataType.FLOAT
        nodes: list[ir.Node] = []
        bias = self.padding_bias(q, dtype, nodes) if padded else None
        flat = self.const("bsd", np.array([0, 0, -1], np.int64))

        def add(op: str, inputs: list[ir.Value | None], **attrs: object) -> ir.Value:
            domain = MS_DOMAIN if op == "MultiHeadAttention" else ""
            new = ir.node(op, inputs, attributes=attrs, domain=domain)  # type: ignore[arg-type]
            nodes.append(new)
            new.outputs[0].dtype = dtype
            return new.outputs[0]

        def to_bsd(x: ir.Value) -> ir.Value:
            return add("Reshape", [add("Transpose", [x], perm=[0, 2, 1, 3]), flat])

        scale = node.attributes.get_float("scale", 1.0 / float(np.sqrt(head_size)))
        inputs = [to_bsd(q), to_bsd(k), to_bsd(v), None, None, bias]
        fused = add("MultiHeadAttention", inputs, num_heads=heads, scale=scale)
        nodes[-1].name = f"{node.name or 'Attention'}/MultiHeadAttention"
        bshd = self.const("bshd", np.array([0, 0, heads, head_size], np.int64))
        out = add("Transpose", [add("Reshape", [fused, bshd])], perm=[0, 2, 1, 3])
        out.shape = node.outputs[0].shape
        self.model.graph.insert_before(node, nodes)
        replace_output(node.outputs[0], out)


def fuse_attention_to_mha(model: ir.Model, *, max_length: int = 4096) -> AttentionFusionResult:
    """Rewrite the main graph's bidirectional ai.onnx Attention nodes into
    MultiHeadAttention, in place (module docstring); ``max_length`` bounds the mask proof."""
    builder = _Builder(model)
    padding = any(v.name == "attention_mask" for v in model.graph.inputs)

    def fuse_one(node: ir.Node, label: str, result: AttentionFusionResult) -> None:
        heads, head_size = _heads(node)
        mask = node.inputs[3] if len(node.inputs) > 3 else None
        if mask is not None and _keeps_every_key(mask):
            mask = None
        if mask is not None:
            prove_padding_mask(model, mask, max_length=max_length)
        builder.rewrite(node, heads, head_size, padded=mask is not None and padding)

    return fuse_attention_nodes(model, fuse_one)
