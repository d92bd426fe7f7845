"""fusion.positions: int64 position ids and token lookups moved to int32 / float, exact on ORT.

Hand-built decoder pieces with dynamic batch and sequence, as torch.onnx writes them:
position ids ``arange(0, S)`` (``Range`` of ``Squeeze(Shape(mask)[1:2])``) unsqueezed, then
looked up in a learned table (GPT-2) and cast to float (rotary, StableLM); token ids
reshaped ``input_ids.view(-1, S)`` before the word lookup. After each rewrite the outputs
are bit-identical on ORT's CPU EP at several sizes and the int64 Range / Reshape is gone;
a Reshape that fails before fails after; position ids that feed int64 arithmetic or a
graph output, and Ranges not from 0 by 1, are refused with the reason. (Real GPT-2 and
StableLM exports on WebGPU: test_families_webgpu.)
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common_passes
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.fusion.evaluate import run_model
from onnxscript_ep_passes.fusion.fuse_for_ep import EMBEDDING_FUSIONS, FuseForEpPass
from onnxscript_ep_passes.fusion.positions import (
    fuse_gather_before_reshape,
    fuse_int32_positions,
)

_H = 4
_INT = TensorProto.INT64


_TYPES = {"learned": TensorProto.FLOAT, "rotary": TensorProto.FLOAT, "words": TensorProto.FLOAT}


def _model(nodes: list[onnx.NodeProto], outputs: list[str]) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, _H)).astype(np.float32), "table"),
        numpy_helper.from_array(rng.standard_normal((32, _H)).astype(np.float32), "positions"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["attention_mask"], ["seq"], start=1, end=2),
            helper.make_node("Squeeze", ["seq"], ["n"]),
            *nodes,
        ],
        "decoder_piece",
        [
            helper.make_tensor_value_info("input_ids", _INT, ["b", "s"]),
            helper.make_tensor_value_info("attention_mask", _INT, ["b", "s"]),
        ],
        [helper.make_tensor_value_info(o, _TYPES.get(o, _INT), None) for o in outputs],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])


_POSITIONS = [
    helper.make_node("Range", ["zero", "n", "one"], ["arange"]),
    helper.make_node("Unsqueeze", ["arange", "axis0"], ["ids"]),
    helper.make_node("Gather", ["positions", "ids"], ["learned"]),
    helper.make_node("Cast", ["ids"], ["rotary"], to=TensorProto.FLOAT),
]


def _feeds(batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seq)
    return {
        "input_ids": rng.integers(0, 16, (batch, seq)).astype(np.int64),
        "attention_mask": np.ones((batch, seq), np.int64),
    }


def _apply(proto: onnx.ModelProto, fuse: object) -> tuple[int, dict[str, str], onnx.ModelProto]:
    model = ir.from_proto(proto)
    common_passes.ShapeInferencePass()(model)
    assert callable(fuse)
    count, refused = fuse(model)
    return count, refused, ir.to_proto(model)


def test_position_ids_become_int32_with_identical_outputs() -> None:
    proto = _model(_POSITIONS, ["learned", "rotary"])
    count, refused, fused = _apply(proto, fuse_int32_positions)
    assert count == 1 and not refused
    onnx.checker.check_model(fused, full_check=True)
    ranges = [n for n in fused.graph.node if n.op_type == "Range"]
    assert len(ranges) == 1 and ranges[0].input[0] != "zero"  # the int32 zero
    inferred = onnx.shape_inference.infer_shapes(fused)
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    assert types[ranges[0].output[0]] == TensorProto.INT32 and types["ids"] == TensorProto.INT32
    for batch, seq in ((1, 1), (2, 7), (3, 32)):
        for got, want in zip(
            run_model(fused, _feeds(batch, seq)), run_model(proto, _feeds(batch, seq))
        ):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("nodes", "outputs", "why"),
    [
        (  # int64 arithmetic on the ids: it would need them in int64
            [
                helper.make_node("Range", ["zero", "n", "one"], ["arange"]),
                helper.make_node("Add", ["arange", "one"], ["shifted"]),
            ],
            ["shifted"],
            "reads the ids as int64",
        ),
        (
            [helper.make_node("Range", ["zero", "n", "one"], ["arange"])],
            ["arange"],
            "graph output",
        ),
        (
            [
                helper.make_node("Range", ["one", "n", "one"], ["arange"]),
                helper.make_node("Cast", ["arange"], ["rotary"], to=TensorProto.FLOAT),
            ],
            ["rotary"],
            "start is not the constant 0",
        ),
        (  # the end is not a dim: it could be negative
            [
                helper.make_node("Squeeze", ["one"], ["m"]),
                helper.make_node("Range", ["zero", "m", "one"], ["arange"]),
                helper.make_node("Cast", ["arange"], ["rotary"], to=TensorProto.FLOAT),
            ],
            ["rotary"],
            "the end is not a dimension",
        ),
    ],
)
def test_position_ids_that_must_stay_int64_are_refused(
    nodes: list[onnx.NodeProto], outputs: list[str], why: str
) -> None:
    count, refused, fused = _apply(_model(nodes, outputs), fuse_int32_positions)
    assert count == 0 and len(refused) == 1
    assert why in next(iter(refused.values())), refused
    assert [n.op_type for n in fused.graph.node if n.op_type == "Range"] == ["Range"]


def _token_lookup(shape_nodes: list[onnx.NodeProto], allowzero: int) -> onnx.ModelProto:
    nodes = [
        *shape_nodes,
        helper.make_node("Reshape", ["input_ids", "view_shape"], ["view"], allowzero=allowzero),
        helper.make_node("Gather", ["table", "view"], ["words"]),
    ]
    return _model(nodes, ["words"])


_VIEW = [helper.make_node("Concat", ["minus1", "seq"], ["view_shape"], axis=0)]


def test_token_lookup_gathers_before_the_reshape_with_identical_outputs() -> None:
    proto = _token_lookup(_VIEW, allowzero=1)
    count, refused, fused = _apply(proto, fuse_gather_before_reshape)
    assert count == 1 and not refused
    onnx.checker.check_model(fused, full_check=True)
    gathers = [n for n in fused.graph.node if n.op_type == "Gather"]
    assert len(gathers) == 1 and gathers[0].input[1] == "input_ids"
    assert len([n for n in fused.graph.node if n.op_type == "Concat"]) == 1  # grown, not added
    for batch, seq in ((1, 1), (2, 7), (3, 32)):
        np.testing.assert_array_equal(
            run_model(fused, _feeds(batch, seq))[0], run_model(proto, _feeds(batch, seq))[0]
        )


def test_a_reshape_that_fails_still_fails_after_the_rewrite() -> None:
    shape = [numpy_helper.from_array(np.array([3, -1], np.int64), "fixed")]
    nodes = [helper.make_node("Identity", ["fixed"], ["view_shape"])]
    proto = _token_lookup(nodes, allowzero=0)
    proto.graph.initializer.extend(shape)
    count, _, fused = _apply(proto, fuse_gather_before_reshape)
    assert count == 1
    np.testing.assert_array_equal(  # 6 ids: (3, 2)
        run_model(fused, _feeds(2, 3))[0], run_model(proto, _feeds(2, 3))[0]
    )
    for model in (proto, fused):  # 4 ids do not make 3 rows
        with pytest.raises(Exception, match=r"(?i)reshape"):
            run_model(model, _feeds(2, 2))


def test_a_reshape_whose_zeros_may_copy_a_table_dim_is_refused() -> None:
    shape = [numpy_helper.from_array(np.array([0, -1, 1], np.int64), "fixed")]
    nodes = [helper.make_node("Identity", ["fixed"], ["view_shape"])]
    proto = _token_lookup(nodes, allowzero=0)
    proto.graph.initializer.extend(shape)
    count, refused, _ = _apply(proto, fuse_gather_before_reshape)
    assert count == 0 and "allowzero=0" in next(iter(refused.values())), refused


@pytest.mark.parametrize("types", [["tensor(int32)"], ["tensor(float)"]])
def test_the_int32_rewrite_is_gated_by_the_eps_int32_range_kernel(types: list[str]) -> None:
    rows = [("", op, 13, None, None) for op in ("Shape", "Squeeze", "Unsqueeze", "Gather")]
    rows += [("", "Cast", 21, None, None), ("", "Range", 11, None, {"T": types})]
    table = KernelTable.from_rows("WebGpuExecutionProvider", "0.0", "test", rows)
    spec = next(f for f in EMBEDDING_FUSIONS if f.pattern == "int32_positions")
    fusing = FuseForEpPass("webgpu", table=table, fusions=(spec,), check_ep=False)
    (record,) = fusing(ir.from_proto(_model(_POSITIONS, ["learned", "rotary"]))).records
    if types == ["tensor(int32)"]:
        assert record.kept and record.count == 1, record.summary()
        assert "Range 11+" in (record.kernel or "")
    else:
        assert not record.kept and record.count == 0
        assert "tensor(int32) not supported" in (record.reason or ""), record.reason
