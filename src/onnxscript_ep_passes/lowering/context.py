"""What an adapter sees: the node, the step it undoes, and a builder for new nodes.

Nodes built with :meth:`DowngradeContext.op` are inserted just before the node being
lowered, in the same graph, and are read at opset ``ctx.opset`` (the version just below
the step); the pass lowers them further when the target is lower still. Their output
types are inferred node by node, so later type rules can check them (what inference
gives is kept per node signature, :mod:`.node_types`).
"""

from __future__ import annotations

__all__ = [
    "DowngradeContext",
    "NameIndex",
    "NodeNames",
    "NodeRefusedError",
    "types_refused_below",
]

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn

import numpy as np
import onnx
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import walk
from onnxscript_ep_passes.lowering import schemas
from onnxscript_ep_passes.lowering.function_body import expand_function_body
from onnxscript_ep_passes.lowering.node_types import infer_node_output_types
from onnxscript_ep_passes.lowering.types import TypeOracle


class NodeRefusedError(Exception):
    """Raised by :meth:`DowngradeContext.refuse`; collected into a DowngradeError."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NodeNames:
    """Hands out node names unused in a model (ORT refuses two nodes with one name).

    Hand-written rather than onnx-ir's ``NameAuthority``/``NameFixPass``: the names say
    which node a rewrite came from (``<node>/lowered_<op>_<n>``), they are unique across
    the whole model (subgraphs and functions included, where ``NameAuthority`` counts
    per graph), and the set of names in use is read only when a first name is needed.
    """

    def __init__(
        self,
        model_or_graph: ir.Model | ir.Graph | ir.Function | None = None,
        index: NameIndex | None = None,
    ) -> None:
        self._source = model_or_graph
        self._used: set[str] | None = None  # read on the first fresh(): most runs need none
        self._next: dict[str, int] = {}
        self._index = index  # given: the names in use are looked up there, not read

    def _names_in_use(self) -> set[str]:
        if self._used is None:
            self._used = set()
            if self._index is not None:
                return self._used  # only the names handed out here; the rest: the index
            source = self._source
            graphs: list[ir.Graph | ir.Function] = []
            if isinstance(source, ir.Model):
                graphs = [source.graph, *source.functions.values()]
            elif source is not None:
                graphs = [source]
            for graph in graphs:
                self._used.update(
                    n.name for n in ir.traversal.RecursiveGraphIterator(graph) if n.name
                )
        return self._used

    def fresh(self, base: str) -> str:
        used = self._used
        if used is None:
            used = self._names_in_use()
        count = self._next.get(base, 0) + 1
        name = f"{base}_{count}"
        index = self._index
        while name in used or (index is not None and index.in_use(name)):
            count += 1
            name = f"{base}_{count}"
        self._next[base] = count
        used.add(name)
        return name


class NameIndex:
    """The names of a graph's nodes (subgraphs included), read once, for many
    :class:`NodeNames` in turn (one per node expanded in place).

    :class:`NodeNames` of a graph reads every name in it on its first ``fresh()``: done
    once per node expanded, that is quadratic in the nodes. The index reads them once and
    keeps, per name, the nodes that bore it; a name is in use while one of them is in a
    graph. So it stays right while the graph is edited, as long as every node built with
    a name of the pattern ``fresh()`` hands out is :meth:`add`-ed (a node put back by a
    checkpoint is the same object; a node removed has no graph). A node inside a subgraph
    of a removed node still has a graph: its name stays in use (never a duplicate).
    """

    def __init__(self, graph: ir.Graph) -> None:
        self.graph = graph
        self._nodes: dict[str, list[ir.Node]] | None = None  # read on the first look-up

    def add(self, nodes: Iterable[ir.Node]) -> None:
        """Index ``nodes`` (and the nodes of their subgraphs) by name. Before the first
        look-up nothing is kept: the graph is read then, with the nodes still in it."""
        index = self._nodes
        if index is None:
            return
        for node in walk(nodes)[0]:
            if node.name:
                index.setdefault(node.name, []).append(node)

    def in_use(self, name: str) -> bool:
        if self._nodes is None:
            self._nodes = {}
            self.add(self.graph)
        return any(node.graph is not None for node in self._nodes.get(name, ()))

    def names(self) -> NodeNames:
        """Fresh names for one node's rewrite (counters from 1, as a new :class:`NodeNames`)."""
        return NodeNames(self.graph, self)


class DowngradeContext:
    """The node being stepped down from schema ``version`` to schema ``previous``.

    Attributes:
        node: The node. Adapters may edit its attributes in place and return None.
        version: The since_version of the node's current schema (the step undone).
        previous: The since_version of the schema below, or None for a new operator.
        opset: The opset the replacement is expressed in (``version - 1``).
        target_opset: The opset the whole model goes to.
    """

    def __init__(
        self,
        node: ir.Node,
        version: int,
        previous: int | None,
        target_opset: int,
        oracle: TypeOracle,
        names: NodeNames | None = None,
    ) -> None:
        self.node = node
        self.version = version
        self.previous = previous
        self.opset = version - 1
        self.target_opset = target_opset
        self._oracle = oracle
        # Nodes built so far, each with the opset it is read at; the pass lowers them next.
        self.built: list[tuple[ir.Node, int]] = []
        # The runs of ``built`` that copy a body template with its types (copied_body).
        self.copies: list[tuple[object, list[ir.Node]]] = []
        self._names = names if names is not None else NodeNames(node.graph)

    # -- reading the node -------------------------------------------------------------

    def refuse(self, reason: str) -> NoReturn:
        """Give up on this node: no exact equivalent exists below this step."""
        raise NodeRefusedError(reason)

    def type_of(self, value: ir.Value | None) -> ir.TypeProtocol | None:
        return None if value is None else self._oracle.type_of(value)

    def dtype_of(self, value: ir.Value | None) -> ir.DataType | None:
        type_ = self.type_of(value)
        return type_.dtype if isinstance(type_, ir.TensorType) else None

    def require_dtype(self, value: ir.Value | None, what: str) -> ir.DataType:
        """The element type of ``value``; refuses when it cannot be known."""
        dtype = self.dtype_of(value)
        if dtype is None:
            name = value.name if value is not None else "?"
            self.refuse(f"the type of {what} '{name}' is unknown, even after shape inference")
        return dtype

    def attribute(self, name: str, default: Any = None) -> Any:
        """The node's attribute value, or ``default`` when it is not set."""
        attr = self.node.attributes.get(name)
        return default if attr is None else attr.value

    def input(self, index: int) -> ir.Value | None:
        inputs = self.node.inputs
        return inputs[index] if index < len(inputs) else None

    def require_types_allowed_below(self) -> None:
        """Refuse unless every tensor type of the node is allowed by the older schema."""
        reason = types_refused_below(self.node, self.version, self.previous, self.type_of)
        if reason is not None:
            self.refuse(reason)

    # -- building ---------------------------------------------------------------------

    def op(
        self,
        op_type: str,
        inputs: Sequence[ir.Value | None],
        *,
        domain: str = "",
        num_outputs: int = 1,
        opset: int | None = None,
        **attributes: Any,
    ) -> ir.Value:
        """Insert a node before the node being lowered; return its (first) output."""
        return self.op_multi(
            op_type, inputs, domain=domain, num_outputs=num_outputs, opset=opset, **attributes
        )[0]

    def op_multi(
        self,
        op_type: str,
        inputs: Sequence[ir.Value | None],
        *,
        domain: str = "",
        num_outputs: int = 1,
        opset: int | None = None,
        **attributes: Any,
    ) -> tuple[ir.Value, ...]:
        attrs = [_to_attr(name, value) for name, value in attributes.items() if value is not None]
        node = ir.Node(
            domain,
            op_type,
            inputs,
            attrs,
            num_outputs=num_outputs,
            name=self.fresh_name(op_type),
        )
        self.insert(node, self.opset if opset is None else opset)
        return tuple(node.outputs)

    def insert(self, node: ir.Node, opset: int, *, infer: bool = True) -> None:
        """Insert a built node before the node being lowered; it is read at ``opset``.

        ``infer=False``: the caller has given every output its type (no inference).
        """
        graph = self.node.graph
        assert graph is not None, "the node being lowered is not in a graph"
        graph.insert_before(self.node, node)
        if infer and not node.domain:
            infer_node_output_types(node, opset, self._oracle.type_of, self._oracle.node_types)
        self.built.append((node, opset))

    def insert_typed(self, nodes: Sequence[ir.Node], opset: int) -> None:
        """Insert built nodes, in order, before the node being lowered, in one insertion;
        each is read at ``opset`` and the caller has given every output its type."""
        graph = self.node.graph
        assert graph is not None, "the node being lowered is not in a graph"
        graph.insert_before(self.node, nodes)
        self.built.extend((node, opset) for node in nodes)

    def constant(self, value: np.ndarray | float | int | bool, dtype: Any = None) -> ir.Value:
        """A Constant node holding ``value`` (a numpy array or scalar).

        Its output gets the tensor's type and shape, as ONNX's inference of a Constant
        with a ``value`` attribute gives them, without running it. The tensor is the
        ``ir.Tensor`` that ``ir.tensor`` makes of a numpy array, built directly (without
        its protocol checks).
        """
        tensor = ir.Tensor(np.asarray(value, dtype=dtype))
        node = ir.Node(
            "", "Constant", [], [ir.AttrTensor("value", tensor)], name=self.fresh_name("Constant")
        )
        out = node.outputs[0]
        out.type, out.shape = ir.TensorType(tensor.dtype), ir.Shape(tensor.shape.numpy())
        self.insert(node, self.opset, infer=False)
        return out

    def constant_like(self, value: float | int, like: ir.Value) -> ir.Value:
        """A scalar constant with the element type of ``like``."""
        dtype = self.require_dtype(like, "input")
        return self.constant(np.array(value, dtype=dtype.numpy()))

    def expand_function(self) -> list[ir.Value | None]:
        """Replace the node by its ONNX function body (see :mod:`.function_body`)."""
        return expand_function_body(self)

    def copied_body(self, template: object, nodes: Sequence[ir.Node]) -> None:
        """Note that ``nodes`` (the last inserted) copy ``template`` with its types."""
        self.copies.append((template, list(nodes)))

    def fresh_name(self, op_type: str) -> str:
        """A node name unused in the model, derived from the lowered node's."""
        return self._names.fresh(f"{self.node.name or self.node.op_type}/lowered_{op_type}")


def types_refused_below(
    node: ir.Node,
    version: int,
    previous: int | None,
    type_of: Callable[[ir.Value], ir.TypeProtocol | None],
) -> str | None:
    """Why schema ``previous`` does not allow the node's types (None: it allows them all).

    The rule of a type-only step (:meth:`DowngradeContext.require_types_allowed_below`).
    """
    if previous is None:
        return f"{node.op_type} does not exist before opset {version}"
    checks = schemas.type_checks(node.op_type, version, node.domain)
    problems: list[str] = []
    for check in checks:
        actuals = node.inputs if check.kind == "input" else node.outputs
        stop = len(actuals) if check.variadic else check.index + 1
        for index in range(check.index, min(stop, len(actuals))):
            value = actuals[index]
            if value is None or (check.kind == "output" and _omitted(value)):
                continue
            type_str = schemas.type_string(type_of(value))
            if type_str in check.old_allowed:
                continue
            label = f"{check.kind} '{value.name}'" if value.name else f"{check.kind} {index}"
            if type_str is None:
                problems.append(
                    f"the type of {label} is unknown (needed to tell whether "
                    f"{node.op_type}-{previous} allows it)"
                )
            else:
                problems.append(
                    f"{label} is {_pretty(type_str)}, which "
                    f"{node.op_type}-{previous} does not allow"
                )
    return "; ".join(problems) if problems else None


def _omitted(output: ir.Value) -> bool:
    """An optional output the node does not produce (empty name, never used)."""
    return not output.name and not output.uses() and not output.is_graph_output()


def _pretty(type_str: str) -> str:
    if type_str.startswith("tensor(") and type_str.endswith(")"):
        return type_str[len("tensor(") : -1].upper()
    return type_str


def _to_attr(name: str, value: Any) -> ir.Attr:
    if isinstance(value, ir.Attr):
        return value
    if isinstance(value, onnx.AttributeProto):
        return ir.serde.deserialize_attribute(value)
    return ir.convenience.convert_attribute(name, value)
