"""Write a decoder-shaped model at opset 24 with external data, of about N nodes.

The shape of a real LLM export, made up here (nothing is downloaded):

* once per model: the token embedding (Gather), the rotary cos/sin caches (Range, Cast,
  Mul, Cos, Sin over the dynamic sequence length), and the causal + padding mask
  (Range, Unsqueeze, LessOrEqual, Cast of ``attention_mask``, And, Where);
* a repeated block (32 nodes): a small int64 shape subgraph (Shape, Gather, Unsqueeze,
  Concat: the head-split and merge shapes), RMSNormalization, q/k/v MatMuls, Reshape and
  Transpose per head split, RotaryEmbedding on q and k, Attention-24 with the additive
  mask, Transpose + Reshape back, the o MatMul, a residual Add, RMSNormalization again and
  a SwiGLU MLP (gate and up MatMuls, Sigmoid, Mul, Mul, down MatMul, residual Add);
* a final RMSNormalization and the LM-head MatMul.

Inputs ``input_ids``, ``attention_mask`` and ``position_ids`` (int64) have a dynamic
``batch`` and ``seq``; every intermediate value has a ``value_info`` entry with
symbolic dims. Attention-24, Reshape, Transpose, Unsqueeze, Shape and Cast are at their
opset-24 schemas, so lowering to 23 has real work to do; every one of them can be
lowered exactly (Attention-24 without ``nonpad_kv_seqlen``).

Weights are float32, drawn one tensor at a time and appended to ``OUT.data``, never all
held in memory. The MLP width is chosen to give about ``--weight-bytes`` of weights.

Usage::

    python benchmarks/make_decoder.py OUT.onnx --nodes 40000 --weight-bytes 270M
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
from make_synthetic import ExternalWriter, generator_main
from onnx import TensorProto, numpy_helper

__all__ = ["NODES_PER_BLOCK", "build"]

OPSET = 24
NODES_PER_BLOCK = 32
NODES_ONCE = 18  # embedding, rotary caches, mask, final norm and LM head
FLOAT, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


class _Graph:
    """Nodes, value_info and initializers of the model being built."""

    def __init__(self, writer: ExternalWriter, rng: np.random.Generator) -> None:
        self.writer, self.rng = writer, rng
        self.nodes: list[onnx.NodeProto] = []
        self.value_info: list[onnx.ValueInfoProto] = []
        self.initializers: list[TensorProto] = []
        self.weight_bytes = 0

    def weight(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(self.writer.add(name, array))
        self.weight_bytes += array.nbytes
        return name

    def random(self, name: str, *shape: int, scale: float = 0.02) -> str:
        array = self.rng.standard_normal(shape, dtype=np.float32)
        array *= np.float32(scale)
        return self.weight(name, array)

    def const(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def node(
        self,
        op: str,
        inputs: list[str],
        output: str,
        shape: list[int | str] | None,
        elem: int = FLOAT,
        **attrs: object,
    ) -> str:
        self.nodes.append(oh.make_node(op, inputs, [output], name=f"{output}_node", **attrs))
        self.value_info.append(oh.make_tensor_value_info(output, elem, shape))
        return output


def _prologue(g: _Graph, hidden: int, head_dim: int, vocab: int) -> tuple[str, str, str, str]:
    """Embedding, rotary caches and the additive mask; returns (x, cos, sin, mask)."""
    b, s = "batch", "seq"
    embed = g.random("embed.weight", vocab, hidden, scale=1.0)
    x = g.node("Gather", [embed, "input_ids"], "embedded", [b, s, hidden], axis=0)
    shape = g.node("Shape", ["input_ids"], "ids_shape", [2], INT64)
    seq = g.node("Gather", [shape, "one"], "seq_len", [], INT64, axis=0)
    positions = g.node("Range", ["zero", seq, "one"], "positions", [s], INT64)
    # Rotary caches (seq, head_dim / 2), indexed by position_ids in every block.
    inv_freq = 1.0 / (10000.0 ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    g.const("inv_freq", inv_freq.astype(np.float32))
    pos_f = g.node("Cast", [positions], "positions_f", [s], to=FLOAT)
    pos_col = g.node("Unsqueeze", [pos_f, "axes_1"], "positions_col", [s, 1])
    freqs = g.node("Mul", [pos_col, "inv_freq"], "freqs", [s, head_dim // 2])
    cos = g.node("Cos", [freqs], "cos_cache", [s, head_dim // 2])
    sin = g.node("Sin", [freqs], "sin_cache", [s, head_dim // 2])
    # Causal (key <= query) and padding (attention_mask == 1) mask, additive.
    rows = g.node("Unsqueeze", [positions, "axes_1"], "mask_rows", [s, 1], INT64)
    cols = g.node("Unsqueeze", [positions, "axes_0"], "mask_cols", [1, s], INT64)
    causal = g.node("LessOrEqual", [cols, rows], "causal", [s, s], BOOL)
    keep = g.node("Cast", ["attention_mask"], "keep", [b, s], BOOL, to=BOOL)
    keep4 = g.node("Unsqueeze", [keep, "axes_12"], "keep4", [b, 1, 1, s], BOOL)
    allowed = g.node("And", [causal, keep4], "allowed", [b, 1, s, s], BOOL)
    mask = g.node("Where", [allowed, "zero_f", "neg_f"], "attn_bias", [b, 1, s, s])
    return x, cos, sin, mask


def _block(
    g: _Graph, x: str, i: int, dims: tuple[int, int, int], rope: tuple[str, str, str]
) -> str:
    hidden, heads, ffn = dims
    head_dim = hidden // heads
    b, s, p = "batch", "seq", f"l{i}"
    cos, sin, mask = rope
    # The int64 shape subgraph an export leaves in each block.
    shape = g.node("Shape", [x], f"{p}_shape", [3], INT64)
    batch = g.node("Gather", [shape, "zero"], f"{p}_batch", [], INT64, axis=0)
    seq = g.node("Gather", [shape, "one"], f"{p}_seq", [], INT64, axis=0)
    batch1 = g.node("Unsqueeze", [batch, "axes_0"], f"{p}_batch1", [1], INT64)
    seq1 = g.node("Unsqueeze", [seq, "axes_0"], f"{p}_seq1", [1], INT64)
    split = g.node("Concat", [batch1, seq1, "heads_dims"], f"{p}_split", [4], INT64, axis=0)
    merge = g.node("Concat", [batch1, seq1, "hidden_dim"], f"{p}_merge", [3], INT64, axis=0)

    ln1 = g.weight(f"{p}.ln1.weight", np.ones(hidden, np.float32))
    normed = g.node("RMSNormalization", [x, ln1], f"{p}_ln1", [b, s, hidden], axis=-1)
    heads4 = {}
    for name in ("q", "k", "v"):
        w = g.random(f"{p}.attn.{name}.weight", hidden, hidden)
        proj = g.node("MatMul", [normed, w], f"{p}_{name}", [b, s, hidden])
        split4 = g.node("Reshape", [proj, split], f"{p}_{name}_4d", [b, s, heads, head_dim])
        t = g.node(
            "Transpose", [split4], f"{p}_{name}_t", [b, heads, s, head_dim], perm=[0, 2, 1, 3]
        )
        if name != "v":
            t = g.node(
                "RotaryEmbedding",
                [t, cos, sin, "position_ids"],
                f"{p}_{name}_rope",
                [b, heads, s, head_dim],
            )
        heads4[name] = t
    attn = g.node(
        "Attention",
        [heads4["q"], heads4["k"], heads4["v"], mask],
        f"{p}_attn",
        [b, heads, s, head_dim],
    )
    back = g.node("Transpose", [attn], f"{p}_attn_t", [b, s, heads, head_dim], perm=[0, 2, 1, 3])
    merged = g.node("Reshape", [back, merge], f"{p}_attn_flat", [b, s, hidden])
    wo = g.random(f"{p}.attn.o.weight", hidden, hidden)
    out = g.node("MatMul", [merged, wo], f"{p}_o", [b, s, hidden])
    res1 = g.node("Add", [x, out], f"{p}_res1", [b, s, hidden])

    ln2 = g.weight(f"{p}.ln2.weight", np.ones(hidden, np.float32))
    normed2 = g.node("RMSNormalization", [res1, ln2], f"{p}_ln2", [b, s, hidden], axis=-1)
    gate_w = g.random(f"{p}.mlp.gate.weight", hidden, ffn)
    up_w = g.random(f"{p}.mlp.up.weight", hidden, ffn)
    down_w = g.random(f"{p}.mlp.down.weight", ffn, hidden)
    gate = g.node("MatMul", [normed2, gate_w], f"{p}_gate", [b, s, ffn])
    sig = g.node("Sigmoid", [gate], f"{p}_sig", [b, s, ffn])
    silu = g.node("Mul", [gate, sig], f"{p}_silu", [b, s, ffn])
    up = g.node("MatMul", [normed2, up_w], f"{p}_up", [b, s, ffn])
    act = g.node("Mul", [silu, up], f"{p}_act", [b, s, ffn])
    down = g.node("MatMul", [act, down_w], f"{p}_down", [b, s, hidden])
    return g.node("Add", [res1, down], f"{p}_res2", [b, s, hidden])


def ffn_for(weight_bytes: int, blocks: int, hidden: int, vocab: int) -> int:
    """MLP width that makes the model hold about ``weight_bytes`` of float32."""
    per_block = (weight_bytes / 4 - 2 * vocab * hidden) / blocks - 4 * hidden * hidden
    return max(8, int(per_block // (3 * hidden)))


def build(
    path: Path,
    nodes: int,
    weight_bytes: int,
    *,
    hidden: int = 64,
    heads: int = 4,
    vocab: int = 256,
    seed: int = 0,
) -> dict[str, object]:
    """Write the model to ``path`` (weights to ``path.data``); return what was made."""
    blocks = max(1, round((nodes - NODES_ONCE) / NODES_PER_BLOCK))
    ffn = ffn_for(weight_bytes, blocks, hidden, vocab)
    head_dim = hidden // heads
    data_path = path.with_name(path.name + ".data")
    writer = ExternalWriter(data_path)
    g = _Graph(writer, np.random.default_rng(seed))
    g.const("zero", np.array(0, np.int64))
    g.const("one", np.array(1, np.int64))
    g.const("axes_0", np.array([0], np.int64))
    g.const("axes_1", np.array([1], np.int64))
    g.const("axes_12", np.array([1, 2], np.int64))
    g.const("heads_dims", np.array([heads, head_dim], np.int64))
    g.const("hidden_dim", np.array([hidden], np.int64))
    g.const("zero_f", np.array(0.0, np.float32))
    g.const("neg_f", np.array(-1e4, np.float32))
    try:
        x, cos, sin, mask = _prologue(g, hidden, head_dim, vocab)
        for i in range(blocks):
            x = _block(g, x, i, (hidden, heads, ffn), (cos, sin, mask))
        final = g.weight("final_norm.weight", np.ones(hidden, np.float32))
        normed = g.node("RMSNormalization", [x, final], "final_norm", ["batch", "seq", hidden])
        head = g.random("lm_head.weight", hidden, vocab)
        g.nodes.append(oh.make_node("MatMul", [normed, head], ["logits"], name="lm_head"))
    finally:
        writer.close()
    inputs = [
        oh.make_tensor_value_info(name, INT64, ["batch", "seq"])
        for name in ("input_ids", "attention_mask", "position_ids")
    ]
    graph = oh.make_graph(
        g.nodes,
        f"synthetic_decoder_{blocks}blocks",
        inputs,
        [oh.make_tensor_value_info("logits", FLOAT, ["batch", "seq", vocab])],
        g.initializers,
        value_info=g.value_info,
    )
    model = oh.make_model(
        graph,
        opset_imports=[oh.make_opsetid("", OPSET)],
        producer_name="onnxscript-ep-passes benchmarks/make_decoder.py",
    )
    model.ir_version = oh.find_min_ir_version_for(list(model.opset_import))
    with open(path, "wb") as file:  # tensors already point at the data file
        file.write(model.SerializeToString())
    return {
        "path": str(path),
        "nodes": len(g.nodes),
        "blocks": blocks,
        "hidden": hidden,
        "heads": heads,
        "ffn": ffn,
        "vocab": vocab,
        "weight_bytes": g.weight_bytes,
        "data_file_bytes": os.path.getsize(data_path),
        "proto_bytes": os.path.getsize(path),
    }


def main(argv: list[str] | None = None) -> int:
    return generator_main(
        argv, __doc__.split("\n\n")[0], build, nodes=40_000, weight_bytes="270M", hidden=64
    )


if __name__ == "__main__":
    sys.exit(main())
