"""Walking ONNX protos (``onnx.GraphProto``) into their subgraphs."""

from __future__ import annotations

__all__ = ["iter_graphs", "iter_nodes"]

from collections.abc import Iterator

import onnx


def iter_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every subgraph of its nodes' attributes, at any depth."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from iter_graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from iter_graphs(sub)


def iter_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``graph`` and of its subgraphs."""
    for sub in iter_graphs(graph):
        yield from sub.node
