"""The small ONNX helpers of ``_onnx``: IR graph walking."""

from __future__ import annotations

import onnx.helper as oh
import onnx_ir as ir

from onnxscript_ep_passes._onnx import all_nodes, all_subgraphs
from tests.harness import make_model

FLOAT = 1


def _nested_model() -> ir.Model:
    """If (then: Neg, Loop(body: Identity, If(...), Identity), ReduceSum; else: Relu), then
    Abs: subgraphs three deep, and nodes after each node that holds subgraphs."""
    inner_then = oh.make_graph(
        [oh.make_node("Neg", ["x"], ["t2"], name="inner_neg")],
        "inner_then",
        [],
        [oh.make_tensor_value_info("t2", FLOAT, [2])],
    )
    inner_else = oh.make_graph(
        [oh.make_node("Abs", ["x"], ["e2"], name="inner_abs")],
        "inner_else",
        [],
        [oh.make_tensor_value_info("e2", FLOAT, [2])],
    )
    body = oh.make_graph(
        [
            oh.make_node("Identity", ["cond_in"], ["cond_out"], name="body_id"),
            oh.make_node(
                "If",
                ["cond_in"],
                ["b"],
                name="inner_if",
                then_branch=inner_then,
                else_branch=inner_else,
            ),
            oh.make_node("Identity", ["b"], ["scan_out"], name="body_after"),
        ],
        "body",
        [
            oh.make_tensor_value_info("iter", 7, []),
            oh.make_tensor_value_info("cond_in", 9, []),
        ],
        [
            oh.make_tensor_value_info("cond_out", 9, []),
            oh.make_tensor_value_info("scan_out", FLOAT, [2]),
        ],
    )
    then_branch = oh.make_graph(
        [
            oh.make_node("Neg", ["x"], ["n"], name="then_neg"),
            oh.make_node("Loop", ["trip", "c"], ["scan"], name="loop", body=body),
            oh.make_node("ReduceSum", ["scan"], ["t"], name="then_sum", keepdims=0),
        ],
        "then",
        [],
        [oh.make_tensor_value_info("t", FLOAT, [2])],
    )
    else_branch = oh.make_graph(
        [oh.make_node("Relu", ["x"], ["e"], name="else_relu")],
        "else",
        [],
        [oh.make_tensor_value_info("e", FLOAT, [2])],
    )
    return ir.from_proto(
        make_model(
            [
                oh.make_node(
                    "If", ["c"], ["i"], name="if", then_branch=then_branch, else_branch=else_branch
                ),
                oh.make_node("Abs", ["i"], ["y"], name="abs"),
            ],
            [
                oh.make_tensor_value_info("x", FLOAT, [2]),
                oh.make_tensor_value_info("c", 9, []),
                oh.make_tensor_value_info("trip", 7, []),
            ],
            [oh.make_tensor_value_info("y", FLOAT, [2])],
            21,
        )
    )


def test_all_nodes_lists_what_the_recursive_iterator_yields_in_its_order() -> None:
    model = _nested_model()
    expected = list(ir.traversal.RecursiveGraphIterator(model.graph))
    found = all_nodes(model.graph)
    assert [n.name for n in found] == [n.name for n in expected]
    assert all(a is b for a, b in zip(found, expected, strict=True))
    assert len(found) == 11  # every depth walked


def test_all_subgraphs_lists_what_graph_subgraphs_yields_in_its_order() -> None:
    model = _nested_model()
    expected = list(model.graph.subgraphs())
    found = all_subgraphs(model.graph)
    assert [g.name for g in found] == [g.name for g in expected]
    assert all(a is b for a, b in zip(found, expected, strict=True))
    assert len(found) == 5
