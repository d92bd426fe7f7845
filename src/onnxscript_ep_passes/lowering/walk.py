"""Walking a graph's nodes and subgraphs in onnx-ir's order, without a generator per node.

:func:`walk` lists a graph's nodes in onnx-ir's ``RecursiveGraphIterator`` order (each
node, then the nodes of its subgraphs, depth first) and its subgraphs in
``Graph.subgraphs()`` order. It reads a node's attribute dict directly and enters only
GRAPH/GRAPHS attributes (reference attributes hold no graph), so a model of 200k nodes
is walked several times faster than through the iterator.
"""

from __future__ import annotations

__all__ = ["walk"]

from collections.abc import Iterable

import onnx_ir as ir

_GRAPH = ir.AttributeType.GRAPH
_GRAPHS = ir.AttributeType.GRAPHS


def walk(graph: ir.Graph | ir.Function) -> tuple[list[ir.Node], list[ir.Graph]]:
    """Every node of ``graph`` and its subgraphs, and every subgraph, in traversal order."""
    nodes: list[ir.Node] = []
    subgraphs: list[ir.Graph] = []
    _walk(graph, nodes, subgraphs)
    return nodes, list(dict.fromkeys(subgraphs))


def _walk(graph: Iterable[ir.Node], nodes: list[ir.Node], subgraphs: list[ir.Graph]) -> None:
    for node in graph:
        nodes.append(node)
        for attr in node.attributes.data.values():
            kind = attr.type
            if (kind is not _GRAPH and kind is not _GRAPHS) or attr.is_ref():
                continue
            for sub in attr.value if kind is _GRAPHS else (attr.value,):
                subgraphs.append(sub)
                _walk(sub, nodes, subgraphs)
