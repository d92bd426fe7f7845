"""Common-subexpression elimination as ORT's level-1 optimizations do it (rule 3 of
:mod:`.basic_optimizations`).

Rules (measured on ORT 1.32, ``ORT_ENABLE_BASIC``):

- A node with the same op, domain, schema version and attributes as an earlier one in
  ORT's topological order, on the same inputs (by value; trailing missing inputs do not
  count) and with the same outputs present, is replaced by it: its consumers read the
  earlier node's outputs. A node whose output is a graph output is kept.
- Attributes are compared by name, type and value: an int 1 is not a float 1.0. Only
  numbers, strings and their lists are compared: a node with a tensor or graph attribute
  is never merged, nor one with a float NaN (it equals nothing).
- An attribute the node leaves unset counts with its ONNX schema default, which ORT sets
  on the node at load (a LeakyRelu without alpha is one with alpha 0.01).
- A model-local function's node whose attribute refers to a parameter counts with the
  value at its call, which ORT substitutes when it inlines the function; one whose
  parameter the call leaves unset (and the function gives no default) is unset.
- Random ops and ``DequantizeLinear`` are never merged; nor are nodes of schema bodies
  ORT inlines while partitioning (after these optimizations).
- A node's key is computed once per prediction and kept across rounds
  (:attr:`~.edits.ScopeEdits.cse_keys`), computed again only for the nodes an edit
  rewired; the attribute part is kept per IR node (shared by a function's inlined
  copies) unless it refers to a parameter.
"""

from __future__ import annotations

__all__ = ["NON_DETERMINISTIC", "eliminate_common_subexpressions", "schema_defaults"]

from collections.abc import Hashable, Mapping, Sequence

import onnx
import onnx.helper
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import get_schema
from onnxscript_ep_passes.ep.placement.edits import ScopeEdits
from onnxscript_ep_passes.ep.placement.graph import FlatNode

NON_DETERMINISTIC = frozenset(
    {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Multinomial"}
)
"""Random ops: never merged, never folded."""
_MERGEABLE_ATTRIBUTES = frozenset(
    {
        ir.AttributeType.FLOAT,
        ir.AttributeType.INT,
        ir.AttributeType.STRING,
        ir.AttributeType.FLOATS,
        ir.AttributeType.INTS,
        ir.AttributeType.STRINGS,
    }
)

_MISSING: Hashable = object()  # no key kept for the node
_REFERS: Hashable = object()  # attributes that refer to a function parameter: read per call
_AttributeEntry = tuple[str, ir.AttributeType, Hashable]  # name, type, value
# Each op's schema defaults as key entries, by (op, domain, since_version).
_DEFAULTS: dict[tuple[str, str, int | None], dict[str, _AttributeEntry] | None] = {}


def eliminate_common_subexpressions(state: ScopeEdits) -> bool:
    """One round of rule 3 (module docstring) on ``state``; whether a node was merged."""
    seen: dict[Hashable, FlatNode] = {}
    changed = False
    attributes = state.cse_attributes
    keys = state.cse_keys  # kept across rounds, dropped for the nodes an edit rewires
    missing = _MISSING
    for node in state.order():  # the first of equal nodes is kept
        if not state.optimizable(node):
            continue
        key = keys.get(node, missing)
        if key is missing:
            key = keys[node] = _cse_key(node, attributes)
        if key is None:
            continue
        first = seen.setdefault(key, node)
        if first is node:
            continue
        if any(o is not None and o.is_output for o in node.outputs):
            continue
        if len(first.outputs) != len(node.outputs):
            continue
        keeps_order = state.merge_keeps_order(node, first)
        for mine, theirs in zip(node.outputs, first.outputs):
            if mine is not None and theirs is not None:
                state.replace(mine, theirs)
            elif mine is not None and mine.consumers:
                break
        else:
            state.remove(node, "common_subexpression")
            if keeps_order:
                state.merged()
            changed = True
    return changed


def _cse_key(node: FlatNode, memo: dict[ir.Node, Hashable | None]) -> Hashable | None:
    """What two nodes must share to be merged; ``memo``: the attribute part per IR node,
    read once per prediction (the model is not edited meanwhile). An input is keyed by
    its value's identity (``id``; a missing one by ``id(None)``, which no value has),
    trailing missing inputs dropped."""
    if node.op_type in NON_DETERMINISTIC or (
        node.domain == "" and node.op_type == "DequantizeLinear"
    ):
        return None
    ir_node = node.node
    if ir_node is None or node.inlined_by_ort:
        return None
    attributes = memo.get(ir_node, _MISSING)
    if attributes is _MISSING:
        defaults = _schema_defaults(node.op_type, node.domain, node.since_version)
        attributes = memo[ir_node] = (
            None if defaults is None else _attributes_key(ir_node, defaults)
        )
    if attributes is _REFERS:  # read at the call, so not kept per IR node
        defaults = _schema_defaults(node.op_type, node.domain, node.since_version)
        assert defaults is not None  # or the memo holds None
        attributes = _attributes_key(ir_node, defaults, node.call_attributes or {})
    if attributes is None:
        return None  # a subgraph, a tensor: ORT keeps such nodes distinct
    inputs = node.inputs
    count = len(inputs)
    while count and inputs[count - 1] is None:
        count -= 1
    return (
        node.op_type,
        node.domain,
        node.since_version,
        attributes,
        tuple(map(id, inputs[:count] if count < len(inputs) else inputs)),
        tuple([o is not None for o in node.outputs]),
    )


def _attributes_key(
    ir_node: ir.Node,
    defaults: Mapping[str, _AttributeEntry],
    call: Mapping[str, ir.Attr] | None = None,
) -> Hashable | None:
    """Each attribute's name, type and value: ORT compares the type too (int 1 and float
    1.0 differ, though equal in Python), and a node with a float NaN equals no other
    (None: not merged). An attribute
    that refers to a function parameter is read from ``call`` (the values at the call);
    without ``call``, a node with one is keyed :data:`_REFERS`, to be read per call. An
    attribute the node leaves unset counts with its schema default (``defaults``), which
    ORT sets on the node when it loads it."""
    # The attributes' own dict (the mapping's items() looks each one up again).
    data = ir_node.attributes.data
    if not data:
        return tuple(defaults.values())
    attributes: list[_AttributeEntry] = []
    mergeable = _MERGEABLE_ATTRIBUTES
    for name, attr in data.items():
        if not isinstance(attr, ir.Attr):
            return None
        if attr.is_ref():
            if call is None:
                return _REFERS
            resolved = call.get(attr.ref_attr_name or "")
            if resolved is None:
                continue  # ORT drops an attribute whose parameter the call leaves unset
            attr = resolved
        kind = attr.type
        if kind not in mergeable:
            return None
        value = attr.value
        if kind is ir.AttributeType.FLOAT or kind is ir.AttributeType.FLOATS:
            value = _floats_key(value)
            if value is None:
                return None  # a NaN: equal to nothing
        attributes.append((name, kind, tuple(value) if isinstance(value, list) else value))
    if defaults:
        written = {entry[0] for entry in attributes}
        attributes += [entry for name, entry in defaults.items() if name not in written]
    if len(attributes) > 1:
        attributes.sort(key=_by_name)
    return tuple(attributes)


def _by_name(entry: _AttributeEntry) -> str:
    return entry[0]


def _schema_defaults(
    op_type: str, domain: str, since: int | None
) -> dict[str, _AttributeEntry] | None:
    """The key entries of the attributes with a default in the op's ONNX schema (at
    ``since``), sorted by name; none for an op without a schema (ORT's own ops); None
    when a default is neither numbers nor strings (a tensor: ORT never merges the node,
    which holds it once loaded; no ONNX op has one)."""
    key = (op_type, domain, since)
    if key in _DEFAULTS:
        return _DEFAULTS[key]
    schema = get_schema(op_type, since, domain) if since is not None else None
    declared = schema.attributes if schema is not None else {}
    entries: dict[str, _AttributeEntry] | None = {}
    for name in sorted(declared):
        default = declared[name].default_value
        if not default.type:
            continue
        kind = ir.AttributeType(default.type)
        if kind not in _MERGEABLE_ATTRIBUTES or entries is None:
            entries = None
            continue
        value = onnx.helper.get_attribute_value(default)
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, list):
            value = [v.decode() if isinstance(v, bytes) else v for v in value]
        if kind is ir.AttributeType.FLOAT or kind is ir.AttributeType.FLOATS:
            value = _floats_key(value)
            if value is None:  # a NaN default (no ONNX op has one): never merged
                entries = None
                continue
        entries[name] = (name, kind, tuple(value) if isinstance(value, list) else value)
    _DEFAULTS[key] = entries
    return entries


def _floats_key(value: float | Sequence[float]) -> Hashable | None:
    """A float or floats attribute's value; None where it holds a NaN, which equals
    nothing (as ORT compares floats, measured): the node is never merged."""
    if isinstance(value, float):
        return None if value != value else value
    floats = tuple(value)
    return None if any(v != v for v in floats) else floats


def schema_defaults(op_type: str, domain: str, since: int | None) -> Hashable:
    """What the merge key reads of the op's schema at ``since``: its attributes' defaults
    (:func:`_schema_defaults`), as a value to compare between versions."""
    defaults = _schema_defaults(op_type, domain, since)
    return None if defaults is None else tuple(defaults.items())
