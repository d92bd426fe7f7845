"""The symbolic values :mod:`~onnxscript_ep_passes.fusion.mask_proof` computes with.

Rules:

- :class:`Lin`: an integer ``const + sum(coef * var)``; vars are the sizes ``B``, ``S``,
  ``P`` (batch, current tokens, past tokens) and a tensor's own coordinates ``x0, x1...``.
- A boolean tensor is a conjunction of atoms (``Pred``: a frozenset; ``None`` is false
  everywhere): a :class:`Lin` atom means ``lin >= 0``, a :class:`PadAtom` means
  ``attention_mask[b, j] != 0`` (or ``== 0``); an :class:`AnyOf` is a disjunction of atoms
  (``Or``).
- :class:`Val`: a tensor's dims (Lins) and its element as a function of its coordinates.
  Broadcasting (:func:`rebind`) renumbers an operand's coordinates into the output's;
  a size-1 axis's coordinate is 0; two dims broadcast only when they are equal Lins or 1.
- :class:`Bounds` decides ``lin >= 0`` for all coordinates inside a shape and all sizes
  with ``B >= 1``, ``S >= 1``, ``P >= 0`` (``P = 0`` without a KV cache) and
  ``S + P <= max_length``: coordinates are set to their extreme, then the sizes to the
  vertices of that polygon (the minimum of a linear function is at a vertex).
"""

from __future__ import annotations

__all__ = [
    "COMPARE",
    "ONE",
    "REFUSED",
    "SIZES",
    "AnyOf",
    "Atom",
    "Bounds",
    "Elem",
    "FloatConst",
    "FloatMask",
    "Index",
    "Indicator",
    "Lin",
    "MaskPlusPad",
    "PadAtom",
    "PadInput",
    "Pred",
    "Unknown",
    "Val",
    "Vec",
    "as_field",
    "as_vec",
    "broadcast_dims",
    "canonical",
    "check_constant_mask",
    "conj",
    "const_axes",
    "const_val",
    "describe_mismatch",
    "handler_name",
    "has_past_input",
    "is_lowest",
    "map_elem",
    "negate",
    "negate_atom",
    "rebind",
    "refuse",
    "show_atom",
    "simplify",
]

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx_ir as ir

from onnxscript_ep_passes.fusion.attention_match import RefusedError

SIZES = ("B", "S", "P")


@dataclasses.dataclass(frozen=True)
class Lin:
    """``const + sum(coef * var)``: vars are sizes (B, S, P) and coordinates (x0, x1...)."""

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    @staticmethod
    def of(const: int = 0, **terms: int) -> Lin:
        return Lin(tuple(sorted((k, v) for k, v in terms.items() if v)), int(const))

    def coef(self) -> dict[str, int]:
        return dict(self.terms)

    def __add__(self, other: Lin) -> Lin:
        coef = self.coef()
        for k, v in other.terms:
            coef[k] = coef.get(k, 0) + v
        return Lin.of(self.const + other.const, **coef)

    def scale(self, factor: int) -> Lin:
        return Lin.of(self.const * factor, **{k: v * factor for k, v in self.terms})

    def __sub__(self, other: Lin) -> Lin:
        return self + other.scale(-1)

    def subst(self, var: str, value: Lin) -> Lin:
        coef = self.coef()
        factor = coef.pop(var, 0)
        return Lin.of(self.const, **coef) + value.scale(factor)

    def is_const(self) -> bool:
        return not self.terms

    def __str__(self) -> str:
        parts = [f"{'' if v == 1 else '-' if v == -1 else v}{k}" for k, v in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")


ONE = Lin.of(1)


@dataclasses.dataclass(frozen=True)
class Unknown:
    """A value the proof cannot express (fine as long as only its shape is used)."""

    why: str


@dataclasses.dataclass(frozen=True)
class PadAtom:
    """``attention_mask[b, j] != 0`` (``held=False``: ``== 0``)."""

    b: Lin
    j: Lin
    held: bool = True


Atom = Lin | PadAtom  # a Lin atom means ``lin >= 0``
Pred = frozenset[Atom] | None  # a conjunction of atoms; None: false everywhere


@dataclasses.dataclass(frozen=True)
class Vec:
    """A 1-D integer tensor of known length (shape arithmetic)."""

    items: tuple[Lin, ...]


@dataclasses.dataclass(frozen=True)
class Index:
    """The last axis holds these coordinates (GatherND indices)."""

    items: tuple[Lin, ...]


@dataclasses.dataclass(frozen=True)
class FloatConst:
    value: float


@dataclasses.dataclass(frozen=True)
class FloatMask:
    """An additive mask: 0 where ``allowed`` holds, -inf (or the lowest float) elsewhere;
    ``finite``: known to be the lowest float there, never -inf (so it may be multiplied by 0:
    ``-inf * 0`` is NaN)."""

    allowed: Pred
    finite: bool = False


@dataclasses.dataclass(frozen=True)
class PadInput:
    """The values ``attention_mask[b, j]`` (integers, or floats after a Cast; a Cast to bool
    gives the predicate ``PadAtom(b, j)``)."""

    b: Lin = dataclasses.field(default_factory=lambda: Lin.of(x0=1))
    j: Lin = dataclasses.field(default_factory=lambda: Lin.of(x1=1))


@dataclasses.dataclass(frozen=True)
class AnyOf:
    """A boolean: at least one of ``atoms`` holds (``Or``)."""

    atoms: frozenset[Atom]


@dataclasses.dataclass(frozen=True)
class Indicator:
    """A float: 1 where ``pred`` holds, 0 elsewhere (a Cast of a boolean to float)."""

    pred: Pred | AnyOf


@dataclasses.dataclass(frozen=True)
class MaskPlusPad:
    """``FloatMask(allowed) + attention_mask[pad.b, pad.j]`` (transformers 4.4x's float
    masks add the padding before comparing with 0)."""

    allowed: Pred
    pad: PadInput


Elem = (
    Lin
    | Vec
    | Index
    | FloatConst
    | FloatMask
    | PadInput
    | AnyOf
    | Indicator
    | MaskPlusPad
    | Unknown
    | frozenset
    | None
)


@dataclasses.dataclass(frozen=True)
class Val:
    """A tensor: its dims, and each element as a function of its coordinates ``x0...``.

    ``elem``: :class:`Lin` (integers), a ``Pred`` (booleans: a frozenset of atoms, or None
    for false), :class:`Vec` (then ``dims`` is ``(len,)``), :class:`Index`,
    :class:`FloatConst`, :class:`FloatMask`, :class:`PadInput`, :class:`AnyOf`,
    :class:`Indicator`, :class:`MaskPlusPad` or :class:`Unknown`.
    """

    dims: tuple[Lin, ...]
    elem: Elem


class Bounds:
    """Decides ``lin >= 0`` on the domain (rules Sizes and Decision)."""

    def __init__(self, has_past: bool, max_length: int) -> None:
        self.has_past = has_past
        self.max_length = max_length

    def minimum(self, lin: Lin, dims: Sequence[Lin]) -> float:
        for axis, dim in enumerate(dims):  # coordinates first: x in [0, dim - 1]
            c = lin.coef().get(f"x{axis}", 0)
            lin = lin.subst(f"x{axis}", dim - ONE if c < 0 else Lin())
        coef = lin.coef()
        if any(k not in SIZES for k in coef) or coef.get("B", 0) < 0:
            return -math.inf
        length = self.max_length
        past_max = length - 1 if self.has_past else 0
        vertices = [(1, 0), (length, 0), (1, past_max)]  # (S, P): S >= 1, P >= 0, S + P <= L
        base = lin.const + coef.get("B", 0)
        return min(base + coef.get("S", 0) * s + coef.get("P", 0) * p for s, p in vertices)

    def always(self, lin: Lin, dims: Sequence[Lin]) -> bool:
        return self.minimum(lin, dims) >= 0


REFUSED = "mask not proven causal: "
"""How every mask refusal starts."""


def refuse(why: str) -> RefusedError:
    return RefusedError(f"{REFUSED}{why}")


def canonical(atom: Atom) -> Atom:
    if isinstance(atom, PadAtom):
        return atom
    gcd = 0
    for _, v in atom.terms:
        gcd = math.gcd(gcd, abs(v))
    if gcd <= 1:
        return atom
    return Lin(tuple((k, v // gcd) for k, v in atom.terms), atom.const // gcd)


def simplify(pred: Pred) -> Pred:
    """``pred`` without its constant atoms: one that fails makes it false everywhere."""
    if pred is None:
        return None
    constant = [a for a in pred if isinstance(a, Lin) and a.is_const()]
    if any(a.const < 0 for a in constant):
        return None
    return frozenset(pred - set(constant)) if constant else pred


def conj(a: Pred, b: Pred) -> Pred:
    return None if a is None or b is None else simplify(frozenset(a | b))


def negate(pred: Pred) -> Pred | Unknown:
    if pred is None:
        return frozenset()
    if not pred:
        return None
    if len(pred) == 1:
        (atom,) = pred
        return frozenset({negate_atom(atom)})
    return Unknown("negation of a conjunction")


def negate_atom(atom: Atom) -> Atom:
    """``not atom``: ``not (e >= 0)`` is ``-e - 1 >= 0``; a padding atom flips ``held``."""
    if isinstance(atom, PadAtom):
        return dataclasses.replace(atom, held=not atom.held)
    return atom.scale(-1) - ONE


def broadcast_dims(all_dims: Sequence[tuple[Lin, ...]]) -> tuple[Lin, ...]:
    rank = max((len(d) for d in all_dims), default=0)
    out = []
    for axis in range(rank):
        sizes = {d[axis - rank + len(d)] for d in all_dims if axis - rank + len(d) >= 0}
        sizes.discard(ONE)
        if len(sizes) > 1:
            raise refuse(f"broadcast of dims {', '.join(map(str, sizes))} not proven equal")
        out.append(sizes.pop() if sizes else ONE)
    return tuple(out)


def map_elem(elem: Elem, mapping: Mapping[str, Lin]) -> Elem:
    """``elem`` with coordinates renamed/substituted simultaneously."""

    def lin(value: Lin) -> Lin:
        result = Lin(tuple((k, v) for k, v in value.terms if k not in mapping), value.const)
        for k, v in value.terms:
            if k in mapping:
                result = result + mapping[k].scale(v)
        return result

    if isinstance(elem, Lin):
        return lin(elem)

    def atoms(items: frozenset[Atom]) -> frozenset[Atom]:
        return frozenset(
            dataclasses.replace(a, b=lin(a.b), j=lin(a.j)) if isinstance(a, PadAtom) else lin(a)
            for a in items
        )

    if isinstance(elem, frozenset):
        return atoms(elem)
    if isinstance(elem, PadInput):
        return PadInput(lin(elem.b), lin(elem.j))
    if isinstance(elem, AnyOf):
        return AnyOf(atoms(elem.atoms))
    if isinstance(elem, Indicator):
        pred = map_elem(elem.pred, mapping)
        assert pred is None or isinstance(pred, (frozenset, AnyOf))
        return Indicator(pred)
    if isinstance(elem, MaskPlusPad):
        allowed, pad = map_elem(elem.allowed, mapping), map_elem(elem.pad, mapping)
        assert (allowed is None or isinstance(allowed, frozenset)) and isinstance(pad, PadInput)
        return MaskPlusPad(allowed, pad)
    if isinstance(elem, Index):
        return Index(tuple(lin(x) for x in elem.items))
    if isinstance(elem, FloatMask):
        allowed = map_elem(elem.allowed, mapping)
        assert allowed is None or isinstance(allowed, frozenset)
        return FloatMask(allowed, elem.finite)
    return elem


def rebind(val: Val, out_rank: int) -> Elem:
    """``val``'s element in the numbering of a broadcast output (size-1 axes: 0)."""
    shift = out_rank - len(val.dims)
    mapping = {
        f"x{a}": Lin() if d == ONE else Lin.of(**{f"x{a + shift}": 1})
        for a, d in enumerate(val.dims)
    }
    return map_elem(val.elem, mapping)


def as_field(val: Val) -> Val:
    """A shape vector as an elementwise tensor."""
    if isinstance(val.elem, Vec):
        items = val.elem.items
        if len(set(items)) == 1:
            return Val((Lin.of(len(items)),), items[0])
        return Val((Lin.of(len(items)),), Unknown("a 1-D tensor of different values"))
    return val


def as_vec(val: Val) -> Vec:
    if isinstance(val.elem, Vec):
        return val.elem
    if not val.dims and isinstance(val.elem, Lin):
        return Vec((val.elem,))
    if val.dims == (ONE,) and isinstance(val.elem, Lin):
        return Vec((val.elem,))
    raise refuse("a shape vector that is not known element by element")


def const_val(array: np.ndarray) -> Val:
    flat = array.reshape(-1)
    dims = tuple(Lin.of(int(d)) for d in array.shape)
    if array.dtype.kind in "iu":
        if array.ndim == 1:
            return Val(dims, Vec(tuple(Lin.of(int(x)) for x in flat)))
        if flat.size and np.all(flat == flat[0]):
            return Val(dims, Lin.of(int(flat[0])))
    elif array.dtype == np.bool_:
        if flat.size and np.all(flat == flat[0]):
            return Val(dims, frozenset() if bool(flat[0]) else None)
    elif array.dtype.kind == "f" and flat.size and np.all(flat == flat[0]):
        return Val(dims, FloatConst(float(flat[0])))
    return Val(dims, Unknown("a constant tensor of different values"))


def const_axes(node: ir.Node, index: int = 1) -> list[int] | None:
    value = node.inputs[index] if len(node.inputs) > index else None
    tensor = None if value is None else ir.convenience.get_const_tensor(value)
    if tensor is not None:
        return [int(a) for a in tensor.numpy().reshape(-1)]
    axes = node.attributes.get("axes")
    return None if axes is None else list(axes.as_ints())


def is_lowest(value: float) -> bool:
    return value == -math.inf or value <= -1e30


COMPARE: dict[str, Callable[[Lin, Lin], tuple[Lin, ...]]] = {
    "LessOrEqual": lambda a, b: (b - a,),
    "Less": lambda a, b: (b - a - ONE,),
    "GreaterOrEqual": lambda a, b: (a - b,),
    "Greater": lambda a, b: (a - b - ONE,),
    "Equal": lambda a, b: (a - b, b - a),
}


_COORDINATES = {"x0": "b", "x1": "h", "x2": "i", "x3": "j"}


def show_atom(atom: Atom) -> str:
    if isinstance(atom, PadAtom):
        where = f"attention_mask[{show_atom(atom.b)[:-5]}, {show_atom(atom.j)[:-5]}]"
        return where if atom.held else f"{where} == 0"
    text = str(Lin(tuple((_COORDINATES.get(k, k), v) for k, v in atom.terms), atom.const))
    return f"{text} >= 0"


def check_constant_mask(model: ir.Model, array: np.ndarray, has_past: bool) -> None:
    """A constant mask (a static-shape export): the model runs at its static sizes only,
    so checking every element is the proof."""
    if has_past or any(v.name == "attention_mask" for v in model.graph.inputs):
        raise refuse("a constant mask ignores the past or attention_mask")
    allowed = array if array.dtype == np.bool_ else array == 0
    if array.dtype != np.bool_ and not np.all((array == 0) | (array <= -1e30)):
        raise refuse("a constant float mask with values other than 0 and -inf")
    if array.ndim < 2:
        raise refuse(f"a constant mask of rank {array.ndim}")
    rows, cols = array.shape[-2:]
    expected = np.arange(cols)[None, :] <= np.arange(rows)[:, None] + (cols - rows)
    if not np.array_equal(
        np.broadcast_to(allowed, array.shape), np.broadcast_to(expected, array.shape)
    ):
        raise refuse("a constant mask that is not causal")


def describe_mismatch(extra: set[Atom], missing: set[Atom], has_past: bool) -> str:
    """Why a mask is not causal + window + padding, in a user's terms (details at -v)."""
    past = "past + " if has_past else ""
    parts = []
    for atom in sorted(missing, key=show_atom):
        if isinstance(atom, PadAtom):
            parts.append("it ignores attention_mask (the padding)")
        else:
            parts.append(
                f"a query also sees later keys (no 'key <= {past}query' condition: "
                "bidirectional or not causal attention)"
            )
    for atom in sorted(extra, key=show_atom):
        parts.append(f"it also requires {show_atom(atom)} (i: query, j: key, b: batch row)")
    return "the mask is not causal attention (+ sliding window, + padding): " + "; ".join(parts)


def has_past_input(model: ir.Model) -> bool:
    """Whether the graph has a KV cache input (a 4-D input named ``past...``)."""
    return any(
        v.shape is not None and len(v.shape) == 4 and "past" in (v.name or "")
        for v in model.graph.inputs
    )


def handler_name(op_type: str) -> str:
    """The interpreter method that reads ``op_type``: ``CumSum`` -> ``op_cum_sum``."""
    return "op_" + re.sub(r"(?<!^)(?=[A-Z][a-z])", "_", op_type).lower()
