"""Expansions end in what ORT can load: a built node without an ORT CPU kernel at the
target is expanded through its own function body; a node the user wrote is kept."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort
from onnx import TensorProto

from onnxscript_ep_passes import lower_opset
from onnxscript_ep_passes.lowering.ort_kernels import cpu_has_kernel
from tests.harness import make_model, run_model

F, D = TensorProto.FLOAT, TensorProto.DOUBLE


def test_kernel_listing_matches_as_ort_does() -> None:
    assert cpu_has_kernel("Elu", "", 22, "tensor(float)")
    assert not cpu_has_kernel("Elu", "", 22, "tensor(double)")
    assert not cpu_has_kernel("Swish", "", 24, "tensor(float)")
    assert cpu_has_kernel("Celu", "", 28, "tensor(double)")
    assert not cpu_has_kernel("Celu", "", 12, "tensor(double)")


def _loads(model: onnx.ModelProto) -> None:
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_swiglu_28_to_27_builds_no_swish() -> None:
    node = oh.make_node("SwiGLU", ["a", "b"], ["y"], name="swiglu", alpha=1.702)
    inputs = [oh.make_tensor_value_info(n, F, [2, 8]) for n in ("a", "b")]
    model = make_model([node], inputs, [oh.make_tensor_value_info("y", F, [2, 8])], 28)
    lowered = lower_opset(model, 27)
    onnx.checker.check_model(lowered, full_check=True)
    assert "Swish" not in {n.op_type for n in lowered.graph.node}
    _loads(lowered)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((2, 8)).astype(np.float32) for _ in range(2))
    (actual,), how = run_model(lowered, {"a": a, "b": b})
    assert how == "onnxruntime"
    expected = a / (1 + np.exp(-1.702 * a)) * b
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


def test_celu_double_28_to_27_builds_no_elu() -> None:
    node = oh.make_node("Celu", ["x"], ["y"], name="celu", alpha=1.5)
    model = make_model(
        [node],
        [oh.make_tensor_value_info("x", D, [9])],
        [oh.make_tensor_value_info("y", D, [9])],
        28,
    )
    lowered = lower_opset(model, 27)
    onnx.checker.check_model(lowered, full_check=True)
    assert "Elu" not in {n.op_type for n in lowered.graph.node}
    x = np.linspace(-4, 4, 9)
    (expected,), how_expected = run_model(model, {"x": x})
    (actual,), how = run_model(lowered, {"x": x})
    assert (how_expected, how) == ("onnxruntime", "onnxruntime")
    np.testing.assert_allclose(actual, expected, rtol=1e-12)


def test_a_node_the_user_wrote_is_kept() -> None:
    """A user's Swish-24 in a model lowered 28 -> 27 stays Swish: only built nodes are
    expanded for ORT's sake."""
    node = oh.make_node("Swish", ["x"], ["y"], name="swish")
    model = make_model(
        [node],
        [oh.make_tensor_value_info("x", F, [4])],
        [oh.make_tensor_value_info("y", F, [4])],
        28,
    )
    lowered = lower_opset(model, 27)
    assert [n.op_type for n in lowered.graph.node] == ["Swish"]
