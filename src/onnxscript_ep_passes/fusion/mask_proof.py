"""Prove from the graph that an attention mask is causal (AND the attention_mask's padding).

:func:`prove_causal_mask` interprets the subgraph that computes an ``Attention`` mask
symbolically, for every input size at once, and raises
:class:`~onnxscript_ep_passes.fusion.attention_match.RefusedError` (with the reason) unless
it proves that the mask allows query ``i`` to see key ``j`` exactly when::

    j <= past + i  [AND  j > past + i - W]  AND  attention_mask[b, j] != 0

(the window only for a constant ``W >= 1``, returned; the padding only with that input).

Rules:

- **Sizes.** ``B`` (batch), ``S`` (current tokens), ``P`` (past tokens; 0 without a
  ``past`` graph input). Graph-input dims get them by role: dim 0 of every input is ``B``;
  ``attention_mask`` ``[B, P + S]`` (the decoder input contract: the mask covers past and
  current tokens); ``past*`` 4-D inputs ``[B, Hkv, P, D]``; other 2-D integer inputs
  (``input_ids``, ``position_ids``) ``[B, S]``; other inputs' dims by the names those
  share; static dims are their value. Any other symbolic dim in the proof refuses.
  Bounds: ``B >= 1``, ``S >= 1``, ``P >= 0`` and ``P + S <= max_length`` (the fused node's
  limit: its rotary caches have ``max_length`` rows).
- **Values.** Each tensor is a function of its own coordinates ``x0, x1, ...``: shape
  arithmetic (Shape, Squeeze, Unsqueeze, Concat, Reshape to 1-D or keeping the shape,
  Gather, Cast, Add, Sub, Mul by a constant, Max/Min that the bounds decide) is linear in
  the sizes; ``Range(a, n, 1)`` is ``a + x0``; broadcasting binds coordinates;
  comparisons (``LessOrEqual``, ``Less``, ``Greater``, ``GreaterOrEqual``, ``Equal``) give
  linear atoms;
  ``And``/``Not``/``Where``/``Trilu``/``Expand``/``ConstantOfShape`` combine them;
  ``GatherND(Cast(attention_mask, bool), [b, j])`` is the padding atom. A float mask is
  ``Where(allowed, 0, -inf or the lowest float)`` or built in float arithmetic as
  transformers 4.4x does (:mod:`~onnxscript_ep_passes.fusion.mask_float`).
- **Decision.** The mask's predicate is a conjunction of atoms. Atoms that hold on the
  whole domain (coordinates inside the mask's shape, sizes inside their bounds) are
  dropped; what is left must be exactly the causal atom ``P + i - j >= 0``, at most one
  sliding-window atom ``j - P - i + (W - 1) >= 0`` with a constant ``W >= 1`` (HF's window
  of ``W`` tokens: the query sees itself and the ``W - 1`` keys before it; a window that
  cannot bind below ``max_length`` is dropped as always true, giving no window) and, when
  the graph has ``attention_mask``, ``attention_mask[b, j]``. Key positions shifted by the
  past (``max(0, P - W + 1)``), a window that is not a constant, values this interpreter
  does not know, or an op it does not model: refused, with the reason.

A constant mask (static-shape exports fold it) is checked element by element: the model
accepts only its static sizes, so that is a proof too.

Nothing here changes the model.
"""

from __future__ import annotations

__all__ = ["prove_causal_mask"]

import logging
from collections.abc import Callable, Sequence

import numpy as np
import onnx_ir as ir

from onnxscript_ep_passes.fusion.attention_match import RefusedError
from onnxscript_ep_passes.fusion.mask_float import (
    disjoin,
    float_product,
    float_sum,
    masked_equal,
    where_val,
)
from onnxscript_ep_passes.fusion.mask_pieces import (
    cast_val,
    concat_pieces,
    cumsum_val,
    gather_nd_val,
    reshape_keeps,
    reshape_units,
    slice_val,
    trilu_val,
)
from onnxscript_ep_passes.fusion.mask_terms import (
    COMPARE,
    ONE,
    REFUSED,
    Atom,
    Bounds,
    Elem,
    FloatMask,
    Index,
    Lin,
    PadAtom,
    PadInput,
    Unknown,
    Val,
    Vec,
    as_field,
    as_vec,
    broadcast_dims,
    canonical,
    check_constant_mask,
    conj,
    const_axes,
    const_val,
    describe_mismatch,
    handler_name,
    has_past_input,
    map_elem,
    negate,
    rebind,
    refuse,
    show_atom,
    simplify,
)

logger = logging.getLogger(__name__)


def _unfollowed(node: ir.Node, detail: str) -> RefusedError:
    """A refusal naming ``node`` in user terms; the interpreter's reason goes to ``-v``."""
    logger.debug("mask proof stops at %s node %r: %s", node.op_type, node.name, detail)
    return RefusedError(
        f"{REFUSED}it is computed by {node.op_type} node {node.name!r} in a way the proof "
        "cannot follow, so the attention stays unfused (exact); -v logs why",
        detail=detail,
    )


class _Interpreter:
    """Symbolic values of a graph's values (rule Values), computed on demand."""

    def __init__(self, graph: ir.Graph, bounds: Bounds) -> None:
        self.graph = graph
        self.bounds = bounds
        self.cache: dict[ir.Value, Val] = {}

    def value(self, value: ir.Value) -> Val:
        if value not in self.cache:
            self.cache[value] = self._compute(value)
        return self.cache[value]

    def _compute(self, value: ir.Value) -> Val:
        tensor = ir.convenience.get_const_tensor(value)
        if tensor is not None:
            return const_val(tensor.numpy())
        node = value.producer()
        if node is None:
            return self._input(value)
        handler = getattr(self, handler_name(node.op_type), None)
        if node.domain not in ("", "ai.onnx") or handler is None:
            raise _unfollowed(node, f"{node.op_type} is not modelled")
        if value is not node.outputs[0]:
            raise _unfollowed(node, f"output {value.name!r} of {node.op_type} is not modelled")
        try:
            result: Val = handler(node, [None if v is None else v for v in node.inputs])
        except RefusedError as error:
            if error.detail is not None:  # located at an input's node already
                raise
            raise _unfollowed(node, str(error).removeprefix(REFUSED)) from None
        return result

    def _roles(self, value: ir.Value) -> list[Lin | None]:
        """Sizes of ``value``'s dims by its role (rule Sizes); [] for an input without one."""
        name, rank = value.name or "", len(value.shape or ())
        total = Lin.of(S=1, P=1) if self.bounds.has_past else Lin.of(S=1)
        if name == "attention_mask":
            return [Lin.of(B=1), total]
        if rank == 4 and "past" in name:
            return [Lin.of(B=1), None, Lin.of(P=1), None]
        if rank == 2 and value.dtype is not None and value.dtype.is_integer():
            return [Lin.of(B=1), Lin.of(S=1)]  # input_ids, position_ids
        return []

    def _named(self) -> dict[str, Lin]:
        """Symbolic dim names given a size by a decoder input's role."""
        named: dict[str, Lin] = {}
        for value in self.graph.inputs:
            for dim, role in zip(value.shape or (), self._roles(value)):
                if role is not None and not isinstance(dim, int):
                    named.setdefault(str(dim), role)
        return named

    def _input(self, value: ir.Value) -> Val:
        name = value.name or ""
        shape = value.shape
        if shape is None:
            raise refuse(f"graph input {name!r} of unknown rank")
        roles, named = self._roles(value), self._named()
        dims = []
        for axis, dim in enumerate(shape):
            role = roles[axis] if axis < len(roles) else named.get(str(dim))
            if isinstance(dim, int):
                dims.append(Lin.of(dim))
            else:
                dims.append(role or Lin.of(**{f"?{dim}": 1}))
        why = f"it depends on the values of input {name!r}, not only on sizes and padding"
        elem: Elem = PadInput() if name == "attention_mask" else Unknown(why)
        return Val(tuple(dims), elem)

    def _arg(self, inputs: Sequence[ir.Value | None], index: int) -> Val:
        value = inputs[index] if index < len(inputs) else None
        if value is None:
            raise refuse(f"missing input {index}")
        return self.value(value)

    # -- shape arithmetic ---------------------------------------------------------------

    def op_identity(self, node: ir.Node, inputs: list) -> Val:
        return self._arg(inputs, 0)

    def op_cast(self, node: ir.Node, inputs: list) -> Val:
        return cast_val(self._arg(inputs, 0), ir.DataType(node.attributes.get_int("to", 0)))

    def op_shape(self, node: ir.Node, inputs: list) -> Val:
        dims = self._arg(inputs, 0).dims
        start = node.attributes.get_int("start", 0)
        end = node.attributes.get_int("end", len(dims))
        items = dims[start:end]
        return Val((Lin.of(len(items)),), Vec(items))

    def op_squeeze(self, node: ir.Node, inputs: list) -> Val:
        x = self._arg(inputs, 0)
        if isinstance(x.elem, Vec) and len(x.elem.items) == 1:
            return Val((), x.elem.items[0])
        rank = len(x.dims)
        axes = const_axes(node)
        if axes is None and not all(d.is_const() for d in x.dims):
            raise refuse("Squeeze without axes of a tensor with symbolic dims")
        drop = (
            {a % rank for a in axes}
            if axes is not None
            else {a for a, d in enumerate(x.dims) if d == ONE}
        )
        if any(x.dims[a] != ONE for a in drop):
            raise refuse("Squeeze of an axis not proven to be 1")
        keep = [a for a in range(rank) if a not in drop]
        mapping = {f"x{a}": Lin() for a in drop}
        mapping.update({f"x{a}": Lin.of(**{f"x{n}": 1}) for n, a in enumerate(keep)})
        return Val(tuple(x.dims[a] for a in keep), map_elem(x.elem, mapping))

    def op_unsqueeze(self, node: ir.Node, inputs: list) -> Val:
        x = self._arg(inputs, 0)
        axes = const_axes(node)
        if axes is None:
            raise refuse("Unsqueeze without constant axes")
        if isinstance(x.elem, Vec):
            x = as_field(x)
        rank = len(x.dims) + len(axes)
        new = sorted(a % rank for a in axes)
        old = [a for a in range(rank) if a not in new]
        dims = [ONE] * rank
        for n, a in enumerate(old):
            dims[a] = x.dims[n]
        mapping = {f"x{n}": Lin.of(**{f"x{a}": 1}) for n, a in enumerate(old)}
        return Val(tuple(dims), map_elem(x.elem, mapping))

    def op_concat(self, node: ir.Node, inputs: list) -> Val:
        parts = [self._arg(inputs, i) for i in range(len(inputs))]
        axis = node.attributes.get_int("axis", 0)
        if all(len(p.dims) <= 1 for p in parts):
            items = tuple(x for p in parts for x in as_vec(p).items)
            return Val((Lin.of(len(items)),), Vec(items))
        rank = len(parts[0].dims)
        if axis % rank != rank - 1 or any(p.dims[-1] != ONE for p in parts):
            return concat_pieces(parts, axis)
        dims = broadcast_dims([p.dims[:-1] for p in parts])
        if any(p.dims[:-1] != dims for p in parts):
            raise refuse("Concat of index coordinates of different shapes")
        items = tuple(p.elem for p in parts if isinstance(p.elem, Lin))
        if len(items) != len(parts):
            return Val((*dims, Lin.of(len(parts))), Unknown("index coordinates"))
        return Val((*dims, Lin.of(len(parts))), Index(items))

    def op_reshape(self, node: ir.Node, inputs: list) -> Val:
        x, shape = self._arg(inputs, 0), as_vec(self._arg(inputs, 1))
        if len(shape.items) == 1 and shape.items[0] in (Lin.of(-1), ONE) and len(x.dims) <= 1:
            return Val((ONE,), Vec(as_vec(x).items))
        if reshape_keeps(x.dims, shape.items, node.attributes.get_int("allowzero", 0)):
            return x
        moved = reshape_units(as_field(x), shape.items)
        if moved is not None:
            return moved
        raise refuse("Reshape other than a no-op or to a 1-element vector")

    def op_slice(self, node: ir.Node, inputs: list) -> Val:
        starts, ends = (as_vec(self._arg(inputs, i)).items for i in (1, 2))
        axes, steps = (
            const_axes(node, i) if len(inputs) > i and inputs[i] else None for i in (3, 4)
        )
        return slice_val(self._arg(inputs, 0), starts, ends, axes, steps, self.bounds)

    def op_cum_sum(self, node: ir.Node, inputs: list) -> Val:
        axis = as_vec(self._arg(inputs, 1)).items[0]
        if not axis.is_const():
            raise refuse("CumSum over an axis that is not a constant")
        exclusive = bool(node.attributes.get_int("exclusive", 0))
        reverse = bool(node.attributes.get_int("reverse", 0))
        return cumsum_val(self._arg(inputs, 0), axis.const, exclusive, reverse)

    def op_gather(self, node: ir.Node, inputs: list) -> Val:
        data, index = self._arg(inputs, 0), self._arg(inputs, 1)
        if not isinstance(data.elem, Vec) or node.attributes.get_int("axis", 0) != 0:
            raise refuse("Gather other than from a shape vector")
        items = data.elem.items
        if not index.dims and isinstance(index.elem, Lin) and index.elem.is_const():
            return Val((), items[index.elem.const])
        picked = tuple(items[i.const] for i in as_vec(index).items if i.is_const())
        return Val((Lin.of(len(picked)),), Vec(picked))

    def op_range(self, node: ir.Node, inputs: list) -> Val:
        start, limit, delta = (self._arg(inputs, i) for i in range(3))
        if not (start.dims == () or start.dims == (ONE,)) or delta.elem not in (ONE, Vec((ONE,))):
            raise refuse("Range other than with a scalar start and step 1")
        first, last = as_vec(start).items[0], as_vec(limit).items[0]
        return Val((last - first,), first + Lin.of(x0=1))

    def op_constant_of_shape(self, node: ir.Node, inputs: list) -> Val:
        dims = as_vec(self._arg(inputs, 0)).items
        attr = node.attributes.get("value")
        fill = np.zeros(1, np.float32) if attr is None else attr.as_tensor().numpy()
        return Val(dims, const_val(fill.reshape(-1)[:1].reshape(())).elem)

    def op_expand(self, node: ir.Node, inputs: list) -> Val:
        x, shape = self._arg(inputs, 0), as_vec(self._arg(inputs, 1)).items
        dims = broadcast_dims([x.dims, shape])
        return Val(dims, rebind(as_field(x), len(dims)))

    # -- elementwise --------------------------------------------------------------------

    def _elementwise(self, inputs: list) -> tuple[tuple[Lin, ...], list[Elem]]:
        vals = [as_field(self._arg(inputs, i)) for i in range(len(inputs))]
        dims = broadcast_dims([v.dims for v in vals])
        return dims, [rebind(v, len(dims)) for v in vals]

    def _arith(
        self,
        inputs: list,
        combine: Callable[[Lin, Lin], Lin | None],
        floats: Callable[[Elem, Elem, tuple[Lin, ...]], Elem | None] = lambda a, b, d: None,
    ) -> Val:
        scalars = [self._arg(inputs, i) for i in range(2)]
        if all(isinstance(s.elem, Vec) for s in scalars):
            a, b = (s.elem.items for s in scalars)  # type: ignore[union-attr]
            if len(a) == len(b):
                combined = [combine(x, y) for x, y in zip(a, b)]
                kept = tuple(x for x in combined if x is not None)
                if len(kept) == len(a):
                    return Val((Lin.of(len(a)),), Vec(kept))
        dims, (a, b) = self._elementwise(inputs)
        if (read := floats(a, b, dims)) is not None:
            return Val(dims, read)
        if isinstance(a, FloatMask) and isinstance(b, FloatMask):
            return Val(dims, FloatMask(conj(a.allowed, b.allowed)))
        if not isinstance(a, Lin) or not isinstance(b, Lin):
            why = a.why if isinstance(a, Unknown) else b.why if isinstance(b, Unknown) else ""
            return Val(dims, Unknown(why or "arithmetic on non-integer values"))
        out = combine(a, b)
        return Val(dims, out if out is not None else Unknown(f"arithmetic on {a} and {b}"))

    def op_add(self, node: ir.Node, inputs: list) -> Val:
        return self._arith(inputs, lambda a, b: a + b, lambda a, b, _: float_sum(a, b))

    def op_sub(self, node: ir.Node, inputs: list) -> Val:
        return self._arith(inputs, lambda a, b: a - b)

    def op_mul(self, node: ir.Node, inputs: list) -> Val:
        def mul(a: Lin, b: Lin) -> Lin | None:
            if a.is_const():
                return b.scale(a.const)
            return a.scale(b.const) if b.is_const() else None

        return self._arith(inputs, mul, lambda a, b, d: float_product(a, b, self.bounds, d))

    def _extreme(self, inputs: list, smaller: bool) -> Val:
        dims = broadcast_dims([as_field(self._arg(inputs, i)).dims for i in range(2)])

        def pick(a: Lin, b: Lin) -> Lin | None:
            if self.bounds.always(b - a, dims):
                return a if smaller else b
            if self.bounds.always(a - b, dims):
                return b if smaller else a
            return None

        val = self._arith(inputs, pick)
        if isinstance(val.elem, Unknown) and len(inputs) == 2:
            kind = "min" if smaller else "max"
            return Val(val.dims, Unknown(f"{kind} of values whose order is not fixed"))
        return val

    def op_max(self, node: ir.Node, inputs: list) -> Val:
        return self._extreme(inputs, smaller=False)

    def op_min(self, node: ir.Node, inputs: list) -> Val:
        return self._extreme(inputs, smaller=True)

    def _compare(self, node: ir.Node, inputs: list) -> Val:
        dims, (a, b) = self._elementwise(inputs)
        if node.op_type == "Equal" and (read := masked_equal(a, b)) is not None:
            return Val(dims, read)
        if not isinstance(a, Lin) or not isinstance(b, Lin):
            why = a.why if isinstance(a, Unknown) else b.why if isinstance(b, Unknown) else ""
            return Val(dims, Unknown(why or f"{node.op_type} of non-integer values"))
        return Val(dims, simplify(frozenset(COMPARE[node.op_type](a, b))))

    op_less_or_equal = op_less = op_greater_or_equal = op_greater = op_equal = _compare

    def op_and(self, node: ir.Node, inputs: list) -> Val:
        dims, (a, b) = self._elementwise(inputs)
        for side in (a, b):
            if isinstance(side, Unknown):
                return Val(dims, side)
            if side is not None and not isinstance(side, frozenset):
                return Val(dims, Unknown("And of non-boolean values"))
        return Val(dims, conj(a, b))  # type: ignore[arg-type]

    def op_or(self, node: ir.Node, inputs: list) -> Val:
        dims, (a, b) = self._elementwise(inputs)
        read = disjoin(a, b)
        return Val(dims, read if read is not None else Unknown("an Or of several conditions"))

    def op_not(self, node: ir.Node, inputs: list) -> Val:
        x = self._arg(inputs, 0)
        if x.elem is None or isinstance(x.elem, frozenset):
            return Val(x.dims, negate(x.elem))
        if isinstance(x.elem, Unknown):
            return x
        return Val(x.dims, Unknown("Not of a non-boolean value"))

    def op_where(self, node: ir.Node, inputs: list) -> Val:
        dims, (cond, yes, no) = self._elementwise(inputs)
        return Val(dims, where_val(cond, yes, no))

    def op_trilu(self, node: ir.Node, inputs: list) -> Val:
        x = as_field(self._arg(inputs, 0))
        k = self._arg(inputs, 1).elem if len(inputs) > 1 and inputs[1] is not None else Lin()
        k = as_vec(Val((), k) if isinstance(k, Lin) else Val((ONE,), k)).items[0]
        return trilu_val(x, k, bool(node.attributes.get_int("upper", 1)))

    def op_gathernd(self, node: ir.Node, inputs: list) -> Val:
        if node.attributes.get_int("batch_dims", 0) != 0:
            raise refuse("GatherND with batch_dims")
        return gather_nd_val(self._arg(inputs, 0), self._arg(inputs, 1), self.bounds)


def prove_causal_mask(model: ir.Model, mask: ir.Value, *, max_length: int) -> int | None:
    """Prove ``mask`` (an Attention's input 3) causal AND window AND padding (module docstring).

    Returns:
        The sliding window ``W`` (query ``i`` sees keys ``past + i - W < j``), or None when
        no window can bind below ``max_length``.

    Raises:
        RefusedError: not proven; the message says which condition failed.
    """
    has_past = has_past_input(model)
    tensor = ir.convenience.get_const_tensor(mask)
    if tensor is not None:
        check_constant_mask(model, tensor.numpy(), has_past)
        return None
    bounds = Bounds(has_past, max_length)
    val = _Interpreter(model.graph, bounds).value(mask)
    elem: Elem = val.elem.allowed if isinstance(val.elem, FloatMask) else val.elem
    if isinstance(elem, Unknown):
        raise refuse(elem.why)
    if elem is not None and not isinstance(elem, frozenset):
        raise refuse("not a boolean or additive (0 / -inf) mask")
    if len(val.dims) > 4:
        raise refuse(f"mask of rank {len(val.dims)}")
    shift = 4 - len(val.dims)
    dims = (ONE,) * shift + val.dims
    elem = map_elem(elem, {f"x{a}": Lin.of(**{f"x{a + shift}": 1}) for a in range(len(val.dims))})
    assert elem is None or isinstance(elem, frozenset)
    total = Lin.of(S=1, P=1) if has_past else Lin.of(S=1)
    if dims[2] != Lin.of(S=1) or dims[3] != total:
        raise refuse(f"mask of shape ({', '.join(map(str, dims))}), not (., ., S, {total})")
    if elem is None:
        raise refuse("the mask allows nothing")
    assert isinstance(elem, frozenset)
    left = {canonical(a) for a in elem if isinstance(a, PadAtom) or not bounds.always(a, dims)}
    expected: set[Atom] = {canonical(Lin.of(P=int(has_past), x2=1, x3=-1))}
    window_terms = Lin.of(P=-int(has_past), x2=-1, x3=1).terms
    windows = [a for a in left if isinstance(a, Lin) and a.terms == window_terms]
    window = windows[0].const + 1 if len(windows) == 1 and windows[0].const >= 0 else None
    if window is not None:
        expected.add(windows[0])
    pad = next((v for v in model.graph.inputs if v.name == "attention_mask"), None)
    if pad is not None:
        rows = pad.shape[0] if pad.shape is not None and len(pad.shape) == 2 else None
        if rows != 1 and dims[0] != (Lin.of(rows) if isinstance(rows, int) else Lin.of(B=1)):
            raise refuse(
                "the mask is the same for every batch row"
                if dims[0] == ONE
                else f"the mask's first axis ({dims[0]}) is not the batch"
            )
        expected.add(PadAtom(Lin.of(x0=int(dims[0] != ONE)), Lin.of(x3=1)))
    if left != expected:
        logger.debug(
            "mask %s: conditions beyond causal/window/padding: %s; missing: %s",
            mask.name,
            ", ".join(sorted(show_atom(a) for a in left - expected)) or "-",
            ", ".join(sorted(show_atom(a) for a in expected - left)) or "-",
        )
        raise refuse(describe_mismatch(left - expected, expected - left, has_past))
    return window
