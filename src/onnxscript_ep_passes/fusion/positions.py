"""Position and token index paths an EP without int64 kernels would run on the host.

Decoders compute their position ids as ``arange(0, S)`` in int64 (torch's ``Range``) and
look their token embeddings up through an int64 ``Reshape`` of ``input_ids``. An EP with no
int64 ``Range`` or ``Reshape`` kernel (WebGPU) runs those on the CPU and copies the result
over (one Memcpy each). Both rewrites below compute the same values, exactly:

- :func:`fuse_int32_positions`: ``Range(0, n, 1)`` (int64, ``start`` 0 and ``delta`` 1
  constants) whose ``n`` is ``Squeeze(d)`` of a one-element ``Shape`` slice ``d`` (so
  ``n >= 0``), and whose values reach only ``Cast`` (to a float type, int32 or int64) or
  the indices of ``Gather`` through ``Unsqueeze`` / ``Squeeze`` / ``Reshape`` (data input)
  / ``Identity``, and no graph output -> the same ``Range`` in int32 (``n`` cast to int32),
  then ``Reshape(r, d)``, and the same chain in int32. Each value ``0 <= v < n`` is equal in
  int32 and int64 while ``n < 2**31``, and a Cast of an equal integer gives the same result;
  ``Gather`` reads the same rows (int32 indices are allowed). The ``Reshape`` to ``d``
  (``[n]``) is the guard: for ``n >= 2**31`` the int32 ``Range`` cannot have ``n``
  elements, so the rewritten model fails there instead of computing something else.
- :func:`fuse_gather_before_reshape`: ``Gather(T, Reshape(X, s))`` (``T`` a constant float
  table, ``axis`` 0, the Reshape used only there) -> ``Reshape(Gather(T, X), s ++ T.shape[1:])``:
  an axis-0 Gather appends ``T``'s trailing dims to the indices' shape, so gathering first
  and reshaping with those dims appended moves the same elements; ``-1`` is inferred to
  the same size, and the Reshape fails exactly when the original's does (the element
  counts are the original's times ``prod(T.shape[1:]) > 0``). Needs ``allowzero=1``, or
  ``s`` no longer than ``X``'s rank (a 0 then copies a dim of ``X``, the same in the
  gathered tensor). When ``s`` is a ``Concat`` used only there, the new shape is that
  Concat with the trailing dims appended (no extra node).

Each returns ``(rewritten, refused)``: the count and, per node left alone that looked like
a candidate, why; it changes the model in place.
"""

from __future__ import annotations

__all__ = ["fuse_gather_before_reshape", "fuse_int32_positions"]

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as common_passes

from onnxscript_ep_passes.core.onnx_utils import is_onnx_op
from onnxscript_ep_passes.fusion.attention import Constants, replace_output

_CHAIN = frozenset(("Unsqueeze", "Squeeze", "Reshape", "Identity"))
_CAST_TO = frozenset(
    (
        ir.DataType.FLOAT,
        ir.DataType.FLOAT16,
        ir.DataType.BFLOAT16,
        ir.DataType.DOUBLE,
        ir.DataType.INT32,
        ir.DataType.INT64,
    )
)
_INT32_MAX = 2**31 - 1


def _scalar(value: ir.Value | None) -> int | None:
    tensor = None if value is None else ir.convenience.get_const_tensor(value)
    if tensor is None:
        return None
    array = tensor.numpy()
    return int(array) if array.size == 1 and np.issubdtype(array.dtype, np.integer) else None


def _shape_slice(value: ir.Value | None) -> bool:
    """Whether ``value`` is a one-element slice of a ``Shape`` (a dim: never negative)."""
    node = None if value is None else value.producer()
    if not is_onnx_op(node, "Shape") or value is None or value.shape is None:
        return False
    return list(value.shape) == [1]


def _sink(node: ir.Node, index: int) -> bool:
    """Whether ``node`` reads its input ``index`` the same in int32: Gather's indices, or
    a Cast to a type of :data:`_CAST_TO`."""
    if node.op_type == "Gather":
        return index == 1
    return node.op_type == "Cast" and node.attributes.get_int("to", 0) in _CAST_TO


def _chain(start: ir.Value) -> tuple[list[ir.Value], str | None]:
    """The values ``start`` reaches through the copy ops, or why one is used otherwise."""
    values, pending = [], [start]
    while pending:
        value = pending.pop()
        values.append(value)
        if value.is_graph_output():
            return values, f"{value.name!r} is a graph output (it must stay int64)"
        for use in value.uses():
            node = use.node
            if node.domain not in ("", "ai.onnx"):
                return values, f"{node.name!r} ({node.domain}::{node.op_type}) reads the ids"
            if node.op_type in _CHAIN and use.idx == 0:
                pending.append(node.outputs[0])
            elif not _sink(node, use.idx):
                return values, (
                    f"{node.name!r} ({node.op_type}, input {use.idx}) reads the ids as int64"
                )
    return values, None


def _check_range(node: ir.Node) -> tuple[ir.Value, list[ir.Value]] | None:
    """``(d, chain)`` of a ``Range`` the rewrite takes (module docstring; None: not int64);
    raises ValueError with the reason otherwise."""
    start, limit, delta = node.inputs[:3]
    if node.outputs[0].dtype != ir.DataType.INT64:
        return None
    if _scalar(start) != 0 or _scalar(delta) != 1:
        raise ValueError("start is not the constant 0 or delta not the constant 1")
    squeeze = None if limit is None else limit.producer()
    if not is_onnx_op(squeeze, "Squeeze") or squeeze is None or not _shape_slice(squeeze.inputs[0]):
        raise ValueError("the end is not a dimension (Squeeze of a one-element Shape slice)")
    dim = squeeze.inputs[0]
    assert dim is not None
    chain, why = _chain(node.outputs[0])
    if why:
        raise ValueError(why)
    return dim, chain


def _each(
    model: ir.Model,
    op: str,
    check: Callable[[ir.Node], Any],
    rewrite: Callable[[ir.Node, Any], None],
    what: str,
) -> tuple[int, dict[str, str]]:
    """Rewrite each main-graph ``op`` node that ``check`` takes (it returns what
    ``rewrite`` needs; None: not a candidate; ValueError: refused, with the reason)."""
    count, refused = 0, {}
    for node in list(model.graph):
        if not is_onnx_op(node, op):
            continue
        try:
            found = check(node)
        except ValueError as error:
            refused[node.name or op] = f"{what}: {error}"
            continue
        if found is not None:
            rewrite(node, found)
            count += 1
    if count:
        common_passes.RemoveUnusedNodesPass()(model)
    return count, refused


def fuse_int32_positions(model: ir.Model) -> tuple[int, dict[str, str]]:
    """int64 ``Range(0, n, 1)`` position ids -> int32 ones (module docstring)."""
    const = Constants(model.graph, "int32_positions")

    def rewrite(node: ir.Node, found: tuple[ir.Value, list[ir.Value]]) -> None:
        dim, chain = found
        name = node.name or "Range"
        to32 = {"to": ir.DataType.INT32}
        cast = ir.node("Cast", [node.inputs[1]], attributes=to32, name=f"{name}/n32")
        zero = const("zero", np.array(0, np.int32))
        one = const("one", np.array(1, np.int32))
        ranged = ir.node("Range", [zero, cast.outputs[0], one], name=f"{name}/int32")
        guard = ir.node("Reshape", [ranged.outputs[0], dim], name=f"{name}/guard")
        for new in (cast, ranged, guard):
            new.outputs[0].dtype = ir.DataType.INT32
            new.outputs[0].shape = node.outputs[0].shape if new is not cast else ir.Shape([])
        model.graph.insert_before(node, [cast, ranged, guard])
        ir.convenience.replace_all_uses_with(node.outputs[0], guard.outputs[0])
        for value in chain[1:]:  # a new type object: clones of the model share the old one
            value.type = ir.TensorType(ir.DataType.INT32)
        model.graph.remove(node, safe=True)

    return _each(model, "Range", _check_range, rewrite, "position ids left in int64")


def _check_reshape(gather: ir.Node) -> tuple[ir.Node, np.ndarray] | None:
    """``(reshape, table)`` of a Gather the rewrite takes (None: its indices are no
    Reshape); raises ValueError otherwise."""
    if not is_onnx_op(_producer(gather.inputs[1]), "Reshape"):
        return None
    if gather.attributes.get_int("axis", 0) != 0:
        raise ValueError("not an axis-0 lookup")
    tensor = ir.convenience.get_const_tensor(gather.inputs[0]) if gather.inputs[0] else None
    table = None if tensor is None else tensor.numpy()
    if table is None or table.ndim < 2 or not np.issubdtype(table.dtype, np.floating):
        raise ValueError("the table is not a constant float tensor of rank >= 2")
    if min(table.shape[1:]) <= 0:
        raise ValueError("the table has an empty trailing dim")
    indices = gather.inputs[1]
    reshape = None if indices is None else indices.producer()
    if indices is None or reshape is None or not is_onnx_op(reshape, "Reshape"):
        raise ValueError("the indices are not a Reshape")
    if len(indices.uses()) != 1 or indices.is_graph_output():
        raise ValueError("the reshaped indices have other uses")
    data, shape = reshape.inputs[:2]
    if data is None or shape is None:
        raise ValueError("the Reshape has no data or shape")
    if reshape.attributes.get_int("allowzero", 0) != 1:
        length = shape.shape[0] if shape.shape is not None and len(shape.shape) == 1 else None
        rank = None if data.shape is None else len(data.shape)
        if not isinstance(length, int) or rank is None or length > rank:
            raise ValueError("allowzero=0 with a shape that may copy a dim the lookup adds")
    return reshape, table


def fuse_gather_before_reshape(model: ir.Model) -> tuple[int, dict[str, str]]:
    """``Gather(T, Reshape(X, s))`` -> ``Reshape(Gather(T, X), s ++ T.shape[1:])``."""
    const = Constants(model.graph, "gather_before_reshape")

    def rewrite(gather: ir.Node, found: tuple[ir.Node, np.ndarray]) -> None:
        reshape, table = found
        data, shape = reshape.inputs[:2]
        assert data is not None and shape is not None
        trailing = const("trailing", np.array(table.shape[1:], np.int64))
        concat = shape.producer()
        name = gather.name or "Gather"
        if is_onnx_op(concat, "Concat") and concat is not None and len(shape.uses()) == 1:
            pieces = [*concat.inputs, trailing]
        else:
            pieces = [shape, trailing]
        grown = ir.node("Concat", pieces, attributes={"axis": 0}, name=f"{name}/shape")
        grown.outputs[0].dtype = ir.DataType.INT64
        looked = ir.node("Gather", [gather.inputs[0], data], attributes={"axis": 0}, name=name)
        dtype = gather.outputs[0].dtype or ir.DataType.from_numpy(table.dtype)
        allowzero = {"allowzero": reshape.attributes.get_int("allowzero", 0)}
        out = ir.node("Reshape", [looked.outputs[0], grown.outputs[0]], attributes=allowzero)
        out.name = f"{name}/reshape"
        looked.outputs[0].dtype = out.outputs[0].dtype = dtype
        out.outputs[0].shape = gather.outputs[0].shape
        model.graph.insert_before(gather, [grown, looked, out])
        replace_output(gather.outputs[0], out.outputs[0])
        model.graph.remove(gather, safe=True)

    return _each(model, "Gather", _check_reshape, rewrite, "lookup left after the Reshape")


def _producer(value: ir.Value | None) -> ir.Node | None:
    return None if value is None else value.producer()
