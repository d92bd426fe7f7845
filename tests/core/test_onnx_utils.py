"""core.onnx_utils.tensor_array: an external tensor's data read from its own bytes."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.core.onnx_utils import tensor_array


def _external(
    tmp_path: Path, array: np.ndarray, dtype: ir.DataType, pad: int = 3
) -> ir.ExternalTensor:
    """``array`` written at an odd offset after ``pad`` bytes of another tensor."""
    data = ir.tensor(array, dtype=dtype).tobytes()
    (tmp_path / "w.data").write_bytes(b"\x07" * pad + data + b"\x09" * 5)
    return ir.ExternalTensor(
        "w.data",
        pad,
        len(data),
        dtype,
        shape=ir.Shape(array.shape),
        name="w",
        base_dir=tmp_path,
    )


@pytest.mark.parametrize(
    ("array", "dtype"),
    [
        (np.arange(12, dtype=np.float32).reshape(3, 4) / 7, ir.DataType.FLOAT),
        (np.array([-(2**40), 5, 0], dtype=np.int64), ir.DataType.INT64),
        (np.array([[1.5, -2.25]], dtype=np.float16), ir.DataType.FLOAT16),
        (np.array([1.5, -3.0], dtype=ml_dtypes.bfloat16), ir.DataType.BFLOAT16),
        (np.array([True, False, True]), ir.DataType.BOOL),
        (np.array(3.0, dtype=np.float64), ir.DataType.DOUBLE),
        (np.array([1, -2, 3, 7], dtype=ml_dtypes.int4), ir.DataType.INT4),  # packed: numpy()
    ],
)
def test_an_external_tensor_reads_as_onnx_ir_reads_it(
    tmp_path: Path, array: np.ndarray, dtype: ir.DataType
) -> None:
    expected = _external(tmp_path, array, dtype).numpy()
    tensor = _external(tmp_path, array, dtype)
    got = tensor_array(tensor)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()
    if dtype != ir.DataType.INT4:
        assert tensor.raw is None  # the data file was not mapped


def test_an_in_memory_tensor_is_its_numpy() -> None:
    array = np.arange(4, dtype=np.int32)
    np.testing.assert_array_equal(tensor_array(ir.tensor(array)), array)
