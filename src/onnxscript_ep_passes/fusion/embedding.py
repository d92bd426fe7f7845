"""Embedding lookups by constant indices -> float ops an EP runs without int64 on the host.

Encoders look up their position and token-type embeddings with indices computed from
constant int64 buffers (BERT: ``position_ids[:, :S]``, and ``token_type_ids`` as a zero
buffer gathered and expanded to ``(B, S)``). An EP without int64 kernels (WebGPU) runs that
index arithmetic on the CPU and copies the indices over (one Memcpy each). Both rewrites
below compute the same values from the float table instead, exactly (no arithmetic, only
the same elements moved):

- :func:`fuse_sliced_position_gather`: ``Gather(T, Slice(C, starts, ends[, axes, steps]))``
  with ``T`` and ``C`` constant, ``axis=0`` and every ``C`` in range ->
  ``Slice(take(T, C), starts, ends, axes, steps)`` over the gathered constant (the index
  dims lead the output of an axis-0 Gather, so the same slice applies; negative ``axes``
  are taken against ``C``'s rank, and ``axes`` must then be constant). Refused when the
  gathered constant would be larger than ``T`` and over 2**20 elements.
- :func:`fuse_uniform_index_gather`: ``Gather(T, X)`` with ``T`` constant, ``axis=0``,
  where ``X`` is a constant whose elements all equal ``c`` moved by ops that only copy
  elements of their first input (Expand, GatherElements, Gather, Slice, Reshape, Squeeze,
  Unsqueeze, Transpose, Flatten, Tile, Identity): every element of ``X`` is ``c``, so the
  lookup is ``T[c]`` broadcast. The Gather's only user must be an ``Add`` whose output has
  the other operand's (known) shape and the Gather's; the Add then takes ``T[c]`` and
  broadcasts it the same way.

Each returns the number of Gathers rewritten and changes the model in place.
"""

from __future__ import annotations

__all__ = ["fuse_sliced_position_gather", "fuse_uniform_index_gather"]

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as common_passes

from onnxscript_ep_passes.core.onnx_utils import is_onnx_op
from onnxscript_ep_passes.fusion.attention import Constants

_MAX_GROWTH = 1 << 20
_COPIES = frozenset(
    (
        "Expand",
        "GatherElements",
        "Gather",
        "Slice",
        "Reshape",
        "Squeeze",
        "Unsqueeze",
        "Transpose",
        "Flatten",
        "Tile",
        "Identity",
    )
)


def _const(value: ir.Value | None) -> np.ndarray | None:
    tensor = None if value is None else ir.convenience.get_const_tensor(value)
    return None if tensor is None else tensor.numpy()


def _table_gathers(model: ir.Model) -> list[tuple[ir.Node, np.ndarray]]:
    """The main graph's ai.onnx axis-0 Gathers of a constant float table."""
    found = []
    for node in model.graph:
        if not is_onnx_op(node, "Gather"):
            continue
        if node.attributes.get_int("axis", 0) != 0:
            continue
        table = _const(node.inputs[0])
        if table is not None and table.ndim >= 1 and np.issubdtype(table.dtype, np.floating):
            found.append((node, table))
    return found


def _in_range(indices: np.ndarray, rows: int) -> bool:
    return bool(np.issubdtype(indices.dtype, np.integer)) and bool(
        indices.size == 0 or (indices.min() >= -rows and indices.max() < rows)
    )


def _cleanup(model: ir.Model, count: int) -> int:
    if count:
        common_passes.RemoveUnusedNodesPass()(model)
    return count


def fuse_sliced_position_gather(model: ir.Model) -> int:
    """``Gather(T, Slice(C, ...))`` -> ``Slice(take(T, C), ...)`` (module docstring)."""
    const = Constants(model.graph, "sliced_gather_fusion")
    count = 0
    for node, table in _table_gathers(model):
        sliced = node.inputs[1].producer() if node.inputs[1] is not None else None
        if not is_onnx_op(sliced, "Slice"):
            continue
        indices = _const(sliced.inputs[0])
        if indices is None or indices.ndim == 0 or not _in_range(indices, table.shape[0]):
            continue
        gathered = np.take(table, indices, axis=0)
        if gathered.size > max(table.size, _MAX_GROWTH):
            continue
        inputs = list(sliced.inputs)
        if len(inputs) > 3 and inputs[3] is not None:
            axes = _const(inputs[3])
            if axes is None:
                continue
            inputs[3] = const("axes", np.where(axes < 0, axes + indices.ndim, axes))
        inputs[0] = const(f"{node.name or 'gather'}.table", np.ascontiguousarray(gathered))
        new = ir.node("Slice", inputs, name=f"{node.name or 'Gather'}/Slice")
        new.outputs[0].dtype = ir.DataType.from_numpy(gathered.dtype)
        new.outputs[0].shape = node.outputs[0].shape
        ir.convenience.replace_nodes_and_values(
            model.graph, node, [node], [new], node.outputs, new.outputs
        )
        count += 1
    return _cleanup(model, count)


def _uniform(value: ir.Value | None) -> int | None:
    """The one value every element of ``value`` holds, when its elements are copies of
    a constant's that all hold it (module docstring); else None."""
    while value is not None:
        array = _const(value)
        if array is not None:
            if array.size == 0 or not np.issubdtype(array.dtype, np.integer):
                return None
            first = array.reshape(-1)[0]
            return int(first) if bool((array == first).all()) else None
        node = value.producer()
        if node is None or node.domain not in ("", "ai.onnx") or node.op_type not in _COPIES:
            return None
        value = node.inputs[0]
    return None


def _known(shape: ir.Shape | None) -> bool:
    return shape is not None and all(
        isinstance(d, int) or (isinstance(d, ir.SymbolicDim) and d.value is not None) for d in shape
    )


def fuse_uniform_index_gather(model: ir.Model) -> int:
    """``Add(y, Gather(T, X))`` with ``X`` all ``c`` -> ``Add(y, T[c])`` (module docstring)."""
    const = Constants(model.graph, "uniform_gather_fusion")
    count = 0
    for node, table in _table_gathers(model):
        row = _uniform(node.inputs[1])
        out = node.outputs[0]
        uses = list(out.uses())
        if row is None or not -table.shape[0] <= row < table.shape[0] or out.is_graph_output():
            continue
        if len(uses) != 1 or uses[0].node.op_type != "Add" or uses[0].node.domain != "":
            continue
        add = uses[0].node
        other = add.inputs[1 - uses[0].idx]
        shapes = (other.shape if other is not None else None, out.shape, add.outputs[0].shape)
        if not all(_known(s) for s in shapes) or not shapes[0] == shapes[1] == shapes[2]:
            continue
        add.replace_input_with(uses[0].idx, const("row", np.ascontiguousarray(table[row])))
        count += 1
    return _cleanup(model, count)
