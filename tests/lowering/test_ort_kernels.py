"""Expansions end in what ORT can load: a built node without an ORT CPU kernel at the
target is expanded through its own function body; a node the user wrote is kept; a
default-domain op ORT defines and ONNX does not is carried unchanged."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto

from onnxscript_ep_passes import lower_opset
from onnxscript_ep_passes.lowering.ort_kernels import cpu_has_kernel, ort_inlines
from tests.harness import assert_refuses, make_model, run_model

F, D = TensorProto.FLOAT, TensorProto.DOUBLE


def test_kernel_listing_matches_as_ort_does() -> None:
    assert cpu_has_kernel("Elu", "", 22, "tensor(float)")
    assert not cpu_has_kernel("Elu", "", 22, "tensor(double)")
    assert not cpu_has_kernel("Swish", "", 24, "tensor(float)")
    assert cpu_has_kernel("Celu", "", 28, "tensor(double)")
    assert not cpu_has_kernel("Celu", "", 12, "tensor(double)")


def _loads(model: onnx.ModelProto) -> None:
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize(
    ("op", "opset", "inlined"),
    [
        ("CastLike", 22, True),
        ("CastLike", 27, True),
        ("Swish", 24, True),
        ("Swish", 25, False),
        ("Swish", 27, False),
        ("Elu", 22, False),
    ],
)
def test_ort_inlines_as_ort_loads(op: str, opset: int, inlined: bool) -> None:
    """The inlining rule agrees with a real ORT session: a model holding only ``op`` at
    ``opset`` on float32 (which only Elu has a kernel for) loads iff ORT inlines it."""
    assert ort_inlines(op, "", opset) is inlined
    if op == "Elu":
        return  # Elu-22 has a float kernel; its double case is the Celu test below
    inputs = ["x", "x"] if op == "CastLike" else ["x"]
    node = oh.make_node(op, inputs, ["y"], name="n")
    model = make_model(
        [node],
        [oh.make_tensor_value_info("x", F, [3])],
        [oh.make_tensor_value_info("y", F, [3])],
        opset,
    )
    loads = True
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:
        loads = False
    assert loads is inlined


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


def _unary_28(op: str, elem: int, shape: list[int], **attrs: object) -> onnx.ModelProto:
    node = oh.make_node(op, ["x"], ["y"], name=op.lower(), **attrs)
    x, y = (oh.make_tensor_value_info(name, elem, shape) for name in ("x", "y"))
    return make_model([node], [x], [y], 28)


def test_celu_double_28_to_27_builds_no_elu() -> None:
    model = _unary_28("Celu", D, [9], alpha=1.5)
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
    model = _unary_28("Swish", F, [4])
    lowered = lower_opset(model, 27)
    assert [n.op_type for n in lowered.graph.node] == ["Swish"]


def _genai_norm_model(op: str = "SimplifiedLayerNormalization") -> onnx.ModelProto:
    """x -> SimplifiedLayerNormalization (default domain, as ORT GenAI writes it) -> MatMul,
    and a Reshape-21 beside it that the lowering must rewrite."""
    rng = np.random.default_rng(0)
    nodes = [
        oh.make_node(op, ["x", "scale"], ["n"], name="norm", axis=-1, epsilon=1e-5),
        oh.make_node("MatMul", ["n", "w"], ["y"], name="proj"),
        oh.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
    ]
    initializers = [
        onnx.numpy_helper.from_array(np.linspace(0.5, 1.5, 8).astype(np.float32), "scale"),
        onnx.numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w"),
        onnx.numpy_helper.from_array(np.array([4, 4], dtype=np.int64), "shape"),
    ]
    return make_model(
        nodes,
        [oh.make_tensor_value_info("x", F, [2, 8])],
        [oh.make_tensor_value_info("y", F, [2, 4]), oh.make_tensor_value_info("r", F, [4, 4])],
        22,
        initializers=initializers,
    )


def test_ops_ort_defines_and_onnx_does_not_are_carried(caplog: pytest.LogCaptureFixture) -> None:
    model = _genai_norm_model()
    with caplog.at_level(logging.INFO, logger="onnxscript_ep_passes"):
        lowered = lower_opset(model, 20)
    assert [o.version for o in lowered.opset_import if o.domain == ""] == [20]
    norm = next(n for n in lowered.graph.node if n.name == "norm")
    assert (norm.op_type, norm.domain, list(norm.input)) == (
        "SimplifiedLayerNormalization",
        "",
        ["x", "scale"],
    )
    assert "Carried 1 nodes unchanged" in caplog.text
    assert "SimplifiedLayerNormalization" in caplog.text
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    expected, _ = run_model(model, {"x": x})
    actual, how = run_model(lowered, {"x": x})
    assert how == "onnxruntime"
    for e, a in zip(expected, actual):
        np.testing.assert_array_equal(a, e)


def test_ops_nobody_defines_are_still_refused() -> None:
    assert_refuses(_genai_norm_model("NoSuchNormalization"), 20, r"no ONNX schema for NoSuch")


def test_ops_ort_defines_are_placed_by_the_kernel_table_and_reported() -> None:
    """Placement reads ORT's own schema version (1) for them, so CUDA's
    SimplifiedLayerNormalization kernel (1+) matches."""
    from onnxscript_ep_passes.ep.table_choice import get_table
    from onnxscript_ep_passes.reports.report import format_report, placement_report

    model = ir.from_proto(_genai_norm_model())
    table = get_table("CUDAExecutionProvider", "1.24")
    report = placement_report(model, "cuda", table=table)
    placed = {n["op_type"]: n["placement"] for n in report["before"]["nodes"]}
    assert placed["SimplifiedLayerNormalization"] == "ep"
    text = format_report(report)
    assert "carried unchanged, placed by the kernel table: SimplifiedLayerNormalization x1" in text
