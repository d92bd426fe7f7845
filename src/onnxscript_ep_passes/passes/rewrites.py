"""The rewrites legalization makes to a node, and the replay of those it kept.

Rules:

1. A node is rewritten one of two ways (:mod:`.legalize`, rules 2, 3 and 5): one whose
   ai.onnx schema has no function body is widened (run in another type between exact
   Casts, :mod:`.widen_bool`); any other is expanded in place through its body
   (:func:`~onnxscript_ep_passes.lowering.expansion.expand_node`), whose static shape math
   is then folded (:mod:`.static_shapes`). A rewrite that is refused changes nothing.
2. :class:`KeptRewrites` records each rewrite a legalization keeps, in order, as the way
   to find its node again in another copy of the model (:class:`Rewrite`): by its place
   in the model's walk once the built nodes' shape math is folded (the model as the
   first trial found it: a trial not kept is undone), or, for a node a kept rewrite
   built, by its place among the nodes the kept rewrites built, in order.
3. :func:`replay_rewrites` makes those edits again on another copy of the model as it
   was legalized, without predicting anything: the same folding, then the same rewrites
   in the same order, their names drawn the same way, make the same model
   (tests/passes/test_candidates.py compares the two).
"""

from __future__ import annotations

__all__ = ["KeptRewrites", "Rewrite", "replay_rewrites", "rewrite_node", "rewrite_nodes", "widens"]

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from typing import Literal

import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import walk
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.lowering.context import NameIndex, NodeRefusedError
from onnxscript_ep_passes.lowering.expansion import expand_node, function_body_version
from onnxscript_ep_passes.passes.static_shapes import fold_static_shapes
from onnxscript_ep_passes.passes.widen_bool import widen_node

logger = logging.getLogger(__name__)


def widens(node: ir.Node, opset: int) -> bool:
    """Whether ``node`` is rewritten by widening, not by expansion (rule 1)."""
    return function_body_version(node.op_type, opset, node.domain) is None


def rewrite_node(
    node: ir.Node, model: ir.Model, opset: int, table: KernelTable, index: NameIndex
) -> list[ir.Node]:
    """Rewrite ``node`` (rule 1); the nodes built (before folding). Body nodes of the
    main graph are named from ``index``.

    Raises:
        NodeRefusedError: the node cannot be rewritten; the model is unchanged.
    """
    if widens(node, opset):
        return widen_node(node, table, opset)
    names = index.names() if node.graph is index.graph else None
    built = expand_node(model, node, opset, names=names)
    index.add(built)
    fold_static_shapes(built, opset)
    return built


def rewrite_nodes(
    nodes: Sequence[ir.Node], model: ir.Model, opset: int, table: KernelTable, index: NameIndex
) -> tuple[dict[ir.Node, list[ir.Node]], dict[ir.Node, str]]:
    """:func:`rewrite_node` on each of ``nodes``: the nodes each rewrite built, and why
    each refused one was refused."""
    built: dict[ir.Node, list[ir.Node]] = {}
    failed: dict[ir.Node, str] = {}
    for node in nodes:
        try:
            built[node] = rewrite_node(node, model, opset, table, index)
        except NodeRefusedError as refusal:
            logger.debug("cannot rewrite %s: %s", node.name, refusal.reason)
            failed[node] = refusal.reason
    return built, failed


@dataclasses.dataclass(frozen=True)
class Rewrite:
    """One kept rewrite's node (rule 2): ``source`` ``"model"``, the ``index``-th node of
    the model's walk (:func:`~onnxscript_ep_passes.core.onnx_utils.walk`) once folded;
    ``"built"``, the ``index``-th node the kept rewrites before it built."""

    source: Literal["model", "built"]
    index: int


class KeptRewrites:
    """The rewrites one legalization of ``model`` keeps (rule 2)."""

    def __init__(self, model: ir.Model) -> None:
        self.model = model
        self.rewrites: list[Rewrite] = []
        self._folded: dict[ir.Node, int] | None = None  # the model's walk once folded
        self._built: dict[ir.Node, int] = {}  # the nodes the kept rewrites built, in order

    def before_trial(self) -> None:
        """Called before each trial's rewrites: the first one reads the model's walk."""
        if self._folded is None:
            self._folded = {n: i for i, n in enumerate(walk(self.model.graph)[0])}

    def keep(self, node: ir.Node, built: Iterable[ir.Node]) -> None:
        """Record the kept rewrite of ``node``, which built ``built``."""
        if node in self._built:
            self.rewrites.append(Rewrite("built", self._built[node]))
        else:
            assert self._folded is not None, "before_trial() was not called"
            self.rewrites.append(Rewrite("model", self._folded[node]))
        for made in built:
            self._built.setdefault(made, len(self._built))


def replay_rewrites(
    model: ir.Model,
    opset: int,
    rewrites: Sequence[Rewrite],
    table: KernelTable,
    built: Iterable[ir.Node],
) -> None:
    """Make on ``model`` what a legalization at ``opset`` that kept ``rewrites`` made,
    without predicting anything (rule 3): ``model`` must be the model it legalized as it
    was then (another copy, lowered the same way), ``built`` its nodes an earlier rewrite
    built, in graph order (their shape math is folded first)."""
    fold_static_shapes(list(built), opset)
    folded = walk(model.graph)[0] if rewrites else []
    names = NameIndex(model.graph)
    made: dict[ir.Node, None] = {}  # as KeptRewrites._built
    by_place: list[ir.Node] = []
    for rewrite in rewrites:
        node = folded[rewrite.index] if rewrite.source == "model" else by_place[rewrite.index]
        for new in rewrite_node(node, model, opset, table, names):
            if new not in made:
                made[new] = None
                by_place.append(new)
