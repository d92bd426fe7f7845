"""Write a chain model at opset 24 with external data and no ``value_info``.

The model is one value carried through identical 10-node blocks:

    MatMul (weight) -> Add (bias) -> Shape -> Reshape (to that shape) -> Transpose ->
    Transpose (back) -> Cast to float16 -> Cast to float -> Unsqueeze -> Squeeze

Every op changed from opset 23 to 24 only in its type constraints (Shape, Reshape,
Transpose, Cast, Unsqueeze, Squeeze) or not at all (MatMul, Add), so ``lower
--target-opset 23`` needs only new labels; but only the graph input and output declare
a type: the type rules read the types of intermediate values, which only shape
inference can tell (``lowering/proto_fast_path.py``, rule 1). Weights are float32 (the
hidden size follows from ``--weight-bytes`` and the block count), appended to
``OUT.data`` one tensor at a time as ``make_synthetic.py`` writes them.

Usage::

    python benchmarks/make_chain.py OUT.onnx --nodes 20020 --weight-bytes 480M
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
from make_synthetic import ExternalWriter, generator_main
from onnx import TensorProto, numpy_helper

OPSET = 24
NODES_PER_BLOCK = 10


def hidden_for(weight_bytes: int, blocks: int) -> int:
    """The hidden size whose ``blocks`` square float32 weights hold about ``weight_bytes``."""
    return max(1, int(math.sqrt(max(weight_bytes, 4) / 4 / blocks)))


def build(
    path: Path,
    nodes: int,
    weight_bytes: int,
    *,
    hidden: int = 0,
    heads: int = 0,
    seq: int = 8,
    seed: int = 0,
) -> dict[str, object]:
    """Write the model to ``path`` (weights to ``path.data``); ``hidden`` 0: from the
    weight bytes. ``heads`` is unused (the generators share one command line)."""
    del heads
    blocks = max(1, round(nodes / NODES_PER_BLOCK))
    hidden = hidden or hidden_for(weight_bytes, blocks)
    rng = np.random.default_rng(seed)
    writer = ExternalWriter(path.with_name(path.name + ".data"))
    node_list: list[onnx.NodeProto] = []
    initializers = [
        numpy_helper.from_array(np.array([0], np.int64), "axes_0"),
        numpy_helper.from_array(np.zeros(hidden, np.float32), "bias"),
    ]
    written = 0
    x = "x"

    def add(op: str, inputs: list[str], out: str, **attrs: object) -> str:
        node_list.append(oh.make_node(op, inputs, [out], name=f"{out}_node", **attrs))
        return out

    try:
        for i in range(blocks):
            weight = rng.standard_normal((hidden, hidden), dtype=np.float32)
            weight *= np.float32(1 / math.sqrt(hidden))
            initializers.append(writer.add(f"b{i}.weight", weight))
            written += weight.nbytes
            p = f"b{i}"
            y = add("MatMul", [x, f"b{i}.weight"], f"{p}_mm")
            y = add("Add", [y, "bias"], f"{p}_add")
            shape = add("Shape", [y], f"{p}_shape")
            y = add("Reshape", [y, shape], f"{p}_reshape")
            y = add("Transpose", [y], f"{p}_t", perm=[1, 0, 2])
            y = add("Transpose", [y], f"{p}_tt", perm=[1, 0, 2])
            y = add("Cast", [y], f"{p}_fp16", to=TensorProto.FLOAT16)
            y = add("Cast", [y], f"{p}_fp32", to=TensorProto.FLOAT)
            y = add("Unsqueeze", [y, "axes_0"], f"{p}_unsq")
            x = add("Squeeze", [y, "axes_0"], f"{p}_out")
    finally:
        writer.close()
    graph = oh.make_graph(
        node_list,
        f"chain_{blocks}b",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, hidden])],
        [oh.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", seq, hidden])],
        initializers,
    )
    model = oh.make_model(
        graph,
        opset_imports=[oh.make_opsetid("", OPSET)],
        producer_name="onnxscript-ep-passes benchmarks/make_chain.py",
    )
    model.ir_version = oh.find_min_ir_version_for(list(model.opset_import))
    with open(path, "wb") as file:  # the tensors point at the data file already
        file.write(model.SerializeToString())
    return {
        "path": str(path),
        "nodes": len(node_list),
        "blocks": blocks,
        "hidden": hidden,
        "seq": seq,
        "weight_bytes": written,
        "data_file_bytes": os.path.getsize(writer.path),
        "proto_bytes": os.path.getsize(path),
    }


def main(argv: list[str] | None = None) -> int:
    return generator_main(
        argv, __doc__.split("\n\n")[0], build, nodes=20_020, weight_bytes="480M", hidden=0, seq=8
    )


if __name__ == "__main__":
    sys.exit(main())
