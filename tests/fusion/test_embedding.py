"""fusion.embedding: lookups by constant indices read from the float table, exact on ORT.

A hand-built BERT-style embedding (dynamic batch and sequence): word ids looked up from
``input_ids``, position ids ``position_ids[:, :S]`` sliced from a constant buffer, token-type
ids a constant buffer gathered by them and expanded to ``(B, S)`` (the shapes annotated as
torch.onnx does). After
:func:`fuse_sliced_position_gather` the position lookup is a Slice of the gathered table,
after :func:`fuse_uniform_index_gather` the token-type lookup a row added by broadcasting;
the outputs are bit-identical on ORT's CPU EP at several sizes, and neither int64 index
path is left. A token-type buffer that is not uniform, and lookups whose indices are not
constant, are left alone. (Real BERT exports on WebGPU: test_families_webgpu.)
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common_passes
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxscript_ep_passes.fusion.embedding import (
    fuse_sliced_position_gather,
    fuse_uniform_index_gather,
)
from onnxscript_ep_passes.fusion.evaluate import run_model

_H = 8


def _embeddings(token_types: np.ndarray) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    f32 = np.float32
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, _H)).astype(f32), "words"),
        numpy_helper.from_array(rng.standard_normal((32, _H)).astype(f32), "positions"),
        numpy_helper.from_array(rng.standard_normal((2, _H)).astype(f32), "types"),
        numpy_helper.from_array(np.arange(32, dtype=np.int64)[None], "position_ids"),
        numpy_helper.from_array(token_types, "type_buffer"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
    ]
    nodes = [
        helper.make_node("Shape", ["input_ids"], ["seq"], start=1, end=2),
        helper.make_node("Shape", ["input_ids"], ["bs"]),
        helper.make_node("Slice", ["position_ids", "zero", "seq", "one"], ["pos"]),
        helper.make_node("GatherElements", ["type_buffer", "pos"], ["tt1"], axis=1),
        helper.make_node("Expand", ["tt1", "bs"], ["tt"]),
        helper.make_node("Gather", ["words", "input_ids"], ["w"]),
        helper.make_node("Gather", ["types", "tt"], ["t"]),
        helper.make_node("Add", ["w", "t"], ["wt"]),
        helper.make_node("Gather", ["positions", "pos"], ["p"]),
        helper.make_node("Add", ["wt", "p"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "embeddings",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", _H])],
        initializer=inits,
        value_info=[  # as torch.onnx annotates them (shape inference cannot see through Expand)
            helper.make_tensor_value_info("tt", TensorProto.INT64, ["b", "s"]),
            *(helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", "s", _H]) for n in "wt"),
            helper.make_tensor_value_info("wt", TensorProto.FLOAT, ["b", "s", _H]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _fused(proto: onnx.ModelProto) -> tuple[int, int, onnx.ModelProto]:
    model = ir.from_proto(proto)
    common_passes.ShapeInferencePass()(model)
    sliced = fuse_sliced_position_gather(model)
    uniform = fuse_uniform_index_gather(model)
    return sliced, uniform, ir.to_proto(model)


def test_constant_index_lookups_become_float_ops_with_identical_outputs() -> None:
    proto = _embeddings(np.zeros((1, 32), np.int64))
    sliced, uniform, fused = _fused(proto)
    assert (sliced, uniform) == (1, 1)
    onnx.checker.check_model(fused, full_check=True)
    ops = [n.op_type for n in fused.graph.node]
    assert "GatherElements" not in ops and "Expand" not in ops
    assert ops.count("Gather") == 1  # the word ids, read from input_ids
    slices = [n for n in fused.graph.node if n.op_type == "Slice"]
    assert len(slices) == 1 and slices[0].input[0] != "position_ids"  # of the float table
    for batch, seq in ((1, 1), (2, 7), (3, 32)):
        ids = np.random.default_rng(seq).integers(0, 16, (batch, seq)).astype(np.int64)
        np.testing.assert_array_equal(
            run_model(fused, {"input_ids": ids})[0], run_model(proto, {"input_ids": ids})[0]
        )


def test_a_token_type_buffer_of_different_values_is_left_alone() -> None:
    buffer = np.zeros((1, 32), np.int64)
    buffer[0, 5] = 1
    sliced, uniform, fused = _fused(_embeddings(buffer))
    assert (sliced, uniform) == (1, 0)
    assert "GatherElements" in {n.op_type for n in fused.graph.node}


@pytest.mark.parametrize("fuse", [fuse_sliced_position_gather, fuse_uniform_index_gather])
def test_lookups_by_computed_indices_are_left_alone(fuse: object) -> None:
    nodes = [helper.make_node("Gather", ["table", "ids"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "lookup",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "s"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", 4])],
        initializer=[numpy_helper.from_array(np.ones((3, 4), np.float32), "table")],
    )
    model = ir.from_proto(helper.make_model(graph))
    assert callable(fuse) and fuse(model) == 0
