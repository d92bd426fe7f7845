"""Graph inputs as symbolic values, for the mask proof (its rule Sizes).

Dims get sizes by the input's role: dim 0 of every input is ``B``; ``attention_mask``
``[B, P + S]`` (the decoder input contract: the mask covers past and current tokens);
``past*`` 4-D inputs ``[B, Hkv, P, D]``; other 2-D integer inputs (``input_ids``,
``position_ids``) ``[B, S]``; other inputs' dims by the names those share; static dims are
their value; any other symbolic dim is a size of its own (which refuses where it matters).
``attention_mask``'s elements are its values; any other input's are Unknown.
"""

from __future__ import annotations

__all__ = ["input_val"]

import onnx_ir as ir

from onnxscript_ep_passes.fusion.mask_terms import Elem, Lin, PadInput, Unknown, Val, refuse


def _roles(value: ir.Value, has_past: bool) -> list[Lin | None]:
    """Sizes of ``value``'s dims by its role (rule Sizes); [] for an input without one."""
    name, rank = value.name or "", len(value.shape or ())
    total = Lin.of(S=1, P=1) if has_past else Lin.of(S=1)
    if name == "attention_mask":
        return [Lin.of(B=1), total]
    if rank == 4 and "past" in name:
        return [Lin.of(B=1), None, Lin.of(P=1), None]
    if rank == 2 and value.dtype is not None and value.dtype.is_integer():
        return [Lin.of(B=1), Lin.of(S=1)]  # input_ids, position_ids
    return []


def _named(graph: ir.Graph, has_past: bool) -> dict[str, Lin]:
    """Symbolic dim names given a size by a decoder input's role."""
    named: dict[str, Lin] = {}
    for value in graph.inputs:
        for dim, role in zip(value.shape or (), _roles(value, has_past)):
            if role is not None and not isinstance(dim, int):
                named.setdefault(str(dim), role)
    return named


def input_val(graph: ir.Graph, value: ir.Value, has_past: bool) -> Val:
    """A graph input's symbolic value: its dims by role (rule Sizes), ``attention_mask``
    its values, any other input Unknown."""
    name = value.name or ""
    shape = value.shape
    if shape is None:
        raise refuse(f"graph input {name!r} of unknown rank")
    roles, named = _roles(value, has_past), _named(graph, has_past)
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
