"""Write a synthetic transformer-like decoder at opset 24 with external data.

The model is a stack of identical pre-norm decoder layers (40 nodes each):

* RMS norm spelled out: Mul, ReduceMean, Add, Sqrt, Div, Mul (weight)
* attention: q/k/v MatMul with weights, Reshape + Transpose per head split, a causal
  mask brought in by Unsqueeze, MatMul, Mul (scale), Add, Softmax, MatMul, Transpose,
  Reshape, output MatMul, residual Add
* RMS norm again, then a SwiGLU MLP: MatMul x3, Sigmoid, Mul x2, residual Add
* a float16 round trip at the end of the layer (Cast to float16, Cast back), as a
  mixed-precision export leaves behind.

Every op is one whose only change from opset 23 to opset 24 is in its type constraints
(Reshape, Transpose, Unsqueeze, Cast) or that did not change at all (MatMul, Add, Mul,
Div, Sqrt, ReduceMean, Sigmoid, Softmax), so both ``onnxscript-ep-passes lower`` and
``onnx.version_converter`` can take it from 24 to 23; the comparison is fair.

Weights are float32, drawn one tensor at a time and appended to ``OUT.data`` as they
are made, so the generator holds one layer's weights at most, never the whole model.
Every intermediate value gets a ``value_info`` entry (type and shape).

Usage::

    python benchmarks/make_synthetic.py OUT.onnx --nodes 20000 --weight-bytes 480M
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto, numpy_helper

OPSET = 24
NODES_PER_LAYER = 40
ALIGN_LARGE = 4096  # the alignment onnx uses for tensors of 1 MB and more
ALIGN_SMALL = 64
LARGE = 1 << 20


def parse_bytes(text: str) -> int:
    """``480M``, ``2.2G``, ``1500000`` -> bytes (powers of 1000, like file sizes)."""
    units = {"K": 10**3, "M": 10**6, "G": 10**9}
    text = text.strip().upper().removesuffix("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


class ExternalWriter:
    """Appends tensors to one external data file and makes the TensorProtos pointing at them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = open(path, "wb")  # noqa: SIM115 - closed in close()
        self.offset = 0

    def add(self, name: str, array: np.ndarray) -> TensorProto:
        align = ALIGN_LARGE if array.nbytes >= LARGE else ALIGN_SMALL
        padding = -self.offset % align
        if padding:
            self.file.write(b"\0" * padding)
            self.offset += padding
        data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False)
        data.tofile(self.file)
        tensor = TensorProto()
        tensor.name = name
        tensor.data_type = oh.np_dtype_to_tensor_dtype(array.dtype)
        tensor.dims.extend(array.shape)
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (
            ("location", self.path.name),
            ("offset", str(self.offset)),
            ("length", str(array.nbytes)),
        ):
            entry = tensor.external_data.add()
            entry.key = key
            entry.value = value
        self.offset += array.nbytes
        return tensor

    def close(self) -> None:
        self.file.close()


class Builder:
    def __init__(
        self,
        writer: ExternalWriter,
        rng: np.random.Generator,
        hidden: int,
        heads: int,
        ffn: int,
        seq: int,
    ) -> None:
        self.writer = writer
        self.rng = rng
        self.hidden, self.heads, self.ffn, self.seq = hidden, heads, ffn, seq
        self.head_dim = hidden // heads
        self.nodes: list[onnx.NodeProto] = []
        self.value_info: list[onnx.ValueInfoProto] = []
        self.initializers: list[TensorProto] = []
        self.weight_bytes = 0

    def weight(self, name: str, *shape: int, scale: float = 0.02) -> str:
        array = self.rng.standard_normal(shape, dtype=np.float32)
        array *= np.float32(scale)
        self.initializers.append(self.writer.add(name, array))
        self.weight_bytes += array.nbytes
        return name

    def norm_weight(self, name: str) -> str:
        array = (1.0 + 0.1 * self.rng.standard_normal(self.hidden)).astype(np.float32)
        self.initializers.append(self.writer.add(name, array))
        self.weight_bytes += array.nbytes
        return name

    def const(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def node(
        self,
        op: str,
        inputs: list[str],
        output: str,
        shape: list[int | str],
        elem: int = TensorProto.FLOAT,
        **attrs: object,
    ) -> str:
        self.nodes.append(oh.make_node(op, inputs, [output], name=f"{output}_node", **attrs))
        self.value_info.append(oh.make_tensor_value_info(output, elem, shape))
        return output

    def rms_norm(self, x: str, weight: str, p: str) -> str:
        b, s, h = "batch", self.seq, self.hidden
        sq = self.node("Mul", [x, x], f"{p}_sq", [b, s, h])
        mean = self.node("ReduceMean", [sq, "axes_last"], f"{p}_mean", [b, s, 1], keepdims=1)
        eps = self.node("Add", [mean, "eps"], f"{p}_eps", [b, s, 1])
        root = self.node("Sqrt", [eps], f"{p}_rms", [b, s, 1])
        normed = self.node("Div", [x, root], f"{p}_div", [b, s, h])
        return self.node("Mul", [normed, weight], f"{p}_out", [b, s, h])

    def layer(self, x: str, i: int) -> str:
        b, s, h, nh, hd, f = "batch", self.seq, self.hidden, self.heads, self.head_dim, self.ffn
        p = f"l{i}"
        w = {
            "ln1": self.norm_weight(f"{p}.ln1.weight"),
            "q": self.weight(f"{p}.attn.q.weight", h, h),
            "k": self.weight(f"{p}.attn.k.weight", h, h),
            "v": self.weight(f"{p}.attn.v.weight", h, h),
            "o": self.weight(f"{p}.attn.o.weight", h, h),
            "ln2": self.norm_weight(f"{p}.ln2.weight"),
            "gate": self.weight(f"{p}.mlp.gate.weight", h, f),
            "up": self.weight(f"{p}.mlp.up.weight", h, f),
            "down": self.weight(f"{p}.mlp.down.weight", f, h),
        }
        hn = self.rms_norm(x, w["ln1"], f"{p}_ln1")
        heads = {}
        for name, perm, shape in (
            ("q", [0, 2, 1, 3], [b, nh, s, hd]),
            ("k", [0, 2, 3, 1], [b, nh, hd, s]),
            ("v", [0, 2, 1, 3], [b, nh, s, hd]),
        ):
            proj = self.node("MatMul", [hn, w[name]], f"{p}_{name}", [b, s, h])
            split = self.node("Reshape", [proj, "heads_shape"], f"{p}_{name}_4d", [b, s, nh, hd])
            heads[name] = self.node("Transpose", [split], f"{p}_{name}_t", shape, perm=perm)
        scores = self.node("MatMul", [heads["q"], heads["k"]], f"{p}_scores", [b, nh, s, s])
        scaled = self.node("Mul", [scores, "attn_scale"], f"{p}_scaled", [b, nh, s, s])
        mask = self.node("Unsqueeze", ["causal_mask", "axes_01"], f"{p}_mask", [1, 1, s, s])
        masked = self.node("Add", [scaled, mask], f"{p}_masked", [b, nh, s, s])
        probs = self.node("Softmax", [masked], f"{p}_probs", [b, nh, s, s], axis=-1)
        ctx = self.node("MatMul", [probs, heads["v"]], f"{p}_ctx", [b, nh, s, hd])
        ctx_t = self.node("Transpose", [ctx], f"{p}_ctx_t", [b, s, nh, hd], perm=[0, 2, 1, 3])
        merged = self.node("Reshape", [ctx_t, "merged_shape"], f"{p}_ctx_flat", [b, s, h])
        attn = self.node("MatMul", [merged, w["o"]], f"{p}_attn", [b, s, h])
        r1 = self.node("Add", [x, attn], f"{p}_res1", [b, s, h])
        hn2 = self.rms_norm(r1, w["ln2"], f"{p}_ln2")
        gate = self.node("MatMul", [hn2, w["gate"]], f"{p}_gate", [b, s, f])
        sig = self.node("Sigmoid", [gate], f"{p}_sig", [b, s, f])
        silu = self.node("Mul", [gate, sig], f"{p}_silu", [b, s, f])
        up = self.node("MatMul", [hn2, w["up"]], f"{p}_up", [b, s, f])
        act = self.node("Mul", [silu, up], f"{p}_act", [b, s, f])
        down = self.node("MatMul", [act, w["down"]], f"{p}_down", [b, s, h])
        r2 = self.node("Add", [r1, down], f"{p}_res2", [b, s, h])
        half = self.node("Cast", [r2], f"{p}_fp16", [b, s, h], TensorProto.FLOAT16, to=10)
        return self.node("Cast", [half], f"{p}_out", [b, s, h], TensorProto.FLOAT, to=1)


def ffn_for(weight_bytes: int, layers: int, hidden: int) -> int:
    """MLP width that makes ``layers`` layers hold about ``weight_bytes`` of float32."""
    per_layer = weight_bytes / 4 / layers - 4 * hidden * hidden - 2 * hidden
    return max(1, int(per_layer // (3 * hidden)))


def build(
    path: Path,
    nodes: int,
    weight_bytes: int,
    *,
    hidden: int = 128,
    heads: int = 4,
    seq: int = 16,
    seed: int = 0,
) -> dict[str, object]:
    layers = max(1, round(nodes / NODES_PER_LAYER))
    ffn = ffn_for(weight_bytes, layers, hidden)
    data_path = path.with_name(path.name + ".data")
    writer = ExternalWriter(data_path)
    builder = Builder(writer, np.random.default_rng(seed), hidden, heads, ffn, seq)
    builder.const("axes_last", np.array([-1], np.int64))
    builder.const("axes_01", np.array([0, 1], np.int64))
    builder.const("eps", np.array(1e-6, np.float32))
    builder.const("attn_scale", np.array(1 / np.sqrt(hidden // heads), np.float32))
    builder.const("heads_shape", np.array([0, 0, heads, hidden // heads], np.int64))
    builder.const("merged_shape", np.array([0, 0, hidden], np.int64))
    mask = np.triu(np.full((seq, seq), -1e4, np.float32), k=1)
    builder.const("causal_mask", mask)
    x = "x"
    try:
        for i in range(layers):
            x = builder.layer(x, i)
    finally:
        writer.close()
    out = builder.nodes[-1].output[0]
    builder.value_info = [vi for vi in builder.value_info if vi.name != out]
    graph = oh.make_graph(
        builder.nodes,
        f"synthetic_decoder_{layers}l",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, hidden])],
        [oh.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", seq, hidden])],
        builder.initializers,
        value_info=builder.value_info,
    )
    model = oh.make_model(
        graph,
        opset_imports=[oh.make_opsetid("", OPSET)],
        producer_name="onnxscript-ep-passes benchmarks/make_synthetic.py",
    )
    model.ir_version = oh.find_min_ir_version_for(list(model.opset_import))
    # Tensors already point at the data file; write the proto as it is.
    with open(path, "wb") as file:
        file.write(model.SerializeToString())
    return {
        "path": str(path),
        "nodes": len(builder.nodes),
        "layers": layers,
        "hidden": hidden,
        "ffn": ffn,
        "seq": seq,
        "weight_bytes": builder.weight_bytes,
        "data_file_bytes": os.path.getsize(data_path),
        "proto_bytes": os.path.getsize(path),
    }


def generator_main(
    argv: list[str] | None,
    description: str,
    build: Callable[..., dict[str, Any]],
    *,
    nodes: int,
    weight_bytes: str,
    hidden: int,
    seq: int | None = None,
) -> int:
    """The command line the model generators share: OUT, size options, build, one line out.

    ``seq`` adds a ``--seq`` option (static sequence length) when the generator has one.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("output", type=Path, help="OUT.onnx (weights go to OUT.onnx.data)")
    parser.add_argument("--nodes", type=int, default=nodes, help="about this many nodes")
    parser.add_argument(
        "--weight-bytes", type=parse_bytes, default=weight_bytes, help="float32 weight bytes"
    )
    parser.add_argument("--hidden", type=int, default=hidden)
    parser.add_argument("--heads", type=int, default=4)
    if seq is not None:
        parser.add_argument("--seq", type=int, default=seq)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    options = {"hidden": args.hidden, "heads": args.heads, "seed": args.seed}
    if seq is not None:
        options["seq"] = args.seq
    start = time.perf_counter()
    info = build(args.output, args.nodes, args.weight_bytes, **options)
    info["seconds"] = round(time.perf_counter() - start, 2)
    print(" ".join(f"{key}={value}" for key, value in info.items()))
    return 0


def main(argv: list[str] | None = None) -> int:
    return generator_main(
        argv, __doc__.split("\n\n")[0], build, nodes=20_000, weight_bytes="480M", hidden=128, seq=16
    )


if __name__ == "__main__":
    sys.exit(main())
