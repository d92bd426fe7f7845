"""Saving lowered models: weights copied whole or rewritten, never overwritten in place."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from onnxscript_ep_passes import LowerOpsetPass
from onnxscript_ep_passes.model_files.io import has_external_data, load_model, save_model
from tests.harness import make_model, run_model


def _source(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), f"w{i}")
        for i in range(3)
    ]
    nodes = [
        oh.make_node("MatMul", ["x", "w0"], ["a"]),
        oh.make_node("MatMul", ["a", "w1"], ["b"]),
        oh.make_node("Swish", ["b"], ["y"]),
    ]
    model = make_model(
        nodes,
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
        24,
        initializers=weights,  # w2 is never read
    )
    path = tmp_path / "src.onnx"
    onnx.save(model, path, save_as_external_data=True, location="src.onnx.data", size_threshold=0)
    return path


@pytest.mark.parametrize("weights", ["copy_file", "rewrite"])
def test_save_modes_round_trip(tmp_path: Path, weights: str) -> None:
    src = _source(tmp_path)
    model = load_model(src)
    assert has_external_data(model)
    LowerOpsetPass(23)(model)
    out = tmp_path / "out" / "m.onnx"
    out.parent.mkdir()
    save_model(model, out, weights=weights)  # type: ignore[arg-type]
    data = out.parent / "m.onnx.data"
    source_size = (tmp_path / "src.onnx.data").stat().st_size
    if weights == "copy_file":
        assert data.stat().st_size == source_size  # the file, copied whole
        assert data.stat().st_nlink == 1  # not a hard link: onnx refuses those
    else:
        assert data.stat().st_size >= 3 * 64 * 64 * 4  # every initializer, written anew
    onnx.checker.check_model(str(out), full_check=True)
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    expected, _ = run_model(onnx.load(src), {"x": x})
    actual, _ = run_model(onnx.load(out), {"x": x})
    np.testing.assert_allclose(actual[0], expected[0], rtol=1e-6, atol=1e-6)


def test_in_place_rewrite_replaces_the_source_and_its_data(tmp_path: Path) -> None:
    src = _source(tmp_path)
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    expected, _ = run_model(onnx.load(src), {"x": x})
    model = load_model(src)
    LowerOpsetPass(23)(model)
    save_model(model, src, weights="rewrite")  # the old data file is mapped: a new name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.onnx", _data_name(src)]
    assert _data_name(src) != "src.onnx.data"
    onnx.checker.check_model(str(src), full_check=True)
    actual, _ = run_model(onnx.load(src), {"x": x})
    np.testing.assert_allclose(actual[0], expected[0], rtol=1e-6, atol=1e-6)


def _data_name(path: Path) -> str:
    locations = {
        entry.value
        for tensor in onnx.load(path, load_external_data=False).graph.initializer
        for entry in tensor.external_data
        if entry.key == "location"
    }
    assert len(locations) == 1, locations
    return locations.pop()


def test_in_place_copy_keeps_the_shared_data_file(tmp_path: Path) -> None:
    src = _source(tmp_path)
    before = (tmp_path / "src.onnx.data").read_bytes()
    model = load_model(src)
    LowerOpsetPass(23)(model)
    save_model(model, src)  # same path: the data file already is the output's
    assert (tmp_path / "src.onnx.data").read_bytes() == before
    assert [o.version for o in onnx.load(src).opset_import if o.domain == ""] == [23]
