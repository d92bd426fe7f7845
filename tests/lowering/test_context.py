"""Node names handed out while a graph is edited: :class:`NameIndex` against :class:`NodeNames`.

The index reads a graph's names once for many nodes' rewrites; every name it hands out
must be the one a :class:`NodeNames` reading the graph anew would hand out.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxscript_ep_passes.lowering.context import NameIndex, NodeNames


def _graph(names: list[str]) -> ir.Graph:
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2]))
    nodes, value = [], x
    for name in names:
        node = ir.Node("", "Relu", [value], name=name)
        node.outputs[0].name = f"{name}_out"
        nodes.append(node)
        value = node.outputs[0]
    return ir.Graph([x], [value], nodes=nodes, opset_imports={"": 23}, name="g")


def test_index_names_match_a_fresh_read_while_the_graph_changes() -> None:
    graph = _graph(["a", "a/expanded_Relu_1", "a/expanded_Relu_3"])
    index = NameIndex(graph)
    first = index.names()
    assert [first.fresh("a/expanded_Relu") for _ in range(2)] == [
        "a/expanded_Relu_2",
        "a/expanded_Relu_4",
    ]
    # A node built with a handed-out name is added: the next rewrite skips it.
    built = ir.Node("", "Relu", [graph.outputs[0]], name="a/expanded_Relu_2")
    graph.append(built)
    index.add([built])
    assert index.names().fresh("a/expanded_Relu") == NodeNames(graph).fresh("a/expanded_Relu")
    # A removed node's name is free again, as a fresh read of the graph finds.
    graph.remove(graph.node(1), safe=False)
    assert index.names().fresh("a/expanded_Relu") == "a/expanded_Relu_1"
    assert NodeNames(graph).fresh("a/expanded_Relu") == "a/expanded_Relu_1"
    assert not index.in_use("a/expanded_Relu_1")
    assert index.in_use("a/expanded_Relu_3")
