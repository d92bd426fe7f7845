"""fusion.shape_dims: a dim read where the graph already has it, equal to the real size.

A hand-built attention input path as torch.onnx writes it: ``x`` reshaped to heads by a
``Concat`` of ``Shape`` slices (``allowzero=1``), transposed to BHSD, a partial slice of the
head dim, a ``Concat`` back along it. :func:`dim_of` returns the sequence and batch slices
themselves (no new node); a dim it cannot prove (the Concat's own axis, a Reshape with
``allowzero=0``) gets a ``Shape`` node; every returned value equals the real size on ORT.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as common_passes
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxscript_ep_passes.fusion.evaluate import run_model
from onnxscript_ep_passes.fusion.shape_dims import dim_of


def _graph(allowzero: int) -> ir.Model:
    inits = [
        numpy_helper.from_array(np.array([2], np.int64), "heads"),
        numpy_helper.from_array(np.array([4], np.int64), "size"),
        numpy_helper.from_array(np.array([0], np.int64), "start"),
        numpy_helper.from_array(np.array([2], np.int64), "end"),
        numpy_helper.from_array(np.array([-1], np.int64), "last"),
    ]
    nodes = [
        helper.make_node("Shape", ["mask"], ["d0"], start=0, end=1),
        helper.make_node("Shape", ["mask"], ["d1"], start=1, end=2),
        helper.make_node("Concat", ["d0", "d1", "heads", "size"], ["bshd"], axis=0),
        helper.make_node("Reshape", ["x", "bshd"], ["r"], allowzero=allowzero),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),
        helper.make_node("Slice", ["t", "start", "end", "last"], ["half"]),
        helper.make_node("Concat", ["half", "half"], ["q"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "heads",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 8]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, ["b", "s"]),
        ],
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, ["b", 2, "s", 4])],
        initializer=inits,
    )
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)]))
    common_passes.ShapeInferencePass()(model)
    return model


@pytest.mark.parametrize("allowzero", [1, 0])
def test_dims_are_read_where_the_graph_has_them_and_equal_the_sizes(allowzero: int) -> None:
    model = _graph(allowzero)
    q = model.graph.outputs[0]
    added: list[ir.Node] = []

    def add(op: str, inputs: list[ir.Value], **attrs: object) -> ir.Value:
        added.append(ir.node(op, inputs, attributes=attrs))  # type: ignore[arg-type]
        return added[-1].outputs[0]

    dims = [dim_of(q, axis, add) for axis in range(4)]
    names = [d.name for d in dims]
    if allowzero:  # batch and sequence are the mask's slices; heads from a Shape of r
        assert names[0] == "d0" and names[2] == "d1", names
        assert [(n.inputs[0].name, n.attributes["start"].value) for n in added] == [
            ("r", 2),
            ("q", 3),  # the Concat's own axis
        ]
    else:  # allowzero=0: a 0 piece would copy a dim, so r's dims are read by Shape
        assert [n.inputs[0].name for n in added] == ["r", "r", "r", "q"]
    model.graph.extend(added)
    for i, value in enumerate(dims):
        out = ir.node("Identity", [value], name=f"out{i}").outputs[0]
        out.name, out.dtype = f"dim{i}", ir.DataType.INT64
        model.graph.append(out.producer())  # type: ignore[arg-type]
        model.graph.outputs.append(out)
    feeds = {"x": np.zeros((3, 5, 8), np.float32), "mask": np.ones((3, 5), np.int64)}
    got = run_model(ir.to_proto(model), feeds)[1:]
    assert [int(g[0]) for g in got] == [3, 2, 5, 4]
