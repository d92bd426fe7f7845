"""What the function-body modules need of the node being lowered: eight members, no more.

:class:`BodySite` is the part of :class:`~onnxscript_ep_passes.lowering.context.DowngradeContext`
that expanding a node into its schema's function body reads (:mod:`.function_body`,
:mod:`.body_template`, :mod:`.body_cache`). Typing those modules against this protocol
instead of the context keeps the import graph one-way: the context imports the body
modules, and they import only this.
"""

from __future__ import annotations

__all__ = ["BodySite"]

from collections.abc import Sequence
from typing import NoReturn, Protocol

import onnx_ir as ir


class BodySite(Protocol):
    """The node being lowered, as the body modules see it.

    Attributes:
        node: The node being expanded.
        version: The since_version of the node's current schema.
    """

    node: ir.Node
    version: int

    def refuse(self, reason: str) -> NoReturn:
        """Give up on this node, with a reason for the user."""
        ...

    def type_of(self, value: ir.Value | None) -> ir.TypeProtocol | None:
        """The value's type as the lowering knows it (inferred where the model has none)."""
        ...

    def insert(self, node: ir.Node, opset: int, *, infer: bool = True) -> None:
        """Insert a built node before the node being lowered, read at ``opset``."""
        ...

    def insert_typed(self, nodes: Sequence[ir.Node], opset: int) -> None:
        """Insert built nodes whose outputs all have their types, in order, read at ``opset``."""
        ...

    def fresh_name(self, op_type: str) -> str:
        """A node name unused in the model."""
        ...

    def copied_body(self, template: object, nodes: Sequence[ir.Node]) -> None:
        """``nodes``, just inserted, are a copy of body template ``template`` carrying its
        recorded types: what lowering one such copy's nodes did, it does to each."""
        ...
