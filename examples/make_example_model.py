"""Write a small opset-24 decoder block, with external data, to lower as an example.

It holds what torch.onnx emits at opset 24 (RMSNormalization, Reshape, Transpose,
Attention) plus opset-24-only features (Swish, a Cast with ``round_mode``), so relabelling
the opset import would break it while ``onnxscript-ep-passes lower`` keeps it exact.

Usage: python examples/make_example_model.py OUT.onnx   (``--help`` answers before numpy
and onnx are imported and writes nothing)
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

HIDDEN, HEADS, SEQ = 64, 4, 8


def _arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "out", nargs="?", default="example.onnx", help="the model to write (OUT.data beside it)"
    )
    return parser.parse_args(argv)


def build() -> onnx.ModelProto:
    import numpy as np
    import onnx.helper as oh
    from onnx import TensorProto, numpy_helper

    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.05).astype(np.float32), name)

    inits = [
        weight("norm_scale", HIDDEN),
        weight("wq", HIDDEN, HIDDEN),
        weight("wk", HIDDEN, HIDDEN),
        weight("wv", HIDDEN, HIDDEN),
        weight("wo", HIDDEN, HIDDEN),
        weight("w_up", HIDDEN, 4 * HIDDEN),
        weight("w_down", 4 * HIDDEN, HIDDEN),
        numpy_helper.from_array(np.array([0, 0, HEADS, HIDDEN // HEADS], np.int64), "heads_shape"),
        numpy_helper.from_array(np.array([0, 0, HIDDEN], np.int64), "merged_shape"),
    ]
    nodes = [
        oh.make_node("RMSNormalization", ["x", "norm_scale"], ["h"], name="norm", axis=-1),
        oh.make_node("MatMul", ["h", "wq"], ["q"], name="q_proj"),
        oh.make_node("MatMul", ["h", "wk"], ["k"], name="k_proj"),
        oh.make_node("MatMul", ["h", "wv"], ["v"], name="v_proj"),
    ]
    for name in ("q", "k", "v"):
        nodes += [
            oh.make_node("Reshape", [name, "heads_shape"], [f"{name}_4d"], name=f"{name}_reshape"),
            oh.make_node(
                "Transpose",
                [f"{name}_4d"],
                [f"{name}_bhsd"],
                name=f"{name}_transpose",
                perm=[0, 2, 1, 3],
            ),
        ]
    nodes += [
        oh.make_node(
            "Attention",
            ["q_bhsd", "k_bhsd", "v_bhsd", "", "", "", "seqlens"],
            ["attn"],
            name="attention",
            is_causal=1,
        ),
        oh.make_node(
            "Transpose", ["attn"], ["attn_bshd"], name="attn_transpose", perm=[0, 2, 1, 3]
        ),
        oh.make_node("Reshape", ["attn_bshd", "merged_shape"], ["attn_flat"], name="attn_reshape"),
        oh.make_node("MatMul", ["attn_flat", "wo"], ["o"], name="o_proj"),
        oh.make_node("Add", ["x", "o"], ["r1"], name="residual1"),
        oh.make_node("MatMul", ["r1", "w_up"], ["up"], name="up_proj"),
        oh.make_node("Swish", ["up"], ["act"], name="swish", alpha=1.0),
        oh.make_node("MatMul", ["act", "w_down"], ["down"], name="down_proj"),
        oh.make_node("Add", ["r1", "down"], ["r2"], name="residual2"),
        oh.make_node(
            "Cast", ["r2"], ["y"], name="to_fp16", to=TensorProto.FLOAT16, round_mode="up"
        ),
    ]
    graph = oh.make_graph(
        nodes,
        "example_decoder_block",
        [
            oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", SEQ, HIDDEN]),
            oh.make_tensor_value_info("seqlens", TensorProto.INT64, ["batch"]),
        ],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT16, ["batch", SEQ, HIDDEN])],
        inits,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)], producer_name="example")
    model.ir_version = 12
    return model


def main(argv: list[str] | None = None) -> None:
    out = Path(_arguments(argv).out)
    import onnx

    out.parent.mkdir(parents=True, exist_ok=True)
    model = build()
    onnx.checker.check_model(model, full_check=True)
    onnx.save(
        model, out, save_as_external_data=True, location=out.name + ".data", size_threshold=1024
    )
    print(f"wrote {out} (opset 24, weights in {out.name}.data)")


if __name__ == "__main__":
    main()
