"""ai.onnx ``Attention`` (torch >= 2.13 at opset >= 23) -> com.microsoft ``GroupQueryAttention``.

torch.onnx exports ``scaled_dot_product_attention`` of a decoder as::

    q = RoPE(q_pre, cos, sin)               # x*cos + cat(-x[h:], x[:h])*sin   (optional)
    k = RoPE(k_pre, cos, sin)
    k_all = Concat(past_key, k, axis=2)     # KV cache (optional); a graph output
    k_rep = Reshape(Expand(Unsqueeze(k_all, [2]), ...))   # repeat_kv (GQA; optional)
    y = Attention(q, k_rep, v_rep, mask)    # BHSD tensors

This module rewrites each such ``Attention`` into one ``GroupQueryAttention`` (the kernel
ORT GenAI's builder uses) when every condition below holds; otherwise the node is left
alone and the reason is returned.

Conditions (proved from the graph, or refused):

- attributes: ``softcap`` 0, only output 0 used, no ai.onnx past inputs (4..6);
  q/k/v 4-D with static head counts and head size; repeat_kv (if any) repeats each KV
  head ``H / Hkv`` times in place (Unsqueeze axis 2), which is GQA's grouping.
- **mask**: either absent with ``is_causal=1`` and no KV cache, or a tensor that
  :func:`~onnxscript_ep_passes.fusion.mask_proof.prove_causal_mask` proves, from the
  graph and for every size up to ``max_length`` tokens, to be
  ``causal(j <= past + i) [AND j > past + i - W] AND attention_mask[b, j]`` (no
  sampling: a mask the proof cannot read is refused with the reason). A sliding window
  of a constant ``W`` tokens becomes ``local_window_size = W``: ORT's GroupQueryAttention
  lets query ``i`` see keys ``past + i - W < j <= past + i`` with it (measured on ORT 1.32
  CPU and the WebGPU plugin EP, prefill and decode with past beyond the window).
  GroupQueryAttention then gets ``seqlens_k = total - 1`` for every row and
  ``total_sequence_length = attention_mask.shape[1]`` (the whole past + current window,
  so it never treats a token as padding itself), and the padding as its
  ``attention_bias`` input: ``[B, 1, S, total]``, 0 where ``attention_mask[b, j]`` is set,
  the lowest float elsewhere (shared by all layers). That is the proven mask at every
  query that sees at least one key -- left padding, right padding or holes (measured on
  ORT 1.32 CPU and the WebGPU plugin EP, with and without a window and a past). A query
  that sees no key (the first tokens of a left-padded row) is a padding position, where
  the kernels differ (:mod:`~onnxscript_ep_passes.fusion.verify`).
- **rotary**: matched structurally (non-interleaved ``rotate_half`` at opsets 24+, or
  ai.onnx ``RotaryEmbedding-23`` without position_ids; full head size), the same cos/sin
  for q and k, and cos/sin evaluated as functions of position only: at ``max_length``
  tokens they give the caches (for ``rotate_half``, their two halves equal), and with a
  past they equal the cache rows ``past + i``. The caches become initializers
  (``max_length x head_size/2``): sequences longer than ``max_length`` fail at run time.
  Without a matched rotary the fused node gets the rotated q/k (``do_rotary=0``).
"""

from __future__ import annotations

__all__ = [
    "AttentionFusionResult",
    "Constants",
    "fuse_attention_nodes",
    "fuse_attention_to_gqa",
    "padding_bias",
    "replace_output",
]

import dataclasses
import logging
from collections.abc import Callable

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as common_passes

from onnxscript_ep_passes.core.onnx_utils import is_onnx_op
from onnxscript_ep_passes.fusion.attention_match import (
    AttentionMatch,
    RefusedError,
    match_attention,
)
from onnxscript_ep_passes.fusion.evaluate import Sizes, evaluate_values, generate_feeds
from onnxscript_ep_passes.fusion.mask_proof import prove_causal_mask
from onnxscript_ep_passes.fusion.mask_terms import has_past_input

logger = logging.getLogger(__name__)

MS_DOMAIN = "com.microsoft"


@dataclasses.dataclass
class AttentionFusionResult:
    """How many Attention nodes became GroupQueryAttention, and why others did not."""

    fused: int = 0
    refused: dict[str, str] = dataclasses.field(default_factory=dict)  # node name -> reason
    notes: dict[str, str] = dataclasses.field(default_factory=dict)  # fused, with a caveat


def _prove_mask(model: ir.Model, match: AttentionMatch, max_length: int) -> int | None:
    """The proven mask's sliding window (None: none binds); refuses otherwise."""
    node = match.node
    mask = node.inputs[3] if len(node.inputs) > 3 else None
    causal = node.attributes.get_int("is_causal", 0)
    if mask is None:
        if not causal:
            raise RefusedError(
                "no mask and is_causal=0: every query sees every key (bidirectional "
                "attention), and GroupQueryAttention is causal only"
            )
        if match.past_key is not None:
            raise RefusedError(
                "is_causal=1 with a KV cache: ONNX aligns that mask to the first key, not to the "
                "past, which GroupQueryAttention does not compute"
            )
        return None
    if causal:
        raise RefusedError("both a mask and is_causal=1 (the fusion reads one or the other)")
    return prove_causal_mask(model, mask, max_length=max_length)


def _rotary_caches(
    model: ir.Model, match: AttentionMatch, max_length: int
) -> tuple[np.ndarray, np.ndarray]:
    assert match.rotary is not None
    head, half = match.head_size, match.head_size // 2

    def rows(sizes: Sizes) -> list[np.ndarray]:
        """cos and sin as (batch, seq, head/2)."""
        feeds = generate_feeds(model.graph.inputs, sizes)
        try:
            values = evaluate_values(model, list(match.rotary or ()), feeds)
        except Exception as error:
            raise RefusedError(f"cos/sin cannot be evaluated: {error}") from error
        out = []
        for value in values:
            try:
                if match.rotary_halves:
                    full = np.broadcast_to(value, (sizes.batch, 1, sizes.seq, head))[:, 0]
                    if not np.array_equal(full[..., :half], full[..., half:]):
                        raise RefusedError(
                            "the rotary cos/sin halves differ: not the rotate-half rotary "
                            "GroupQueryAttention computes"
                        )
                    out.append(full[..., :half])
                else:
                    out.append(np.broadcast_to(value, (sizes.batch, sizes.seq, half)))
            except ValueError as error:
                raise RefusedError(f"cos/sin shape {value.shape} at {sizes}") from error
        return out

    caches = [np.ascontiguousarray(table[0]) for table in rows(Sizes(1, max_length, 0))]
    check = Sizes(2, 3, 4) if match.past_key is not None else Sizes(2, 5, 0)
    for value, cache in zip(rows(check), caches):
        expected = cache[check.past : check.past + check.seq]
        if not np.allclose(value, expected[None], rtol=0, atol=1e-6):
            raise RefusedError(
                "the rotary cos/sin do not depend on the position alone (past + index), so one "
                "cache cannot hold them"
            )
    return caches[0], caches[1]


class Constants:
    """Adds the initializers a fusion needs to ``graph``, named ``<prefix>.<name>.<n>``."""

    def __init__(self, graph: ir.Graph, prefix: str) -> None:
        self.graph = graph
        self.prefix = prefix
        self.count = 0

    def __call__(self, name: str, array: np.ndarray) -> ir.Value:
        self.count += 1
        value = ir.Value(name=f"{self.prefix}.{name}.{self.count}", const_value=ir.tensor(array))
        value.shape = ir.Shape(array.shape)
        value.dtype = ir.DataType.from_numpy(array.dtype)
        self.graph.register_initializer(value)
        return value


def padding_bias(
    const: Constants,
    add: Callable[..., ir.Value],
    mask: ir.Value,
    dtype: ir.DataType,
    sizes: tuple[ir.Value, ir.Value, ir.Value],
    keep: ir.Value | None = None,
) -> ir.Value:
    """``attention_bias[b, 0, i, j]`` of shape ``(batch, 1, seq, total)`` (``sizes``, 1-D
    int64): 0 where ``attention_mask[b, j]`` is set (and, given ``keep``, a bool
    ``(seq, total)``, ``keep[i, j]``), the lowest float elsewhere (any padding: left, right
    or holes). ``add(op, inputs, **attributes)`` makes each node."""
    batch, seq, total = sizes
    lowest = np.array(np.finfo(dtype.numpy()).min, dtype.numpy())
    kept = add("Cast", [mask], to=ir.DataType.BOOL)
    zero = const("bias_zero", np.array(0, dtype.numpy()))
    axes = const("axes12", np.array([1, 2], np.int64))
    if keep is None:
        row = add("Where", [kept, zero, const("bias_lowest", lowest)])
        bias4 = add("Unsqueeze", [row, axes])
    else:
        both = add("And", [add("Unsqueeze", [kept, axes]), keep])  # (batch, 1, seq, total)
        bias = add("Where", [both, zero, const("bias_lowest", lowest)])
        both.dtype = both.producer().inputs[0].dtype = kept.dtype = ir.DataType.BOOL  # type: ignore[union-attr]
        bias.dtype = dtype
        return bias
    one = const("one_1d", np.array([1], np.int64))
    shape = add("Concat", [batch, one, seq, total], axis=0)
    bias = add("Expand", [bias4, shape])
    kept.dtype = ir.DataType.BOOL
    seq.dtype = shape.dtype = ir.DataType.INT64
    row.dtype = bias4.dtype = bias.dtype = dtype
    return bias


class _Builder:
    """Creates the nodes GroupQueryAttention needs, sharing them across layers."""

    def __init__(self, model: ir.Model, max_length: int) -> None:
        self.model = model
        self.graph = model.graph
        self.max_length = max_length
        self.caches: dict[tuple[ir.Value, ir.Value], tuple[ir.Value, ir.Value]] = {}
        self.lengths: tuple[ir.Value, ir.Value, ir.Value | None] | None = None
        self.const = Constants(model.graph, "gqa_fusion")

    def _insert(self, anchor: ir.Node, nodes: list[ir.Node]) -> None:
        self.graph.insert_before(anchor, nodes)

    def seq_lengths(
        self, anchor: ir.Node, match: AttentionMatch
    ) -> tuple[ir.Value, ir.Value, ir.Value | None]:
        """``seqlens_k`` (every row: total - 1), ``total_sequence_length`` and, with an
        ``attention_mask`` input, the padding as ``attention_bias`` (shared by all layers)."""
        if self.lengths is not None:
            return self.lengths
        mask = next((v for v in self.graph.inputs if v.name == "attention_mask"), None)
        nodes: list[ir.Node] = []

        def add(op: str, inputs: list[ir.Value | None], **attrs: object) -> ir.Value:
            node = ir.node(op, inputs, attributes=attrs)  # type: ignore[arg-type]
            nodes.append(node)
            return node.outputs[0]

        batch = add("Shape", [match.q], start=0, end=1)
        if mask is not None:
            total64 = add("Shape", [mask], start=1, end=2)
        else:
            total64 = add("Shape", [match.q], start=2, end=3)
        one = self.const("one_i64", np.array(1, np.int64))
        # int64 arithmetic: it stays on the CPU, where GroupQueryAttention reads its lengths
        seqlens = add(
            "Cast", [add("Expand", [add("Sub", [total64, one]), batch])], to=ir.DataType.INT32
        )
        total = add("Cast", [add("Squeeze", [total64])], to=ir.DataType.INT32)
        for node in nodes:  # types for the lowering's checks (no shape inference for GQA)
            cast_to = node.attributes.get_int("to", ir.DataType.INT64)
            node.outputs[0].dtype = ir.DataType(cast_to)
        bias = None if mask is None else self._padding_bias(mask, match, (batch, total64), add)
        self._insert(anchor, nodes)
        self.lengths = (seqlens, total, bias)
        return self.lengths

    def _padding_bias(
        self,
        mask: ir.Value,
        match: AttentionMatch,
        sizes: tuple[ir.Value, ir.Value],
        add: Callable[..., ir.Value],
    ) -> ir.Value:
        """The padding as ``attention_bias`` (:func:`padding_bias`) over the queries and
        the whole past + current window."""
        batch, total = sizes
        # Without a past the mask covers exactly the current tokens (the proof's sizes).
        past = has_past_input(self.model)
        seq = add("Shape", [match.q], start=2, end=3) if past else total
        dtype = match.q.dtype or ir.DataType.FLOAT
        return padding_bias(self.const, add, mask, dtype, (batch, seq, total))

    def rotary(self, model: ir.Model, match: AttentionMatch) -> tuple[ir.Value, ir.Value]:
        assert match.rotary is not None
        if match.rotary not in self.caches:
            cos, sin = _rotary_caches(model, match, self.max_length)
            self.caches[match.rotary] = (self.const("cos_cache", cos), self.const("sin_cache", sin))
        return self.caches[match.rotary]

    def rewrite(self, match: AttentionMatch, window: int | None) -> None:
        anchor = match.node
        seqlens, total, bias = self.seq_lengths(anchor, match)
        nodes: list[ir.Node] = []

        def add(
            op: str,
            inputs: list[ir.Value | None],
            domain: str = "",
            outputs: int = 1,
            **attrs: object,
        ) -> ir.Node:
            node = ir.node(op, inputs, attributes=attrs, domain=domain, num_outputs=outputs)  # type: ignore[arg-type]
            nodes.append(node)
            return node

        flat = self.const("bsd", np.array([0, 0, -1], np.int64))

        def to_bsd(x: ir.Value) -> ir.Value:
            t = add("Transpose", [x], perm=[0, 2, 1, 3]).outputs[0]
            return add("Reshape", [t, flat]).outputs[0]

        inputs: list[ir.Value | None] = [
            to_bsd(match.q),
            to_bsd(match.k),
            to_bsd(match.v),
            match.past_key,
            match.past_value,
            seqlens,
            total,
        ]
        attrs: dict[str, object] = {
            "num_heads": match.heads,
            "kv_num_heads": match.kv_heads,
            "scale": match.scale,
        }
        if window is not None:
            attrs["local_window_size"] = window
        if match.rotary is not None:
            inputs.extend(self.rotary(self.model, match))
            attrs.update(do_rotary=1, rotary_interleaved=0)
        if bias is not None:  # inputs 7-9 (cos, sin, position_ids) may be absent
            inputs.extend([None] * (10 - len(inputs)) + [bias])
        gqa = add("GroupQueryAttention", inputs, domain=MS_DOMAIN, outputs=3, **attrs)
        gqa.name = f"{anchor.name or 'Attention'}/GroupQueryAttention"
        shape = self.const("bshd", np.array([0, 0, match.heads, match.head_size], np.int64))
        bshd = add("Reshape", [gqa.outputs[0], shape]).outputs[0]
        bhsd = add("Transpose", [bshd], perm=[0, 2, 1, 3]).outputs[0]
        dtype = match.q.dtype
        for node in nodes:  # types for the lowering's checks (no shape inference for GQA)
            for output in node.outputs:
                if dtype is not None:
                    output.dtype = dtype
        bhsd.shape = anchor.outputs[0].shape
        if match.present_key is not None and match.present_value is not None:
            gqa.outputs[1].shape = match.present_key.shape
            gqa.outputs[2].shape = match.present_value.shape
        self._insert(anchor, nodes)
        replace_output(anchor.outputs[0], bhsd)
        if match.present_key is not None and match.present_value is not None:
            replace_output(match.present_key, gqa.outputs[1])
            replace_output(match.present_value, gqa.outputs[2])


def replace_output(old: ir.Value, new: ir.Value) -> None:
    """Replace every use of ``old``; a graph output keeps its name."""
    name = old.name
    output = old.is_graph_output()
    ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
    if output and name is not None:
        old.name = f"{name}.unfused"
        new.name = name


def fuse_attention_nodes(
    model: ir.Model, fuse_one: Callable[[ir.Node, str, AttentionFusionResult], None]
) -> AttentionFusionResult:
    """Call ``fuse_one(node, label, result)`` on each ai.onnx Attention node of the main
    graph; a RefusedError it raises is that node's reason. Counts, imports com.microsoft
    and removes what the fused nodes left unused."""
    result = AttentionFusionResult()
    for node in list(model.graph):
        if not is_onnx_op(node, "Attention"):
            continue
        label = node.name or f"Attention#{len(result.refused) + result.fused}"
        try:
            fuse_one(node, label, result)
        except RefusedError as error:
            result.refused[label] = str(error)
            continue
        result.fused += 1
    if result.fused:
        model.opset_imports.setdefault(MS_DOMAIN, 1)
        common_passes.RemoveUnusedNodesPass()(model)
    return result


def fuse_attention_to_gqa(model: ir.Model, *, max_length: int = 4096) -> AttentionFusionResult:
    """Rewrite the main graph's ai.onnx Attention nodes into GroupQueryAttention, in place.

    ``max_length``: rows of the rotary caches (the longest past + current sequence).
    """
    builder = _Builder(model, max_length)

    def fuse_one(node: ir.Node, label: str, result: AttentionFusionResult) -> None:
        match = match_attention(node, model.graph)
        window = _prove_mask(model, match, max_length)
        if match.rotary is not None:
            try:
                builder.rotary(model, match)
            except RefusedError as error:
                result.notes[label] = f"rotary kept outside the fused node: {error}"
                match = dataclasses.replace(
                    match, q=match.q_rotated, k=match.k_rotated, rotary=None
                )
        builder.rewrite(match, window)

    return fuse_attention_nodes(model, fuse_one)
