"""A node's function body as a template: read once, copied before each node like it.

Rules:

* A template is read from the FunctionProto ONNX gives for one node: per body node its
  domain, op, inputs (a formal input of the node, or an output of an earlier body node),
  its attributes with references bound to the node's attributes (or the schema's
  defaults; unbound references dropped, as ONNX's function-inlining rules say) and its
  output count; and which value each of the node's outputs is. A body node holding a
  subgraph is refused.
* :meth:`BodyTemplate.insert` builds the body's nodes before the node through the
  context, in body order, each named by the context and read at the body's opset: the
  nodes copying the body node by node (:func:`.function_body.copy_body_node`) builds.
  Attributes are fresh objects per copy (their values are immutable and shared, the same
  objects: :func:`.node_copy.copy_attr`); nodes are built by :func:`.node_copy.build_node`.
* The first copy's output types are inferred by the context, node by node.
  :meth:`BodyTemplate.record_types` keeps them when every one is known; later copies
  then get equal, fresh type objects and equal shapes (a frozen shape, as inference
  gives, is shared) and are not inferred again: each run of such nodes goes into the
  graph in one insertion (:meth:`.BodySite.insert_typed`; the same names, in the same
  order, as one by one), before any node that is inferred; :meth:`BodyTemplate.insert` says when a
  copy got them all (an exact copy: the caller may then reuse what it did to the nodes
  of an earlier exact copy, :meth:`.BodySite.copied_body`). Reusing a
  template is right only for a node whose signature (:mod:`.body_cache`) fixes
  everything the body and that inference read.
"""

from __future__ import annotations

__all__ = ["BodyTemplate", "bind_references", "body_opset"]

import dataclasses
from collections.abc import Sequence

import onnx
import onnx_ir as ir

from onnxscript_ep_passes.lowering import schemas
from onnxscript_ep_passes.lowering.body_site import BodySite
from onnxscript_ep_passes.lowering.node_copy import build_node, copy_attr
from onnxscript_ep_passes.lowering.types import holds_small_constant, known_type

# A value of the body: (-1, i) is the node's input i; (j, k) is output k of body node j.
_Ref = tuple[int, int]
_FORMAL = -1
_OutputTypes = tuple[tuple[ir.TypeProtocol, ir.Shape | None], ...]


@dataclasses.dataclass(frozen=True)
class _BodyNode:
    domain: str
    op_type: str
    inputs: tuple[_Ref | None, ...]
    attributes: tuple[ir.Attr, ...]
    num_outputs: int


class BodyTemplate:
    """The body of one node's schema, with its values as references (module docstring)."""

    def __init__(
        self,
        opset: int,
        nodes: Sequence[_BodyNode],
        outputs: Sequence[_Ref | None],
        built_outputs: Sequence[str],
    ) -> None:
        self.opset = opset  # the opset the body's nodes are read at
        self.built_outputs = tuple(built_outputs)  # the body's output names, as built
        # Per body node, the positions of the node's inputs it reads.
        formal = [
            frozenset(r[1] for r in n.inputs if r is not None and r[0] == _FORMAL) for n in nodes
        ]
        self._outputs = tuple(outputs)
        self._types: tuple[_OutputTypes, ...] | None = None
        # A copy's values as one list: None, the node's inputs (those read), each body
        # node's outputs in turn; a reference is a position in it (0: no value).
        refs = [*(r for n in nodes for r in n.inputs), *outputs]
        self._width = 1 + max((r[1] for r in refs if r is not None and r[0] == _FORMAL), default=-1)
        starts: list[int] = []
        start = 1 + self._width
        for n in nodes:
            starts.append(start)
            start += n.num_outputs

        def slot(ref: _Ref | None) -> int:
            if ref is None:
                return 0
            return 1 + ref[1] if ref[0] == _FORMAL else starts[ref[0]] + ref[1]

        # Per body node, what a copy of it is built from (insert).
        self._plan = tuple(
            (n.domain, n.op_type, tuple(slot(r) for r in n.inputs), n.attributes, n.num_outputs, f)
            for n, f in zip(nodes, formal)
        )
        self._output_slots = tuple(slot(r) for r in outputs)

    @property
    def typed(self) -> bool:
        """Whether copies get the recorded output types instead of being inferred."""
        return self._types is not None

    @classmethod
    def from_proto(
        cls,
        ctx: BodySite,
        proto: onnx.FunctionProto,
        opset: int,
        attributes: dict[str, ir.Attr],
    ) -> BodyTemplate:
        """Read ``proto`` (ONNX's body for ``ctx.node``), binding references to ``attributes``.

        ``proto``'s outputs are the ones it builds (trailing unbuilt ones dropped).
        """
        function = ir.serde.deserialize_function(proto)
        refs: dict[ir.Value, _Ref] = {
            formal: (_FORMAL, index) for index, formal in enumerate(function.inputs)
        }
        nodes: list[_BodyNode] = []
        for inner in function:
            nodes.append(
                _BodyNode(
                    inner.domain,
                    inner.op_type,
                    tuple(None if v is None else refs[v] for v in inner.inputs),
                    tuple(bind_references(ctx, inner, attributes)),
                    len(inner.outputs),
                )
            )
            for index, out in enumerate(inner.outputs):
                refs[out] = (len(nodes) - 1, index)
        node_outputs = len(ctx.node.outputs)
        outputs = [refs.get(out) for out in function.outputs[:node_outputs]]
        return cls(opset, nodes, outputs, proto.output)

    def insert(self, ctx: BodySite) -> tuple[list[ir.Node], list[ir.Value | None], bool]:
        """Build the body before ``ctx.node``; return the nodes, the node's output values
        and whether every node got the recorded types (an exact copy).

        With recorded types, a body node reading an input of the node that holds a small
        constant is still inferred (inference may read the value); should its types
        differ from the recorded ones, every later body node is inferred too.
        """
        inputs = ctx.node.inputs
        built: list[ir.Node] = []
        types = self._types
        data = {
            position
            for position, value in enumerate(inputs)
            if value is not None and holds_small_constant(value)
        }
        typed_run: list[ir.Node] = []  # typed nodes built, not inserted yet: one insertion

        # The copy's values (BodyTemplate.__init__): inputs past the node's are absent.
        values: list[ir.Value | None] = [None, *inputs[: self._width]]
        values.extend([None] * (1 + self._width - len(values)))
        fresh_name = ctx.fresh_name
        read = values.__getitem__
        tensor_type = ir.TensorType
        for index, (domain, op_type, slots, attributes, num_outputs, formal) in enumerate(
            self._plan
        ):
            new = build_node(
                domain,
                op_type,
                list(map(read, slots)),
                list(map(copy_attr, attributes)),
                num_outputs,
                fresh_name(op_type),
            )
            built.append(new)
            outputs = new.outputs
            values.extend(outputs)
            if types is not None and (not data or data.isdisjoint(formal)):
                for out, (type_, shape) in zip(outputs, types[index]):  # as _copy_type, _copy_shape
                    out.type = (
                        tensor_type(type_.dtype, denotation=type_.denotation)
                        if type(type_) is tensor_type
                        else _copy_type(type_)
                    )
                    out.shape = shape if shape is None or shape.frozen else shape.copy()
                typed_run.append(new)
                continue
            if typed_run:  # inserted first: inference reads their outputs by name
                ctx.insert_typed(typed_run, self.opset)
                typed_run = []
            ctx.insert(new, self.opset)
            if types is not None and not _same_types(new, types[index]):
                types = None
        if typed_run:
            ctx.insert_typed(typed_run, self.opset)
        exact = self._types is not None and types is not None
        return built, [values[slot] for slot in self._output_slots], exact

    def record_types(self, built: Sequence[ir.Node]) -> None:
        """Keep the output types ``built`` (this template's first copy) got, if all known."""
        types: list[_OutputTypes] = []
        for node in built:
            outputs = []
            for out in node.outputs:
                type_ = _copy_type(out.type)
                if type_ is None or not known_type(type_):
                    return
                outputs.append((type_, _copy_shape(out.shape)))
            types.append(tuple(outputs))
        self._types = tuple(types)


def bind_references(ctx: BodySite, inner: ir.Node, attributes: dict[str, ir.Attr]) -> list[ir.Attr]:
    """Body node ``inner``'s attributes, references bound to ``attributes`` (unbound dropped).

    A subgraph attribute is refused.
    """
    bound: list[ir.Attr] = []
    for attr in inner.attributes.values():
        if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
            ctx.refuse(
                f"the function body of {ctx.node.op_type} holds a subgraph ({inner.op_type})"
            )
        if attr.is_ref():
            actual = attributes.get(attr.ref_attr_name or "")
            if actual is not None:
                bound.append(ir.Attr(attr.name, actual.type, actual.value))
        else:
            bound.append(attr)
    return bound


def _copy_type(type_: ir.TypeProtocol | None) -> ir.TypeProtocol | None:
    """An equal type object of its own (``Value.dtype = ...`` changes a type in place)."""
    if type(type_) is ir.TensorType:  # the common case first (one copy per body output)
        return ir.TensorType(type_.dtype, denotation=type_.denotation)
    if isinstance(type_, (ir.TensorType, ir.SparseTensorType)):
        return type(type_)(type_.dtype, denotation=type_.denotation)
    if isinstance(type_, (ir.SequenceType, ir.OptionalType)):
        elem = _copy_type(type_.elem_type)
        return None if elem is None else type(type_)(elem, denotation=type_.denotation)
    return None


def _same_types(node: ir.Node, recorded: _OutputTypes) -> bool:
    """Whether ``node``'s outputs have exactly the recorded types and shapes."""
    return all(
        _type_bytes(out.type, out.shape) == _type_bytes(type_, shape)
        for out, (type_, shape) in zip(node.outputs, recorded, strict=True)
    )


def _type_bytes(type_: ir.TypeProtocol | None, shape: ir.Shape | None) -> bytes | None:
    if type_ is None:
        return None
    proto = onnx.TypeProto()
    ir.serde.serialize_type_into(proto, type_)
    if shape is not None:
        ir.serde.serialize_shape_into(proto, shape)  # into the (leaf) tensor type
    return proto.SerializeToString()


def _copy_shape(shape: ir.Shape | None) -> ir.Shape | None:
    """A frozen shape is shared (onnx-ir's frozen shapes are for sharing); others copied."""
    if shape is None or shape.frozen:
        return shape
    return shape.copy()


def body_opset(proto: onnx.FunctionProto, default: int) -> int:
    """The ai.onnx opset ``proto`` imports (``default`` when it imports none)."""
    return next(
        (o.version for o in proto.opset_import if schemas.is_default_domain(o.domain)),
        default,
    )
