"""What one lowering run visits, and which of the model's types and shapes it reads.

Rules:

* The scopes (:func:`scopes`) are the main graph and each model-local function whose
  ai.onnx opset is above the target. :func:`visits` lists, scope by scope and in
  :func:`walk` order (:func:`onnxscript_ep_passes.core.onnx_utils.walk`, shared with the EP search:
  onnx-ir's ``RecursiveGraphIterator`` order without a generator per node), only the
  default-domain nodes a step may apply to (:func:`stepping_nodes`): those whose schema
  at their opset is newer than the target, and those with no schema (carried or refused
  by the pass). Any other node is at the target already; the pass would look it up and
  leave it alone. :func:`may_carry_versions` tells the relabelling whether the main graph
  can hold a per-node version after the run; when not, it is not walked again.
* :func:`prepared_values` names the values whose types the steps read from the model as
  it is before the first change. A type rule reads only its node's types. A hand-written
  adapter (and every node it builds) may read its node's inputs' shapes too: the pass
  lends them from inference, unless the adapter is registered with ``lend_shapes=False``
  (it reads no shape and builds no node; the pass checks the latter). A value an adapter
  builds is typed by per-node inference; one that replaces a node's output takes the old
  value's type and shape when it has none, so a later node's rewired input is known
  exactly when the old value was. Only for these values can the model-wide inference
  change what an adapter sees, so it runs only when one of them lacks what its readers
  need (:meth:`.TypeOracle.prepare`). Within :func:`every_shape_asked` every value of a
  stepping node counts as read with its shape and every hand-written adapter is lent
  shapes (the rules before these, which inferred more often): tests compare the two.
"""

from __future__ import annotations

__all__ = [
    "Scope",
    "asks_every_shape",
    "every_shape_asked",
    "may_carry_versions",
    "prepared_values",
    "scopes",
    "stepping_nodes",
    "visits",
    "walk",
]

import contextlib
import dataclasses
from collections.abc import Iterable, Iterator, Sequence

import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import walk
from onnxscript_ep_passes.lowering import schemas
from onnxscript_ep_passes.lowering.opset_imports import default_opset
from onnxscript_ep_passes.lowering.registry import AdapterRegistry

_GRAPH = ir.AttributeType.GRAPH
_GRAPHS = ir.AttributeType.GRAPHS
_every_shape = [False]


@dataclasses.dataclass
class Scope:
    """A graph or function lowered from its own ai.onnx opset; ``label`` names it."""

    graph: ir.Graph | ir.Function
    opset: int
    label: str


def scopes(model: ir.Model, target: int) -> list[Scope]:
    """The main graph and the functions whose ai.onnx opset is above ``target``."""
    found = []
    main = default_opset(model.opset_imports)
    if main is not None and main > target:
        found.append(Scope(model.graph, main, f"graph '{model.graph.name}'"))
    for function in model.functions.values():
        opset = default_opset(function.opset_imports)
        if opset is not None and opset > target:
            label = f"function '{function.domain}::{function.name}'"
            found.append(Scope(function, opset, label))
    return found


def visits(
    model: ir.Model, target: int
) -> tuple[list[tuple[ir.Node, int, str]], list[ir.Graph], bool]:
    """The nodes a step may apply to, each with its opset and scope label, in order; the
    main graph's subgraphs; whether a node of the main graph (or of its subgraphs)
    carries a per-node version."""
    main_nodes, subgraphs = walk(model.graph)
    found = [
        (node, opset, scope.label)
        for scope in scopes(model, target)
        for node, opset in stepping_nodes(
            main_nodes if scope.graph is model.graph else walk(scope.graph)[0],
            scope.opset,
            target,
        )
    ]
    return found, subgraphs, any(node.version is not None for node in main_nodes)


def may_carry_versions(
    versioned: bool, built: Iterable[ir.Node], plain: Iterable[ir.Node] = ()
) -> bool:
    """Whether, after a run, a node of the main graph may carry a per-node version: one
    did before it (``versioned``, from :func:`visits`), or a node it built does or holds
    a subgraph. Adapters change no other node's version (:mod:`.lower_opset`, rule 4).

    ``plain``: built nodes known to carry no version and hold no subgraph (the exact body
    copies lowering leaves as built, :mod:`.lower_opset` rule 2); they are not read.
    """
    if versioned:
        return True
    rest = set(built).difference(plain)
    return any(
        node.version is not None
        or any(a.type is _GRAPH or a.type is _GRAPHS for a in node.attributes.data.values())
        for node in rest
    )


@contextlib.contextmanager
def every_shape_asked() -> Iterator[None]:
    """Within the block, every value of a stepping node needs a type and a shape."""
    previous, _every_shape[0] = _every_shape[0], True
    try:
        yield
    finally:
        _every_shape[0] = previous


def stepping_nodes(nodes: Iterable[ir.Node], opset: int, target: int) -> list[tuple[ir.Node, int]]:
    """The default-domain nodes a step may apply to, each with the opset it is read at."""
    kept = []
    for node in nodes:
        if not schemas.is_default_domain(node.domain):
            continue
        version = node.version if node.version is not None else opset
        start = schemas.since_version(node.op_type, version, node.domain)
        if start is None or start > target:
            kept.append((node, version))
    return kept


def prepared_values(
    work: Sequence[tuple[ir.Node, int, str]], target: int, registry: AdapterRegistry
) -> tuple[list[ir.Value], list[ir.Value]]:
    """The values whose types (first list), or types and shapes (second), the steps read."""
    typed: list[ir.Value] = []
    shaped: list[ir.Value] = []
    lends: dict[tuple[str, str, int], bool] = {}
    for node, opset, _ in work:
        start = schemas.since_version(node.op_type, opset, node.domain)
        if start is None or start <= target:
            continue
        key = (node.domain, node.op_type, start)
        if key not in lends:
            lends[key] = _every_shape[0] or _lends_shapes(*key, target, registry)
        inputs = (v for v in node.inputs if v is not None and v.name)
        (shaped if lends[key] else typed).extend(inputs)
        outputs = (v for v in node.outputs if v.name)  # not an omitted optional output
        (shaped if _every_shape[0] else typed).extend(outputs)
    return typed, shaped


def asks_every_shape() -> bool:
    """Whether :func:`every_shape_asked` is in force (the pass then lends every adapter)."""
    return _every_shape[0]


def _lends_shapes(
    domain: str, op_type: str, start: int, target: int, registry: AdapterRegistry
) -> bool:
    """Whether a step from ``start`` down to ``target`` lends its node's inputs shapes."""
    version: int | None = start
    while version is not None and version > target:
        entry = registry.lookup(domain, op_type, version)
        if entry is None or entry.lend_shapes:
            return True
        version = schemas.since_version(op_type, version - 1, domain)
    return False
