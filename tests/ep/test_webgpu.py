"""The WebGPU helpers on the real plugin: registration, sessions, measuring placement."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxscript_ep_passes.ep import (
    NoEpNodesError,
    make_webgpu_session_options,
    measure_placement,
    register_webgpu,
    webgpu_available,
)
from tests.ep.models import ONE_OP_CASES, chain_model, one_op_model

pytestmark = [pytest.mark.webgpu, pytest.mark.usefixtures("webgpu")]


def _transpose_only(opset: int) -> onnx.ModelProto:
    g = helper.make_graph(
        [helper.make_node("Transpose", ["X"], ["Y"], perm=[1, 0], name="t")],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 2])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_available_and_registration_is_idempotent() -> None:
    ok, reason = webgpu_available()
    assert ok, reason
    assert register_webgpu() == register_webgpu() == "webgpu"


def test_cpu_only_session_is_never_a_measurement() -> None:
    # Transpose-25 has no WebGPU kernel: the session would run wholly on CPU.
    with pytest.raises(NoEpNodesError, match="received no node"):
        measure_placement(_transpose_only(25), "webgpu")
    m = measure_placement(_transpose_only(24), "webgpu")
    assert m.ep_node_count == 1 and m.provider_of("t") == "WebGpuExecutionProvider"


def test_measure_accepts_paths_and_bytes(tmp_path) -> None:
    model = one_op_model(ONE_OP_CASES[1], 25)  # Relu -> Transpose-25 -> Relu
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    by_path = measure_placement(path, "webgpu")
    by_bytes = measure_placement(model.SerializeToString(), "WebGpuExecutionProvider")
    assert by_path == by_bytes
    assert by_path.cpu_node_names() == {"op"}
    assert (by_path.memcpy_from_host, by_path.memcpy_to_host) == (1, 1)
    assert by_path.summary() == {
        "Relu": {"WebGpuExecutionProvider": 2},
        "Transpose": {"CPUExecutionProvider": 1},
    }


def test_webgpu_session_computes_what_cpu_computes() -> None:
    model = chain_model(24).SerializeToString()
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    sess = ort.InferenceSession(model, make_webgpu_session_options())
    assert sess.get_providers()[0] == "WebGpuExecutionProvider"
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(
        sess.run(None, {"X": x})[0], cpu.run(None, {"X": x})[0], rtol=1e-3, atol=1e-4
    )
