"""Slices, concatenations, running sums and gathers of symbolic values, for the mask proof.

:mod:`~onnxscript_ep_passes.fusion.mask_proof` reads what a mask subgraph computes, not
which ops spell it. The rules here are what each op computes on the symbolic values of
:mod:`~onnxscript_ep_passes.fusion.mask_terms` (each element a function of its
coordinates), so another spelling of the same arithmetic needs no new case:

- :func:`slice_val`: ``Slice`` with step 1 keeps the elements ``x + start`` of each sliced
  axis: the element function with ``x_a`` replaced by ``x_a + start``. Negative constant
  starts/ends count from the end, ends beyond the dim are clamped; a start or end whose
  place relative to ``0`` and the dim the size bounds do not decide refuses. A slice of
  ``attention_mask`` itself is not modelled (its padding atom would lose its offset).
- :func:`concat_pieces`: a ``Concat`` whose pieces compute the *same* function of the
  output's coordinates (piece ``k`` starts at ``o_k``: its element ``f_k(x_a - o_k)``;
  a one-element piece is compared at ``x_a = o_k``) is that function. (transformers 5.24's
  ``torch.diff(position_ids, prepend=position_ids[:, :1] - 1)`` concatenates
  ``[p0 - 1, p0, p1, ...]``, which for ``position_ids = arange`` is ``x - 1`` throughout.)
- :func:`cumsum_val`: the running sum of a constant ``c`` along axis ``a`` is ``c * (x_a +
  1)`` (``exclusive``: ``c * x_a``; ``reverse``: counted from the end).
- :func:`cast_val`: a ``Cast`` to bool of ``attention_mask`` is the padding atom, of a
  constant the constant's truth; a Cast between booleans and integers keeps the values, a
  boolean to float is its :class:`~onnxscript_ep_passes.fusion.mask_terms.Indicator`.
- :func:`reshape_keeps`: a ``Reshape`` whose target is the value's own dims (``0`` copying
  a dim, one ``-1`` for the dim left) keeps the value (GPT-2's
  ``attention_mask.view(batch, -1)``).
- :func:`reshape_units`: a ``Reshape`` that only adds or drops axes of size 1 (4.x's
  ``cache_position.reshape(-1, 1)``) moves each other axis's coordinate to its new place,
  as ``Unsqueeze``/``Squeeze`` do.
- :func:`trilu_val`: ``Trilu`` keeps ``col - row - k >= 0`` (upper) or its mirror;
  :func:`gather_nd_val`: ``GatherND`` of single elements at coordinates proven inside the
  data's dims is the data's function at those coordinates.

Anything else is an :class:`~onnxscript_ep_passes.fusion.mask_terms.Unknown` with the
reason (fine while only its shape is used) or a refusal.
"""

from __future__ import annotations

__all__ = [
    "cast_val",
    "concat_pieces",
    "cumsum_val",
    "gather_nd_val",
    "reshape_keeps",
    "reshape_units",
    "slice_val",
    "trilu_val",
]

import math
from collections.abc import Sequence

import onnx_ir as ir

from onnxscript_ep_passes.fusion.mask_terms import (
    ONE,
    AnyOf,
    Bounds,
    FloatConst,
    FloatMask,
    Index,
    Indicator,
    Lin,
    PadAtom,
    PadInput,
    Unknown,
    Val,
    Vec,
    as_field,
    conj,
    is_lowest,
    map_elem,
    negate,
    refuse,
)

_LARGE = 2**30  # an end at least this large means "to the end" (torch exports INT64_MAX)


def _place(value: Lin, dim: Lin, bounds: Bounds, what: str) -> Lin:
    """``value`` (a start or end) as a position in ``[0, dim]``."""
    if value.is_const() and value.const >= _LARGE:
        return dim
    if value.is_const() and value.const < 0:
        value = dim + value
    if bounds.always(value, ()) and bounds.always(dim - value, ()):
        return value
    if bounds.always(value - dim, ()):
        return dim  # clamped
    raise refuse(f"Slice {what} {value} not proven inside [0, {dim}]")


def slice_val(
    data: Val,
    starts: Sequence[Lin],
    ends: Sequence[Lin],
    axes: Sequence[int] | None,
    steps: Sequence[int] | None,
    bounds: Bounds,
) -> Val:
    """``Slice(data, starts, ends, axes, steps)`` with steps 1 (module docstring)."""
    if steps is not None and any(step != 1 for step in steps):
        raise refuse("Slice with a step other than 1")
    axes = list(range(len(starts))) if axes is None else axes
    rank = len(data.dims)
    if len(axes) != len(starts) or len(ends) != len(starts) or not rank:
        raise refuse("Slice with starts, ends and axes of different lengths")
    if isinstance(data.elem, PadInput):
        return Val(data.dims, Unknown("a slice of attention_mask"))
    if isinstance(data.elem, Vec) and rank == 1:
        if len(starts) != 1 or not starts[0].is_const() or not ends[0].is_const():
            return Val(data.dims, Unknown("a slice of a shape vector at symbolic places"))
        items = data.elem.items
        low, high = starts[0].const, ends[0].const
        picked = items[low : min(high, len(items)) if high < _LARGE else None]
        return Val((Lin.of(len(picked)),), Vec(tuple(picked)))
    field = as_field(data)
    dims = list(field.dims)
    mapping: dict[str, Lin] = {}
    for start, end, axis in zip(starts, ends, axes):
        a = axis % rank
        first = _place(start, dims[a], bounds, "start")
        last = _place(end, dims[a], bounds, "end")
        if not bounds.always(last - first, ()):
            raise refuse(f"Slice of [{first}, {last}) not proven non-empty")
        dims[a] = last - first
        mapping[f"x{a}"] = Lin.of(**{f"x{a}": 1}) + first
    return Val(tuple(dims), map_elem(field.elem, mapping))


def concat_pieces(parts: Sequence[Val], axis: int) -> Val:
    """``Concat`` of pieces that compute one function of the output's coordinates."""
    rank = len(parts[0].dims)
    a = axis % rank
    others = {tuple(d for i, d in enumerate(p.dims) if i != a) for p in parts}
    if len(others) != 1 or any(len(p.dims) != rank for p in parts):
        raise refuse("Concat of pieces of different shapes")
    var = f"x{a}"
    offsets, offset = [], Lin()
    for part in parts:
        offsets.append(offset)
        offset = offset + part.dims[a]
    dims = tuple(offset if i == a else d for i, d in enumerate(parts[0].dims))
    unknown = next((p.elem for p in parts if isinstance(p.elem, Unknown)), None)
    if unknown is not None:
        return Val(dims, unknown)
    if not all(isinstance(p.elem, Lin) for p in parts):
        return Val(dims, Unknown("a Concat of pieces this proof does not model"))
    shifted = [
        map_elem(p.elem, {var: Lin.of(**{var: 1}) - o})
        for p, o in zip(parts, offsets)
        if p.dims[a] != ONE
    ]
    if not shifted:
        return Val(dims, Unknown("a Concat of single elements"))
    function = shifted[0]
    assert isinstance(function, Lin)
    for part, start in zip(parts, offsets):
        if part.dims[a] == ONE:
            same = map_elem(part.elem, {var: Lin()}) == function.subst(var, start)
        else:
            same = map_elem(part.elem, {var: Lin.of(**{var: 1}) - start}) == function
        if not same:
            return Val(dims, Unknown("a Concat of pieces that compute different values"))
    return Val(dims, function)


def cumsum_val(data: Val, axis: int, exclusive: bool, reverse: bool) -> Val:
    """``CumSum`` of a constant along ``axis`` (module docstring)."""
    field = as_field(data)
    rank = len(field.dims)
    if isinstance(field.elem, Unknown):
        return field
    if not isinstance(field.elem, Lin) or not field.elem.is_const() or not rank:
        return Val(field.dims, Unknown("a running sum of values that are not one constant"))
    a = axis % rank
    position = Lin.of(**{f"x{a}": 1})
    if reverse:
        position = field.dims[a] - ONE - position
    count = position if exclusive else position + ONE
    return Val(field.dims, count.scale(field.elem.const))


def reshape_keeps(dims: tuple[Lin, ...], target: tuple[Lin, ...], allowzero: int) -> bool:
    """Whether Reshape to ``target`` keeps ``dims``: equal item by item, where a ``0``
    (without ``allowzero``) copies the dim and one ``-1`` stands for the one dim left (the
    element count is the same, so it is that dim)."""
    if len(target) != len(dims):
        return False
    unmatched = 0
    for dim, item in zip(dims, target):
        if item == dim or (item == Lin.of(0) and not allowzero):
            continue
        if item != Lin.of(-1):
            return False
        unmatched += 1
    return unmatched <= 1


def trilu_val(x: Val, k: Lin, upper: bool) -> Val:
    """``Trilu(x, k)`` of a boolean or lowest-float field: the kept part is ``col - row - k
    >= 0`` (upper) or ``row + k - col >= 0`` (lower)."""
    rank = len(x.dims)
    if rank < 2:
        raise refuse("Trilu of rank < 2")
    row, col = Lin.of(**{f"x{rank - 2}": 1}), Lin.of(**{f"x{rank - 1}": 1})
    kept = col - row - k if upper else row + k - col
    if x.elem is None or isinstance(x.elem, frozenset):
        return Val(x.dims, conj(x.elem, frozenset({kept})))
    if isinstance(x.elem, FloatConst) and is_lowest(x.elem.value):
        negated = negate(frozenset({kept}))  # -inf where kept, 0 elsewhere
        assert not isinstance(negated, Unknown)
        return Val(x.dims, FloatMask(negated, math.isfinite(x.elem.value)))
    return Val(x.dims, Unknown("Trilu of a value this proof does not model"))


def gather_nd_val(data: Val, index: Val, bounds: Bounds) -> Val:
    """``GatherND(data, index)`` (no batch dims) of single elements at index coordinates
    proven inside ``data``'s dims."""
    if not isinstance(index.elem, Index) or len(index.elem.items) != len(data.dims):
        return Val(index.dims[:-1], Unknown("a GatherND other than of single elements"))
    dims = index.dims[:-1]
    for coordinate, size in zip(index.elem.items, data.dims):
        inside = bounds.always(coordinate, dims) and bounds.always(size - ONE - coordinate, dims)
        if not inside:
            raise refuse(f"GatherND index {coordinate} not proven inside [0, {size})")
    mapping = {f"x{a}": item for a, item in enumerate(index.elem.items)}
    return Val(dims, map_elem(data.elem, mapping))


def reshape_units(x: Val, target: tuple[Lin, ...]) -> Val | None:
    """``Reshape(x, target)`` where ``target`` is ``x``'s dims of size other than 1, in
    order, with 1s added or dropped (one ``-1`` standing for a dim or a 1); None otherwise."""
    kept = [a for a, d in enumerate(x.dims) if d != ONE]
    places = [i for i, t in enumerate(target) if t != ONE]
    if target.count(Lin.of(-1)) > 1:
        return None
    if len(places) == len(kept) + 1:  # the -1 stands for a 1
        places = [i for i in places if target[i] != Lin.of(-1)]
    if len(places) != len(kept):
        return None
    dims = [ONE] * len(target)
    for a, i in zip(kept, places):
        if target[i] not in (x.dims[a], Lin.of(-1)):
            return None
        dims[i] = x.dims[a]
    mapping = {f"x{a}": Lin() for a in range(len(x.dims))}
    mapping.update({f"x{a}": Lin.of(**{f"x{i}": 1}) for a, i in zip(kept, places)})
    return Val(tuple(dims), map_elem(x.elem, mapping))


def cast_val(x: Val, to: ir.DataType) -> Val:
    """``Cast(x, to)`` (see the module doc); float arithmetic is left as Unknown."""
    if isinstance(x.elem, Unknown):
        return x  # keeps the reason
    if isinstance(x.elem, PadInput) and to != ir.DataType.BOOL:
        return x  # attention_mask's values, as integers or floats
    if to.is_floating_point() and (x.elem is None or isinstance(x.elem, (frozenset, AnyOf))):
        return Val(x.dims, Indicator(x.elem))
    if to == ir.DataType.BOOL:
        if isinstance(x.elem, PadInput):
            return Val(x.dims, frozenset({PadAtom(x.elem.b, x.elem.j)}))
        if x.elem is None or isinstance(x.elem, frozenset):
            return x
        if isinstance(x.elem, FloatConst) or (isinstance(x.elem, Lin) and x.elem.is_const()):
            value = x.elem.value if isinstance(x.elem, FloatConst) else x.elem.const
            return Val(x.dims, frozenset() if value != 0 else None)  # a constant boolean
        return Val(x.dims, Unknown("a Cast to bool of a non-boolean"))
    if to.is_integer() and isinstance(x.elem, (Lin, Vec)):
        return x
    if to.is_integer() and (x.elem is None or x.elem == frozenset()):
        return Val(x.dims, Lin.of(int(x.elem is not None)))  # a constant boolean
    why = f"it is built in {to.name.lower()} arithmetic (a Cast to {to.name})"
    return Val(x.dims, Unknown(why))
