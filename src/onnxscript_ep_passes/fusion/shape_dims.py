"""One dim of a value as a 1-D int64 tensor, read from where the graph already has it.

A fusion that needs a size (``Shape(q)[2:3]``) would add a ``Shape`` node; when ``q`` is a
``Transpose``, ORT rewrites that into ``Shape`` + ``Gather`` of the transposed input, both
on the CPU. :func:`dim_of` walks back to a value the graph already computes, by rules that
hold for every input:

- ``Transpose(x, perm)``: dim ``a`` is dim ``perm[a]`` of ``x``;
- ``RotaryEmbedding(x, ...)`` (ai.onnx): its output has ``x``'s shape;
- ``Slice(x, starts, ends, axes[, steps])`` with constant ``axes`` (against ``x``'s known
  rank) without ``a``: dim ``a`` is that of ``x``;
- ``Concat(x, ..., axis=c)`` with ``c`` (taken against the output's known rank) not ``a``:
  dim ``a`` is that of ``x`` (Concat needs every input to have it);
- ``Reshape(x, Concat(p0, p1, ...))`` with ``allowzero=1``, each ``pi`` of static shape
  ``[1]``: dim ``a`` is ``pa`` when ``pa`` is a one-element ``Shape`` slice (never
  negative, so neither ``-1`` nor, with ``allowzero=1``, a copy): the Reshape outputs
  exactly that dim, or fails;
- otherwise ``Shape(value, start=a, end=a + 1)`` (a new node, made by ``add``).
"""

from __future__ import annotations

__all__ = ["dim_of"]

from collections.abc import Callable

import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import is_onnx_op


def _one(value: ir.Value | None) -> bool:
    return value is not None and value.shape is not None and list(value.shape) == [1]


def _reshaped_dim(node: ir.Node, axis: int) -> ir.Value | None:
    """The Concat piece a Reshape (``allowzero=1``) outputs as dim ``axis``, if proven."""
    if node.attributes.get_int("allowzero", 0) != 1 or len(node.inputs) < 2:
        return None
    concat = node.inputs[1].producer() if node.inputs[1] is not None else None
    if concat is None or not is_onnx_op(concat, "Concat") or not 0 <= axis < len(concat.inputs):
        return None
    if not all(_one(v) for v in concat.inputs):
        return None
    piece = concat.inputs[axis]
    producer = None if piece is None else piece.producer()
    return piece if is_onnx_op(producer, "Shape") else None


def _slices_other(node: ir.Node, axis: int) -> bool:
    """Whether a Slice's constant axes leave ``axis`` of its input alone."""
    data = node.inputs[0]
    axes = node.inputs[3] if len(node.inputs) > 3 else None
    rank = None if data is None or data.shape is None else len(data.shape)
    tensor = None if axes is None else ir.convenience.get_const_tensor(axes)
    if rank is None or tensor is None:
        return False
    return all(int(a) % rank != axis for a in tensor.numpy().reshape(-1))


def dim_of(value: ir.Value, axis: int, add: Callable[..., ir.Value]) -> ir.Value:
    """Dim ``axis`` of ``value`` (1-D int64, module docstring); ``add(op, inputs, **attrs)``
    makes a node when none is found."""
    current, current_axis = value, axis
    while True:
        node = current.producer()
        if is_onnx_op(node, "Transpose") and node is not None and node.inputs[0] is not None:
            perm = node.attributes.get_ints("perm", None)
            if perm is None or not 0 <= current_axis < len(perm):
                break
            current, current_axis = node.inputs[0], perm[current_axis]
            continue
        if is_onnx_op(node, "RotaryEmbedding") and node is not None and node.inputs[0] is not None:
            current = node.inputs[0]
            continue
        if is_onnx_op(node, "Slice") and node is not None and _slices_other(node, current_axis):
            current = node.inputs[0]  # type: ignore[assignment]
            continue
        if is_onnx_op(node, "Concat") and node is not None and node.inputs[0] is not None:
            rank = None if current.shape is None else len(current.shape)
            concat_axis = node.attributes.get_int("axis", 0)
            if rank is not None and concat_axis % rank != current_axis:
                current = node.inputs[0]
                continue
        if is_onnx_op(node, "Reshape") and node is not None:
            found = _reshaped_dim(node, current_axis)
            if found is not None:
                return found
        break
    return add("Shape", [current], start=current_axis, end=current_axis + 1)
