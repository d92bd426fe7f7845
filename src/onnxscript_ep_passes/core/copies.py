"""Copies of an IR model, and which node of one stands for which node of the other.

Rules:

- :func:`copy_with_origins` clones a model (weights shared, as ``ir.Model.clone`` does)
  and returns the :class:`Correspondence` from the copy's nodes and functions to the
  original's. Clones keep the structure, so nodes pair up by position: the main graph with
  its subgraphs in ``RecursiveGraphIterator`` order, then each function in order.
- :func:`align` pairs two models of the same structure that way; it raises when their
  structures differ, so a mismatch is never silently joined.
- :func:`adopt` moves another model's graph, functions and IR version into a model
  object, so an in-place pass can keep a candidate it built on a copy.

Nothing here joins by node name: names are neither unique nor stable.
"""

from __future__ import annotations

__all__ = ["Correspondence", "adopt", "align", "copy_with_origins"]

import dataclasses
from collections.abc import Iterator, Mapping

import onnx_ir as ir


@dataclasses.dataclass(frozen=True)
class Correspondence:
    """Which node and function of a model ("the original") each of another's stands for."""

    nodes: Mapping[ir.Node, ir.Node]
    functions: Mapping[ir.Function, ir.Function]


def _nodes(model: ir.Model) -> Iterator[ir.Node]:
    yield from ir.traversal.RecursiveGraphIterator(model.graph)
    for function in model.functions.values():
        yield from ir.traversal.RecursiveGraphIterator(function)


def align(copy: ir.Model, original: ir.Model) -> Correspondence:
    """Pair the nodes and functions of two models of the same structure (module docstring).

    Raises:
        ValueError: the models differ in node count, op types or functions.
    """
    if list(copy.functions) != list(original.functions):
        raise ValueError("the models hold different functions")
    mine, theirs = list(_nodes(copy)), list(_nodes(original))
    if len(mine) != len(theirs):
        raise ValueError(f"the models differ: {len(mine)} nodes against {len(theirs)}")
    for a, b in zip(mine, theirs):
        if (a.domain, a.op_type) != (b.domain, b.op_type):
            raise ValueError(
                f"the models differ: {a.op_type} '{a.name}' against {b.op_type} '{b.name}'"
            )
    functions = {function: original.functions[key] for key, function in copy.functions.items()}
    return Correspondence(dict(zip(mine, theirs)), functions)


def copy_with_origins(model: ir.Model) -> tuple[ir.Model, Correspondence]:
    """A copy of ``model`` and the correspondence from the copy to ``model``."""
    copy = model.clone()
    return copy, align(copy, model)


def adopt(model: ir.Model, other: ir.Model) -> None:
    """Make ``model`` hold ``other``'s graph, functions and IR version (``other`` is spent)."""
    model.graph = other.graph
    model.functions.clear()
    model.functions.update(other.functions)
    model.ir_version = other.ir_version
