"""Small helpers shared by the adapter modules (reading constants, shapes and types)."""

from __future__ import annotations

__all__ = [
    "FLOAT",
    "FLOAT8_TYPES",
    "HALF_TYPES",
    "constant_array",
    "int64s",
    "rank_of",
    "static_dim",
]

import numpy as np
import onnx_ir as ir

FLOAT = ir.DataType.FLOAT
HALF_TYPES = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
FLOAT8_TYPES = (
    ir.DataType.FLOAT8E4M3FN,
    ir.DataType.FLOAT8E4M3FNUZ,
    ir.DataType.FLOAT8E5M2,
    ir.DataType.FLOAT8E5M2FNUZ,
)


def constant_array(value: ir.Value | None) -> np.ndarray | None:
    """The value's data when it is a constant (an initializer that is no graph input)."""
    if value is None or value.is_graph_input():
        return None
    tensor = ir.convenience.get_const_tensor(value)
    return None if tensor is None else tensor.numpy()


def rank_of(value: ir.Value | None) -> int | None:
    return None if value is None or value.shape is None else len(value.shape)


def static_dim(value: ir.Value | None, axis: int) -> int | None:
    """The static size of dimension ``axis`` (negative counts from the end), else None."""
    if value is None or value.shape is None:
        return None
    shape = value.shape
    if not -len(shape) <= axis < len(shape):
        return None
    dim = shape[axis]
    return dim if isinstance(dim, int) else None


def int64s(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)
