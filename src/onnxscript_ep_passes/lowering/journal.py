"""The undo journal of a lowering: every change to the model, undone in reverse on refusal.

Rules: adapters change only their node's attributes and inputs (snapshotted before the
adapter runs) and build new nodes through the context (recorded as built); rewiring
records its own undo. :meth:`Journal.rollback` replays the undo actions newest first,
which leaves the model exactly as it was.
"""

from __future__ import annotations

__all__ = ["Journal", "discard"]

from collections.abc import Callable, Sequence

import onnx_ir as ir


def discard(nodes: Sequence[ir.Node]) -> None:
    """Remove built ``nodes`` from their graphs, newest first, detached from their inputs
    (a removed node left among a value's uses would be seen by later passes)."""
    for node in reversed(nodes):
        for index in range(len(node.inputs)):
            node.replace_input_with(index, None)
        if node.graph is not None:
            node.graph.remove(node, safe=False)


class Journal:
    """Undo actions for every change made to the model, replayed in reverse on refusal."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def record(self, undo: Callable[[], None]) -> None:
        self._undo.append(undo)

    def snapshot_node(self, node: ir.Node) -> Callable[[], bool]:
        """Record how to restore ``node``; return a test of whether it changed since."""
        attributes = dict(node.attributes)
        inputs = tuple(node.inputs)

        def restore() -> None:
            node.attributes.clear()
            node.attributes.update(attributes)
            node.resize_inputs(len(inputs))
            for index, value in enumerate(inputs):
                node.replace_input_with(index, value)

        self.record(restore)
        return lambda: dict(node.attributes) != attributes or tuple(node.inputs) != inputs

    def built(self, nodes: Sequence[ir.Node]) -> None:
        self.record(lambda: discard(nodes))

    def rollback(self) -> None:
        while self._undo:
            self._undo.pop()()
