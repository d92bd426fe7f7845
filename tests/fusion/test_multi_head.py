"""fuse_attention_to_mha: bidirectional Attention -> MultiHeadAttention, exact on ORT.

Hand-built encoder attention (BHSD q/k/v, 4 heads of 16): without a mask and with a padding
mask built from ``attention_mask`` (``Where(Cast(attention_mask), 0, lowest)`` over
``[B, 1, S, S]``), the fused model equals the unfused one on ORT's CPU EP at every position
of a right-padded batch; so does a constant all-true mask expanded to ``[B, 1, S, S]`` (what
transformers builds for ViT), read as no mask. A causal Attention (``is_causal=1``, or a
causal mask), a constant mask that drops a key and a mask from another input are refused
with the reason. (Real BERT exports on WebGPU:
test_families_webgpu.)
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxscript_ep_passes.fusion.evaluate import Sizes, generate_feeds, run_model
from onnxscript_ep_passes.fusion.multi_head import fuse_attention_to_mha


def _encoder(mask: str, is_causal: int = 0) -> onnx.ModelProto:
    qkv = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", 4, "s", 16]) for n in "qkv"]
    inputs = [*qkv, helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "s"])]
    nodes, inits, names = [], [], ["q", "k", "v"]
    if mask == "padding":
        lowest = np.array(np.finfo(np.float32).min, np.float32)
        nodes = [
            helper.make_node("Cast", ["attention_mask"], ["kept"], to=TensorProto.BOOL),
            helper.make_node("Where", ["kept", "zero", "lowest"], ["row"]),
            helper.make_node("Unsqueeze", ["row", "axes12"], ["row4"]),
            helper.make_node("Shape", ["attention_mask"], ["batch"], start=0, end=1),
            helper.make_node("Shape", ["attention_mask"], ["seq"], start=1, end=2),
            helper.make_node("Concat", ["batch", "one", "seq", "seq"], ["square"], axis=0),
            helper.make_node("Expand", ["row4", "square"], ["bias"]),  # ORT wants S rows
        ]
        inits = [
            numpy_helper.from_array(np.array(0, np.float32), "zero"),
            numpy_helper.from_array(lowest, "lowest"),
            numpy_helper.from_array(np.array([1, 2], np.int64), "axes12"),
            numpy_helper.from_array(np.array([1], np.int64), "one"),
        ]
        names.append("bias")
    elif mask in ("all_true", "one_false"):
        keep = np.ones((1, 1, 1, 2), bool)
        keep[..., 1] = mask == "all_true"
        nodes = [
            helper.make_node("Shape", ["q"], ["batch"], start=0, end=1),
            helper.make_node("Shape", ["q"], ["seq"], start=2, end=3),
            helper.make_node("Concat", ["batch", "one", "seq", "two"], ["square"], axis=0),
            helper.make_node("Expand", ["keep", "square"], ["bias"]),
        ]
        inits = [
            numpy_helper.from_array(keep, "keep"),
            numpy_helper.from_array(np.array([1], np.int64), "one"),
            numpy_helper.from_array(np.array([2], np.int64), "two"),
        ]
        names.append("bias")
    elif mask == "other_input":
        inputs.append(helper.make_tensor_value_info("m", TensorProto.BOOL, ["b", 1, "s", "s"]))
        names.append("m")
    nodes.append(helper.make_node("Attention", names, ["y"], is_causal=is_causal))
    graph = helper.make_graph(
        nodes,
        "encoder",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4, "s", 16])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])


@pytest.mark.parametrize("mask", ["none", "padding", "all_true"])
def test_bidirectional_attention_becomes_multi_head_attention_with_the_same_outputs(
    mask: str,
) -> None:
    proto = _encoder(mask)
    model = ir.from_proto(proto)
    result = fuse_attention_to_mha(model)
    assert result.fused == 1 and not result.refused, result.refused
    fused = ir.to_proto(model)
    assert "MultiHeadAttention" in {n.op_type for n in fused.graph.node}
    assert "Attention" not in {n.op_type for n in fused.graph.node}
    onnx.checker.check_model(fused, full_check=True)
    if mask == "padding":  # the bias's sizes are read from attention_mask, once
        assert {n.input[0] for n in fused.graph.node if n.op_type == "Shape"} == {"attention_mask"}
    seq = 2 if mask == "all_true" else 7
    feeds = generate_feeds(ir.from_proto(proto).graph.inputs, Sizes(2, seq, 0, "right"))
    np.testing.assert_allclose(
        run_model(fused, feeds)[0], run_model(proto, feeds)[0], rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize(
    ("mask", "is_causal", "reason"),
    [
        ("none", 1, "causal attention (is_causal=1)"),
        ("other_input", 0, "it depends on the values of input 'm'"),
        ("one_false", 0, "a constant tensor of different values"),
    ],
)
def test_attention_that_is_not_bidirectional_padding_is_refused(
    mask: str, is_causal: int, reason: str
) -> None:
    model = ir.from_proto(_encoder(mask, is_causal))
    result = fuse_attention_to_mha(model)
    assert result.fused == 0
    assert [reason in why for why in result.refused.values()] == [True], result.refused
