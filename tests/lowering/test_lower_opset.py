"""The pass itself: scopes reached, transactions, opset/IR bookkeeping, pipelines, logs."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto

from onnxscript_ep_passes import (
    ORT_TRACKING_ISSUE,
    DowngradeError,
    LowerOpsetPass,
    lower_opset,
)
from tests.harness import assert_lowers_exactly, assert_refuses, make_model, run_model

F = TensorProto.FLOAT


def _vi(name: str, elem: int = F, shape: list[int | str] | None = None) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, elem, [2, 3] if shape is None else shape)


def _swish_reshape_graph(name: str, x: str, y: str) -> onnx.GraphProto:
    """A branch body: y = Reshape(Swish(x), [3, 2]) (both opset-24 schemas)."""
    return oh.make_graph(
        [
            oh.make_node(
                "Constant",
                [],
                [f"{name}_shape"],
                value=oh.make_tensor("s", TensorProto.INT64, [2], [3, 2]),
            ),
            oh.make_node("Swish", [x], [f"{name}_s"], name=f"{name}_swish", alpha=0.5),
            oh.make_node("Reshape", [f"{name}_s", f"{name}_shape"], [y], name=f"{name}_reshape"),
        ],
        name,
        [],
        [_vi(y, shape=[3, 2])],
    )


def test_if_branches_and_nested_loop_body_are_lowered() -> None:
    then_branch = _swish_reshape_graph("then", "x", "then_y")
    loop_body = oh.make_graph(
        [
            oh.make_node("Identity", ["cond_in"], ["cond_out"]),
            oh.make_node(
                "If",
                ["cond_in"],
                ["inner_y"],
                name="inner_if",
                then_branch=_swish_reshape_graph("inner_then", "x", "inner_then_y"),
                else_branch=_swish_reshape_graph("inner_else", "x", "inner_else_y"),
            ),
            oh.make_node("Add", ["acc_in", "inner_y"], ["acc_out"], name="acc"),
        ],
        "loop_body",
        [
            oh.make_tensor_value_info("i", TensorProto.INT64, []),
            oh.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            _vi("acc_in", shape=[3, 2]),
        ],
        [oh.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _vi("acc_out", shape=[3, 2])],
    )
    else_branch = oh.make_graph(
        [
            oh.make_node(
                "Constant", [], ["trip"], value=oh.make_tensor("t", TensorProto.INT64, [], [3])
            ),
            oh.make_node(
                "Constant", [], ["zeros"], value=oh.make_tensor("z", F, [3, 2], [0.0] * 6)
            ),
            oh.make_node(
                "Loop", ["trip", "cond", "zeros"], ["else_y"], name="loop", body=loop_body
            ),
        ],
        "else",
        [],
        [_vi("else_y", shape=[3, 2])],
    )
    model = make_model(
        [
            oh.make_node(
                "If",
                ["cond"],
                ["y"],
                name="top_if",
                then_branch=then_branch,
                else_branch=else_branch,
            )
        ],
        [_vi("x"), oh.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [_vi("y", shape=[3, 2])],
        24,
    )
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    for cond in (True, False):
        lowered = assert_lowers_exactly(model, 23, {"x": x, "cond": np.array(cond)})
    ops = {n.op_type for n in ir.traversal.RecursiveGraphIterator(ir.from_proto(lowered).graph)}
    assert "Swish" not in ops and "Sigmoid" in ops


def _function(opset: int) -> onnx.FunctionProto:
    return oh.make_function(
        "custom",
        "SwishReshape",
        ["X", "Shape"],
        ["Y"],
        [
            oh.make_node("Swish", ["X"], ["S"], alpha=2.0),
            oh.make_node("Reshape", ["S", "Shape"], ["Y"]),
        ],
        opset_imports=[oh.make_opsetid("", opset)],
    )


def _function_model(opset: int = 24) -> onnx.ModelProto:
    return make_model(
        [oh.make_node("SwishReshape", ["x", "shape"], ["y"], domain="custom", name="call")],
        [_vi("x")],
        [_vi("y", shape=[3, 2])],
        opset,
        initializers=[oh.make_tensor("shape", TensorProto.INT64, [2], [3, 2])],
        functions=[_function(opset)],
        extra_opsets={"custom": 1},
    )


def test_local_functions_are_lowered_and_kept() -> None:
    model = _function_model()
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    lowered = assert_lowers_exactly(model, 23, {"x": x})
    assert [f.name for f in lowered.functions] == ["SwishReshape"]
    function = lowered.functions[0]
    assert {(o.domain, o.version) for o in function.opset_import} == {("", 23)}
    assert "Swish" not in {n.op_type for n in function.node}
    assert {(o.domain, o.version) for o in lowered.opset_import} == {("", 23), ("custom", 1)}


def _bad_model() -> onnx.ModelProto:
    """Four offending nodes: casts to and from float8e8m0 and a Reshape of float8e8m0."""
    nodes = [
        oh.make_node("Cast", ["x"], ["e1"], name="to_e8m0_a", to=TensorProto.FLOAT8E8M0),
        oh.make_node("Cast", ["x"], ["e2"], name="to_e8m0_b", to=TensorProto.FLOAT8E8M0),
        oh.make_node("Reshape", ["e1", "shape"], ["r"], name="reshape_e8m0"),
        oh.make_node("Cast", ["r"], ["y"], name="from_e8m0", to=F),
        oh.make_node("Swish", ["x"], ["z"], name="fine_swish"),
    ]
    return make_model(
        nodes,
        [_vi("x")],
        [_vi("y", shape=[3, 2]), _vi("e2", TensorProto.FLOAT8E8M0), _vi("z")],
        24,
        initializers=[oh.make_tensor("shape", TensorProto.INT64, [2], [3, 2])],
    )


def test_refusal_lists_every_offending_node_and_leaves_proto_untouched() -> None:
    error = assert_refuses(_bad_model(), 23, "4 nodes cannot be expressed")
    names = sorted(r.node_name for r in error.refusals)
    assert names == ["from_e8m0", "reshape_e8m0", "to_e8m0_a", "to_e8m0_b"]
    message = str(error)
    assert "node 'reshape_e8m0' (Reshape-24" in message
    assert "input 'e1' is FLOAT8E8M0, which Reshape-23 does not allow" in message
    assert "Cast-23 does not allow" in message
    assert all(r.since_version == 24 and r.target_opset == 23 for r in error.refusals)


def test_refusal_leaves_ir_model_byte_identical() -> None:
    model = ir.from_proto(_bad_model())
    before = ir.to_proto(model).SerializeToString()
    graph_before = model.graph
    with pytest.raises(DowngradeError):
        LowerOpsetPass(23)(model)
    assert model.graph is graph_before
    assert ir.to_proto(model).SerializeToString() == before


def test_already_at_or_below_target_is_a_noop() -> None:
    for opset in (21, 23):
        model = ir.from_proto(
            make_model([oh.make_node("Relu", ["x"], ["y"])], [_vi("x")], [_vi("y")], opset)
        )
        before = ir.to_proto(model).SerializeToString()
        result = LowerOpsetPass(23)(model)
        assert not result.modified
        assert ir.to_proto(model).SerializeToString() == before


def test_ir_version_is_lowered_to_what_the_target_allows() -> None:
    model = make_model([oh.make_node("Relu", ["x"], ["y"])], [_vi("x")], [_vi("y")], 25)
    assert model.ir_version == 13
    assert lower_opset(model, 23).ir_version == 11
    assert lower_opset(model, 21).ir_version == 10
    assert lower_opset(model, 18).ir_version == 8


def test_other_domains_and_version_overrides() -> None:
    model = make_model(
        [
            oh.make_node("Relu", ["x"], ["r"]),
            oh.make_node("Gelu", ["r"], ["y"], domain="com.microsoft"),
        ],
        [_vi("x")],
        [_vi("y")],
        24,
        extra_opsets={"com.microsoft": 1},
    )
    ir_model = ir.from_proto(model)
    ir_model.graph.node(0).version = 24
    LowerOpsetPass(23)(ir_model)
    assert ir_model.opset_imports == {"": 23, "com.microsoft": 1}
    assert ir_model.graph.node(0).version is None
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    expected, _ = run_model(model, {"x": x})
    actual, _ = run_model(ir.to_proto(ir_model), {"x": x})
    np.testing.assert_array_equal(actual[0], expected[0])


def test_function_above_target_in_model_below_target() -> None:
    model = _function_model(24)
    model.opset_import[0].version = 23
    ir_model = ir.from_proto(model)
    assert LowerOpsetPass(23)(ir_model).modified
    function = next(iter(ir_model.functions.values()))
    assert function.opset_imports[""] == 23


def test_missing_types_are_inferred() -> None:
    # 'mid' has no value_info: the Reshape-24 rule needs its type, shape inference gives it.
    model = make_model(
        [
            oh.make_node("Relu", ["x"], ["mid"]),
            oh.make_node("Reshape", ["mid", "shape"], ["y"], name="reshape"),
        ],
        [_vi("x")],
        [_vi("y", shape=[3, 2])],
        24,
        initializers=[oh.make_tensor("shape", TensorProto.INT64, [2], [3, 2])],
    )
    x = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)
    assert_lowers_exactly(model, 23, {"x": x})


def test_unknown_type_is_refused_not_guessed() -> None:
    # A graph input without a type: nothing can tell whether Reshape-23 allows it.
    model = make_model(
        [oh.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
        [onnx.ValueInfoProto(name="x")],
        [onnx.ValueInfoProto(name="y")],
        24,
        initializers=[oh.make_tensor("shape", TensorProto.INT64, [2], [3, 2])],
    )
    error = assert_refuses(model, 23, r"the type of input 'x' is unknown")
    assert error.refusals[0].node_name == "reshape"


def test_runs_in_onnx_ir_pass_manager_with_onnxscript_passes() -> None:
    from onnxscript.optimizer import optimize

    model = ir.from_proto(_function_model())
    manager = ir.passes.PassManager(
        [
            LowerOpsetPass(23),
            ir.passes.common.RemoveUnusedNodesPass(),
        ]
    )
    result = manager(model)
    assert result.modified and model.opset_imports[""] == 23
    optimized = optimize(model)
    onnx.checker.check_model(ir.to_proto(optimized), full_check=True)


def test_info_log_names_opsets_model_and_tracking_issue(caplog: pytest.LogCaptureFixture) -> None:
    model = _function_model()
    with caplog.at_level(logging.DEBUG, logger="onnxscript_ep_passes"):
        lower_opset(model, 23, ep="WebGpuExecutionProvider")
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any(
        "from opset 24 to 23" in m
        and "'test_graph'" in m
        and "WebGpuExecutionProvider" in m
        and ORT_TRACKING_ISSUE in m
        for m in info
    ), info
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("Swish" in m for m in debug)


def test_target_below_18_is_rejected() -> None:
    with pytest.raises(ValueError, match="below 18"):
        LowerOpsetPass(17)


def test_initializers_only_replaced_nodes_read_are_dropped() -> None:
    # DFT-20's axis input becomes DFT-17's attribute: the 'axis' initializer loses its
    # only reader and is dropped; an initializer nobody ever read is left alone.
    model = make_model(
        [
            oh.make_node("DFT", ["x", "", "axis"], ["y"], name="dft"),
            oh.make_node("Identity", ["kept"], ["k"]),
        ],
        [_vi("x", shape=[1, 4, 2])],
        [_vi("y", shape=[1, 4, 2]), _vi("k", shape=[1])],
        20,
        initializers=[
            oh.make_tensor("axis", TensorProto.INT64, [], [1]),
            oh.make_tensor("kept", F, [1], [1.0]),
            oh.make_tensor("never_used", F, [1], [2.0]),
        ],
    )
    x = np.random.default_rng(4).standard_normal((1, 4, 2)).astype(np.float32)
    lowered = assert_lowers_exactly(model, 19, {"x": x}, rtol=1e-5, atol=1e-5)
    assert {i.name for i in lowered.graph.initializer} == {"kept", "never_used"}


def test_node_names_stay_unique_across_steps_and_runs() -> None:
    # Each Swish expansion builds nodes named after the Swish; lowering 24 -> 23 and then
    # 23 -> 18 in a second run must not reuse a name (ORT refuses duplicate node names).
    model = make_model(
        [
            oh.make_node("Swish", ["x"], ["s"], name="act", alpha=0.5),
            oh.make_node("Swish", ["s"], ["y"], name="act_2", alpha=2.0),
        ],
        [_vi("x")],
        [_vi("y")],
        24,
    )
    ir_model = ir.from_proto(model)
    LowerOpsetPass(23)(ir_model)
    LowerOpsetPass(18)(ir_model)
    names = [n.name for n in ir.traversal.RecursiveGraphIterator(ir_model.graph)]
    assert len(names) == len(set(names)), names
    x = np.random.default_rng(5).standard_normal((2, 3)).astype(np.float32)
    expected, _ = run_model(model, {"x": x})
    actual, _ = run_model(ir.to_proto(ir_model), {"x": x})
    np.testing.assert_allclose(actual[0], expected[0], rtol=1e-6, atol=1e-6)


def test_adapters_see_inferred_shapes_and_the_model_gets_none_added() -> None:
    # Resize-19's half_pixel_symmetric becomes half_pixel only when the input's spatial
    # sizes are known. Here the Resize reads an intermediate without value_info: the
    # adapter gets the inferred shape, and the lowered model gains no value_info for it.
    model = make_model(
        [
            oh.make_node("Relu", ["x"], ["mid"], name="relu"),
            oh.make_node(
                "Resize",
                ["mid", "", "scales"],
                ["y"],
                name="resize",
                coordinate_transformation_mode="half_pixel_symmetric",
                mode="linear",
            ),
        ],
        [_vi("x", shape=[1, 2, 3, 4])],
        [_vi("y", shape=[1, 2, 6, 6])],
        19,
        initializers=[oh.make_tensor("scales", F, [4], [1, 1, 2, 1.5])],
    )
    assert "mid" not in {v.name for v in model.graph.value_info}
    x = np.random.default_rng(6).standard_normal((1, 2, 3, 4)).astype(np.float32)
    lowered = assert_lowers_exactly(model, 18, {"x": x})
    assert "mid" not in {v.name for v in lowered.graph.value_info}
    resize = next(n for n in lowered.graph.node if n.op_type == "Resize")
    modes = {a.name: a.s for a in resize.attribute if a.name == "coordinate_transformation_mode"}
    assert modes == {"coordinate_transformation_mode": b"half_pixel"}


def test_ir_version_stays_high_enough_for_other_domains() -> None:
    model = make_model(
        [
            oh.make_node("Relu", ["x"], ["r"]),
            oh.make_node("Binarizer", ["r"], ["y"], domain="ai.onnx.ml", threshold=0.5),
        ],
        [_vi("x")],
        [_vi("y")],
        24,
        extra_opsets={"ai.onnx.ml": 5},
    )
    lowered = lower_opset(model, 18)
    # opset 18 alone allows IR 8, but ai.onnx.ml 5 came with IR 10.
    assert lowered.ir_version == 10
    onnx.checker.check_model(lowered, full_check=True)
