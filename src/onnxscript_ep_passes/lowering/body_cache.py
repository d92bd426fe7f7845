"""Which function-body expansions share a template, and the cache that holds the templates.

Rules:

* An expansion's key holds everything its body (ONNX's function builder) and the
  per-node type inference of the body's copy read, and nothing that identifies the node
  or the model: the op, its domain, the schema version and the body version asked for;
  the node's attribute values, in order (:func:`~onnxscript_ep_passes.core.onnx_utils.attributes_key`,
  the key placement's caches use too); per input: absent, or whether it is named, the
  first input with the same value name (inference reads types by name), its type and
  shape as ONNX is given them (declared, else the type oracle's), and whether it holds a
  constant small enough for inference's data propagation; per output, whether it is
  named (a context-dependent body builds only the named ones). The constant's value is
  not in the key (norm weights differ in every layer): the body nodes reading it are
  inferred again on every copy (:meth:`.BodyTemplate.insert`).
* No key, so no caching, for a node holding a subgraph, an attribute serde cannot write,
  or an input of unknown type (the expansion is then refused or done uncached).
* The cache is process-wide and holds at most ``MAX_ENTRIES`` templates, the least
  recently used dropped first. A template is stored only once it is typed
  (:meth:`.BodyTemplate.record_types`). :func:`clear` empties the cache and
  :func:`disabled` turns it off within a ``with`` block (tests compare the two paths).
"""

from __future__ import annotations

__all__ = ["MAX_ENTRIES", "BodyKey", "clear", "disabled", "expansion_key", "lookup", "store"]

import collections
import contextlib
from collections.abc import Iterator

import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import attributes_key
from onnxscript_ep_passes.lowering.body_site import BodySite
from onnxscript_ep_passes.lowering.body_template import BodyTemplate
from onnxscript_ep_passes.lowering.types import holds_small_constant, known_type

MAX_ENTRIES = 512

BodyKey = tuple[object, ...]

_cache: collections.OrderedDict[BodyKey, BodyTemplate] = collections.OrderedDict()
_enabled = [True]


def expansion_key(ctx: BodySite, body_version: int | None) -> BodyKey | None:
    """The key of expanding ``ctx.node`` (module docstring), or None when not cached."""
    if not _enabled[0]:
        return None
    node = ctx.node
    attributes = attributes_key(node)
    if attributes is None:  # a subgraph, or an attribute serde cannot write
        return None
    inputs: list[object] = []
    first_by_name: dict[str, int] = {}
    for index, value in enumerate(node.inputs):
        if value is None:
            inputs.append(None)
            continue
        type_key = _type_key(value, ctx)
        if type_key is None:
            return None
        name = value.name or ""
        inputs.append(
            (
                first_by_name.setdefault(name, index) if name else None,
                type_key,
                holds_small_constant(value),
            )
        )
    return (
        node.domain,
        node.op_type,
        ctx.version,
        body_version,
        attributes,
        tuple(inputs),
        tuple(bool(out.name) for out in node.outputs),
    )


def _type_key(value: ir.Value, ctx: BodySite) -> tuple[object, ...] | None:
    """The value's type and shape as ONNX is given them (:func:`.types.value_type_proto`).

    A tuple with every field that TypeProto holds (kinds, element type, denotations; the
    shape, dims and their denotations, of a tensor type), so cheaper to build and no
    coarser. None when the type is unknown or of a kind not listed.
    """
    type_ = value.type if known_type(value.type) else ctx.type_of(value)
    parts: list[object] = []
    inner = type_
    while isinstance(inner, (ir.SequenceType, ir.OptionalType)):
        parts.append((type(inner).__name__, inner.denotation))
        inner = inner.elem_type
    if not isinstance(inner, (ir.TensorType, ir.SparseTensorType)):
        return None
    parts.append((type(inner).__name__, inner.dtype, inner.denotation))
    shape = value.shape
    if shape is None or not isinstance(type_, ir.TensorType):
        return (tuple(parts), None)
    dims = tuple(d if isinstance(d, int) else ("sym", d.value) for d in shape.dims)
    denotations = tuple(shape.get_denotation(i) for i in range(len(dims)))
    return (tuple(parts), dims, denotations)


def lookup(key: BodyKey | None) -> BodyTemplate | None:
    """The template stored for ``key`` (None: no key, or none stored)."""
    if key is None or not _enabled[0]:
        return None
    template = _cache.get(key)
    if template is not None:
        _cache.move_to_end(key)
    return template


def store(key: BodyKey | None, template: BodyTemplate) -> None:
    """Keep ``template`` for ``key`` when it is typed, dropping the least recently used."""
    if key is None or not _enabled[0] or not template.typed:
        return
    _cache[key] = template
    _cache.move_to_end(key)
    while len(_cache) > MAX_ENTRIES:
        _cache.popitem(last=False)


def clear() -> None:
    """Forget every template."""
    _cache.clear()


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Within the block, expansions neither read nor fill the cache."""
    previous, _enabled[0] = _enabled[0], False
    try:
        yield
    finally:
        _enabled[0] = previous
