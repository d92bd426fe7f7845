"""check_external_data: each location is resolved once, yet every tensor is checked."""

from __future__ import annotations

import re
from pathlib import Path

import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto

from onnxscript_ep_passes.errors import InvalidModelError
from onnxscript_ep_passes.model_files.external_data_checks import check_external_data


def _external(name: str, location: str, offset: int) -> TensorProto:
    tensor = oh.make_tensor(name, TensorProto.FLOAT, [4], [0.0] * 4)
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", "16")):
        tensor.external_data.add(key=key, value=value)
    return tensor


def _model(tensors: list[TensorProto]) -> onnx.ModelProto:
    graph = oh.make_graph([], "g", [], [], initializer=tensors)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)])


def test_extents_per_file(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(bytes(64))
    (tmp_path / "b.bin").write_bytes(bytes(32))
    tensors = [
        _external("w0", "a.bin", 0),
        _external("w1", "a.bin", 48),
        _external("w2", "b.bin", 16),
    ]
    extents = check_external_data(_model(tensors), tmp_path, "m.onnx")
    assert extents == {(tmp_path / "a.bin").resolve(): 64, (tmp_path / "b.bin").resolve(): 32}


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        # the second tensor of a file already resolved still has its range checked
        (
            [("w0", "a.bin", 0), ("w1", "a.bin", 56)],
            "tensor 'w1': external data location 'a.bin' declares bytes 56..72",
        ),
        # a later, different location is resolved, not taken from the first one's answer
        (
            [("w0", "a.bin", 0), ("w1", "missing.bin", 0)],
            "tensor 'w1': external data location 'missing.bin' cannot be read",
        ),
        # a bad location is reported for each tensor naming it: the first one raises
        (
            [("w0", "../a.bin", 0), ("w1", "../a.bin", 0)],
            "tensor 'w0': external data location '../a.bin' leaves",
        ),
    ],
)
def test_every_tensor_is_checked(
    tmp_path: Path, tensors: list[tuple[str, str, int]], message: str
) -> None:
    (tmp_path / "a.bin").write_bytes(bytes(64))
    model = _model([_external(*t) for t in tensors])
    with pytest.raises(InvalidModelError, match=re.escape(message)):
        check_external_data(model, tmp_path, "m.onnx")
