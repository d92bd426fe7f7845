"""Masks built in float arithmetic, for the mask proof (transformers 4.44-4.48's spelling).

transformers before 4.53 builds the causal mask as floats and adds the padding before
comparing: ``m = full(lowest) [Trilu] * Cast(j > i [| too far], float)``, then
``masked_fill(m + attention_mask == 0, lowest)``. Each step is read by what it computes on
the symbolic values of :mod:`~onnxscript_ep_passes.fusion.mask_terms`, as exactly as the
integer rules:

- :func:`disjoin`: ``Or`` of two single atoms (or of disjunctions) is an
  :class:`~onnxscript_ep_passes.fusion.mask_terms.AnyOf`; with a constant side, the constant
  decides.
- :func:`float_product`: ``FloatMask(A) * Indicator(P)`` of a mask known to hold the
  lowest float, not -inf (``-inf * 0`` is NaN), is the lowest float where ``not A
  and P``, 0 elsewhere: ``FloatMask(A or not P)``. ``not P`` of a disjunction of atoms is
  the conjunction of their negations; ``A or N`` of two atoms is the weaker one when one
  implies the other on the whole domain (``e_b - e_a >= 0`` everywhere: ``a`` implies
  ``b``), else it is not a conjunction and is left Unknown. ``FloatConst(0) * x`` is 0.
- :func:`float_sum`: ``FloatMask(A) + attention_mask[b, j]`` is a
  :class:`~onnxscript_ep_passes.fusion.mask_terms.MaskPlusPad`. ``Equal(_, 0)`` of it is
  ``A and attention_mask[b, j] == 0``: where ``A`` fails the sum is the lowest float plus
  an integer below 2**63, never 0.
- :func:`where_val`: ``Where(C, lowest, FloatMask(A))`` is ``FloatMask(A and not C)``;
  with ``C = A and x`` (one more atom) that is ``A and not x``.

Anything else returns None: the caller keeps its own rules.
"""

from __future__ import annotations

__all__ = ["disjoin", "float_product", "float_sum", "masked_equal", "where_val"]

import math
from collections.abc import Sequence

from onnxscript_ep_passes.fusion.mask_terms import (
    AnyOf,
    Atom,
    Bounds,
    Elem,
    FloatConst,
    FloatMask,
    Indicator,
    Lin,
    MaskPlusPad,
    PadAtom,
    PadInput,
    Pred,
    Unknown,
    conj,
    is_lowest,
    negate,
    negate_atom,
)


def _atoms(side: Elem) -> frozenset[Atom] | None:
    """The atoms of a one-atom predicate or a disjunction (None: neither)."""
    if isinstance(side, AnyOf):
        return side.atoms
    if isinstance(side, frozenset) and len(side) == 1:
        return side
    return None


def disjoin(a: Elem, b: Elem) -> Elem | None:
    """``Or(a, b)`` (module doc)."""
    for x, y in ((a, b), (b, a)):
        if x is None:  # false or y
            return y
        if x == frozenset():  # true or y
            return frozenset()
    left, right = _atoms(a), _atoms(b)
    if left is None or right is None:
        return None
    return AnyOf(left | right)


def _weaker(a: Atom, b: Atom, bounds: Bounds, dims: Sequence[Lin]) -> Atom | None:
    """``a or b`` as one atom where one implies the other on the domain."""
    if a == b:
        return a
    if isinstance(a, Lin) and isinstance(b, Lin):
        if bounds.always(b - a, dims):
            return b
        if bounds.always(a - b, dims):
            return a
    return None


def float_product(a: Elem, b: Elem, bounds: Bounds, dims: Sequence[Lin]) -> Elem | None:
    """``a * b`` of a float mask (or constant) and an indicator (module doc)."""
    for mask, other in ((a, b), (b, a)):
        if not isinstance(other, Indicator):
            continue
        if isinstance(mask, FloatConst) and mask.value == 0:
            return FloatConst(0.0)
        if isinstance(mask, FloatConst) and is_lowest(mask.value):
            # the lowest float everywhere: nothing allowed
            mask = FloatMask(None, math.isfinite(mask.value))
        if not isinstance(mask, FloatMask):
            continue
        if not mask.finite:
            return Unknown("-inf times a 0/1 condition (NaN where the condition is 0)")
        pred = other.pred
        if pred is None:  # times 0
            return FloatConst(0.0)
        atoms = _atoms(pred) if isinstance(pred, AnyOf) or len(pred) == 1 else None
        if atoms is None:
            return Unknown("a float mask times a condition of several terms")
        negated: Pred = frozenset(negate_atom(x) for x in atoms)  # not P
        allowed = mask.allowed
        if allowed is None:
            return FloatMask(negated, finite=True)
        if len(allowed) == 1 and len(atoms) == 1:
            either = _weaker(next(iter(allowed)), negate_atom(next(iter(atoms))), bounds, dims)
            if either is not None:
                return FloatMask(frozenset({either}), finite=True)
        return Unknown("a float mask allowing one of two conditions")
    return None


def float_sum(a: Elem, b: Elem) -> Elem | None:
    """``FloatMask(A) + attention_mask`` (module doc)."""
    for mask, pad in ((a, b), (b, a)):
        if isinstance(mask, FloatMask) and isinstance(pad, PadInput):
            return MaskPlusPad(mask.allowed, pad)
    return None


def masked_equal(a: Elem, b: Elem) -> Elem | None:
    """``Equal(FloatMask(A) + attention_mask, 0)`` (module doc)."""
    for total, zero in ((a, b), (b, a)):
        if isinstance(total, MaskPlusPad) and zero == FloatConst(0.0):
            return conj(total.allowed, frozenset({PadAtom(total.pad.b, total.pad.j, held=False)}))
    return None


def where_val(cond: Elem, yes: Elem, no: Elem) -> Elem:
    """``Where(cond, yes, no)``: a float mask ``Where(allowed, 0, lowest)`` (or its mirror),
    a masked fill (module doc), or ``cond and yes`` of booleans."""
    if isinstance(cond, Unknown):
        return cond
    if (filled := _masked_fill(cond, yes, no)) is not None:
        return filled
    if cond is not None and not isinstance(cond, frozenset):
        return Unknown("Where on a non-boolean condition")
    if isinstance(yes, FloatConst) and isinstance(no, FloatConst):
        if yes.value == 0 and is_lowest(no.value):
            return FloatMask(cond, math.isfinite(no.value))
        negated = negate(cond)
        if is_lowest(yes.value) and no.value == 0 and not isinstance(negated, Unknown):
            return FloatMask(negated, math.isfinite(yes.value))
    if no is None and (yes is None or isinstance(yes, frozenset)):
        return conj(cond, yes)
    return Unknown("a Where this proof does not model")


def _masked_fill(cond: Elem, yes: Elem, no: Elem) -> Elem | None:
    """``Where(C, lowest, FloatMask(A))`` (module doc)."""
    if not (isinstance(yes, FloatConst) and is_lowest(yes.value) and isinstance(no, FloatMask)):
        return None
    allowed = no.allowed
    if cond is None or allowed is None:
        return no
    if not isinstance(cond, frozenset):
        return None
    finite = no.finite and math.isfinite(yes.value)
    rest = cond - allowed
    if not rest:  # A implies C: A and not C is false
        return FloatMask(None, finite)
    if len(rest) == 1 and cond >= allowed:
        return FloatMask(conj(allowed, frozenset({negate_atom(next(iter(rest)))})), finite)
    return None
