"""A node built as ``ir.Node`` builds it, without its argument handling: for body copies.

Rules:

* :func:`build_node` gives the object ``ir.Node(domain, op_type, inputs, attributes,
  num_outputs=n, name=name)`` gives, slot for slot: the same domain, op, inputs (and a
  use of each input recorded on it, in order), ``n`` fresh outputs, an ``Attributes``
  container of its own holding ``attributes`` by name, and every other slot at
  ``ir.Node``'s default. It skips what that constructor does for any caller: the domain
  normalized, the inputs and outputs checked, the attributes put one by one through the
  container's type checks.
* So it is only for arguments known good: a normalized domain (not ``"ai.onnx"``),
  inputs that are values or None, ``ir.Attr`` objects with distinct names, ``n >= 1``.
  Body templates (:mod:`.body_template`) hold such arguments, read from a node onnx-ir
  built.
* :func:`copy_attr` gives an attribute equal to the one given, as ``ir.Attr`` would build
  it, but holding the same value object (immutable: ints, floats, strings, tuples of
  them, tensors): the serializer's memo (:mod:`~onnxscript_ep_passes.model_files.serialize`)
  then sees one value, and a tuple is not copied per node.
* Both read onnx-ir's slots; where this onnx-ir's ``Node``, ``Value``, ``Attr`` or
  ``Attributes`` is not laid out as known (:data:`FAST`), they call ``ir.Node`` and
  ``ir.Attr`` themselves. The tests compare the two ways, slot for slot.
"""

from __future__ import annotations

__all__ = ["FAST", "build_node", "copy_attr"]

import collections
from collections.abc import Sequence

import onnx_ir as ir
from onnx_ir import _graph_containers

_NODE_SLOTS = (
    "_attributes",
    "_domain",
    "_graph",
    "_inputs",
    "_metadata",
    "_metadata_props",
    "_name",
    "_op_type",
    "_outputs",
    "_overload",
    "_version",
    "device_configurations",
    "doc_string",
)

_VALUE_SLOTS = (
    "_const_value",
    "_graph",
    "_index",
    "_is_graph_input",
    "_is_graph_output",
    "_is_initializer",
    "_metadata",
    "_metadata_props",
    "_name",
    "_producer",
    "_shape",
    "_type",
    "_uses",
    "doc_string",
)
_ATTR_SLOTS = ("_metadata", "_name", "_ref_attr_name", "_type", "_value", "doc_string")

_Attributes = _graph_containers.Attributes

FAST: bool = (
    tuple(sorted(getattr(ir.Node, "__slots__", ()))) == _NODE_SLOTS
    and tuple(sorted(getattr(ir.Value, "__slots__", ()))) == _VALUE_SLOTS
    and hasattr(ir.Value, "_add_usage")
    and issubclass(_Attributes, collections.UserDict)
    and tuple(sorted(getattr(ir.Attr, "__slots__", ()))) == _ATTR_SLOTS
)
"""Whether :func:`build_node` sets the slots itself (this onnx-ir is laid out as known)."""

_new = object.__new__
_Node = ir.Node
_Value = ir.Value
_Attr = ir.Attr


def copy_attr(attr: ir.Attr) -> ir.Attr:
    """``ir.Attr(attr.name, attr.type, attr.value, attr.ref_attr_name,
    doc_string=attr.doc_string)``: an attribute of its own, equal to ``attr``, holding the
    same value object (the constructor would make a new tuple of a list-valued one), its
    metadata unread (module rules)."""
    if not FAST:
        return ir.Attr(
            attr.name, attr.type, attr.value, attr.ref_attr_name, doc_string=attr.doc_string
        )
    new = _new(_Attr)
    new._metadata = None
    new._name = attr._name
    new._ref_attr_name = attr._ref_attr_name
    new._type = attr._type
    new._value = attr._value
    new.doc_string = attr.doc_string
    return new


def _output(node: ir.Node, index: int) -> ir.Value:
    """``ir.Value(node, index=index)``."""
    value = _new(_Value)
    value._producer = node
    value._index = index
    value._metadata = None
    value._metadata_props = None
    value._name = None
    value._shape = None
    value._type = None
    value._const_value = None
    value._uses = {}
    value.doc_string = None
    value._graph = None
    value._is_graph_input = False
    value._is_graph_output = False
    value._is_initializer = False
    return value


def build_node(
    domain: str,
    op_type: str,
    inputs: Sequence[ir.Value | None],
    attributes: Sequence[ir.Attr],
    num_outputs: int,
    name: str,
) -> ir.Node:
    """``ir.Node(domain, op_type, inputs, attributes, num_outputs=num_outputs, name=name)``
    for known-good arguments (module rules)."""
    if not FAST:
        return ir.Node(domain, op_type, inputs, attributes, num_outputs=num_outputs, name=name)
    node = _new(_Node)
    node._name = name
    node._domain = domain
    node._op_type = op_type
    node._inputs = held = tuple(inputs)
    node._outputs = tuple([_output(node, index) for index in range(num_outputs)])
    container = _new(_Attributes)
    container._owner = node
    container.data = {attr.name: attr for attr in attributes}
    node._attributes = container
    node._overload = ""
    node._version = None
    node._metadata = None
    node._metadata_props = None
    node.device_configurations = ()
    node._graph = None
    node.doc_string = None
    for index, value in enumerate(held):
        if value is not None:
            value._add_usage(node, index)
    return node
