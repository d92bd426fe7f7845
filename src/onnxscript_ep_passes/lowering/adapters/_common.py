"""Small helpers shared by the adapter modules (reading constants, shapes and types)."""

from __future__ import annotations

__all__ = [
    "FLOAT",
    "FLOAT8_TYPES",
    "HALF_TYPES",
    "constant_array",
    "int64s",
    "quantized_type",
    "rank_of",
    "static_dim",
]

from typing import TYPE_CHECKING

import numpy as np
import onnx_ir as ir

if TYPE_CHECKING:
    from onnxscript_ep_passes.lowering.context import DowngradeContext

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


def quantized_type(ctx: DowngradeContext, zero_point: ir.Value | None) -> ir.DataType:
    """QuantizeLinear's output type: the zero point's, else ``output_dtype``, else uint8."""
    if zero_point is not None:
        return ctx.require_dtype(zero_point, "y_zero_point")
    output_dtype = int(ctx.attribute("output_dtype", 0))
    return ir.DataType(output_dtype) if output_dtype else ir.DataType.UINT8
