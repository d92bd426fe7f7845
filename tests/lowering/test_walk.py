"""The walk lists what onnx-ir's ``RecursiveGraphIterator`` and ``Graph.subgraphs()`` list,
in the same order: nested If branches (an empty one too), a Loop body, function bodies."""

from __future__ import annotations

import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto

from onnxscript_ep_passes.lowering.walk import walk
from tests.ep.models import if_model, loop_and_nested_functions_model
from tests.harness import tensor_info

F = TensorProto.FLOAT


def _nested_if(opset: int) -> onnx.ModelProto:
    """An If whose then-branch holds another If (and an empty else-branch graph)."""
    inner_then = oh.make_graph(
        [oh.make_node("Neg", ["r"], ["a"], name="inner_neg")],
        "inner_then",
        [],
        [oh.make_tensor_value_info("a", F, None)],
    )
    inner_else = oh.make_graph(
        [oh.make_node("Relu", ["r"], ["a2"], name="inner_relu")],
        "inner_else",
        [],
        [oh.make_tensor_value_info("a2", F, None)],
    )
    outer_then = oh.make_graph(
        [
            oh.make_node(
                "If", ["C"], ["b"], then_branch=inner_then, else_branch=inner_else, name="if2"
            )
        ],
        "outer_then",
        [],
        [oh.make_tensor_value_info("b", F, None)],
    )
    outer_else = oh.make_graph([], "outer_else", [], [oh.make_tensor_value_info("r", F, None)])
    nodes = [
        oh.make_node("Relu", ["X"], ["r"], name="relu"),
        oh.make_node("If", ["C"], ["Y"], then_branch=outer_then, else_branch=outer_else),
        oh.make_node("Sigmoid", ["Y"], ["Z"], name="sigmoid"),
    ]
    graph = oh.make_graph(
        nodes,
        "g",
        [tensor_info("X", F, [2]), tensor_info("C", TensorProto.BOOL, [])],
        [oh.make_tensor_value_info("Z", F, None)],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


@pytest.mark.parametrize(
    "proto",
    [_nested_if(24), if_model(24), loop_and_nested_functions_model(24)],
    ids=["nested_if", "if", "loop_and_functions"],
)
def test_walk_lists_what_onnx_ir_iterates(proto: onnx.ModelProto) -> None:
    model = ir.from_proto(proto)
    graphs: list[ir.Graph | ir.Function] = [model.graph, *model.functions.values()]
    for graph in graphs:
        nodes, subgraphs = walk(graph)
        assert nodes == list(ir.traversal.RecursiveGraphIterator(graph))
        assert subgraphs == list(graph.subgraphs())
    assert walk(model.graph)[1]
