"""ORT's basic optimizations before placement, checked against ORT itself on its CPU EP.

Each small model is predicted at ``ORT_ENABLE_BASIC`` and loaded in a real ORT CPU session
at the same level, whose optimized model (``optimized_model_filepath``) shows which nodes
ORT removed; level-1 optimizations run before partitioning whatever the EPs, so the CPU
session sees what a WebGPU session sees (tests/ep/test_webgpu_placement.py and
tests/e2e/test_prediction_webgpu.py check that on the real WebGPU EP).
"""

from __future__ import annotations

import collections
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort
import pytest
from onnx import TensorProto

from onnxscript_ep_passes.ep import KernelTable, predict_placement
from onnxscript_ep_passes.ep.placement import OptimizationLevel, PlacementPrediction

F = TensorProto.FLOAT
TABLE = KernelTable.from_rows(
    "TestEP", "0.0", "test", [("", op, 1, None, None) for op in ("Relu", "Cos", "Add")]
)


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: list[onnx.TensorProto] = (),  # type: ignore[assignment]
    opset: int = 21,
) -> onnx.ModelProto:
    graph = oh.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _ort_optimized(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model as ORT optimizes it at ORT_ENABLE_BASIC (its saved optimized model)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.log_severity_level = 3
    with tempfile.TemporaryDirectory(prefix="basic_opt_") as tmp:
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return onnx.load(options.optimized_model_filepath)


def _ort_kept(model: onnx.ModelProto) -> collections.Counter[str]:
    """Names of the nodes ORT keeps at ORT_ENABLE_BASIC."""
    return collections.Counter(n.name for n in _ort_optimized(model).graph.node)


def _check(model: onnx.ModelProto) -> PlacementPrediction:
    """Predict at ORT_ENABLE_BASIC; the removed nodes are those ORT's optimized model lacks."""
    pred = predict_placement(model, TABLE, optimization_level=OptimizationLevel.ENABLE_BASIC)
    kept = _ort_kept(model)
    written = collections.Counter(n.name for n in model.graph.node if n.op_type != "Constant")
    predicted_kept = collections.Counter(n.name for n in pred.nodes if not n.inserted_by_ort)
    assert collections.Counter(r.name for r in pred.removed) == written - kept, pred.removed
    assert predicted_kept == kept
    return pred


def _x(shape: list[int | str] | None = None) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info("x", F, [2, 3] if shape is None else shape)


def _y(name: str = "y") -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, F, None)


def _i64(name: str, values: list[int]) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(np.array(values, np.int64), name)


def test_duplicates_merge_and_equal_small_constants_are_shared() -> None:
    """Two Cos of x merge; two Adds of equal (but distinct) scalar initializers too."""
    nodes = [
        oh.make_node("Cos", ["x"], ["c1"], name="cos1"),
        oh.make_node("Cos", ["x"], ["c2"], name="cos2"),
        oh.make_node("Add", ["c1", "one_a"], ["a1"], name="add1"),
        oh.make_node("Add", ["c2", "one_b"], ["a2"], name="add2"),
        oh.make_node("Relu", ["a1"], ["r1"], name="relu1"),
        oh.make_node("Relu", ["a2"], ["r2"], name="relu2"),
        oh.make_node("Add", ["r1", "r2"], ["y"], name="sum"),
    ]
    one = [onnx.numpy_helper.from_array(np.array(1.0, np.float32), n) for n in ("one_a", "one_b")]
    pred = _check(_model(nodes, [_x()], [_y()], one))
    assert pred.removed_by_rule() == {"common_subexpression": 3}


def test_an_int_and_a_float_attribute_of_equal_value_do_not_merge() -> None:
    """ORT compares an attribute's type as well as its value: of three LayerNormalizations
    (its schema accepts attributes it does not declare) with ``extra`` = int 1, float 1.0,
    int 1, only the two int ones merge."""
    extra = {"int_a": (onnx.AttributeProto.INT, 1), "float_b": (onnx.AttributeProto.FLOAT, 1.0)}
    extra["int_c"] = extra["int_a"]
    nodes = []
    for name, (kind, value) in extra.items():
        node = oh.make_node("LayerNormalization", ["x", "s"], [f"{name}_out"], name=name)
        attr = node.attribute.add()
        attr.name, attr.type = "extra", kind
        if kind == onnx.AttributeProto.INT:
            attr.i = int(value)
        else:
            attr.f = value
        nodes.append(node)
    nodes += [
        oh.make_node("Add", ["int_a_out", "float_b_out"], ["ab"], name="add_ab"),
        oh.make_node("Add", ["ab", "int_c_out"], ["y"], name="add_c"),
    ]
    inputs = [_x(), oh.make_tensor_value_info("s", F, [3])]
    pred = _check(_model(nodes, inputs, [_y()], opset=17))
    assert [r.name for r in pred.removed] == ["int_c"]


def test_identity_same_type_cast_and_dropout_are_eliminated() -> None:
    nodes = [
        oh.make_node("Identity", ["x"], ["i"], name="identity"),
        oh.make_node("Cast", ["i"], ["c"], to=F, name="cast_same"),
        oh.make_node("Dropout", ["c"], ["d"], name="dropout"),
        oh.make_node("Cast", ["d"], ["h"], to=TensorProto.FLOAT16, name="cast_half"),
        oh.make_node("Cast", ["h"], ["y"], to=F, name="cast_back"),
    ]
    pred = _check(_model(nodes, [_x()], [_y()]))
    assert pred.removed_by_rule() == {
        "cast_elimination": 1,
        "dropout_elimination": 1,
        "identity_elimination": 1,
    }


def test_static_shapes_fold_and_dynamic_ones_do_not() -> None:
    """Shape of the static [2, 3] x folds, and with it Gather/Unsqueeze/Concat on constants;
    Shape of the dynamic z stays."""
    nodes = [
        oh.make_node("Shape", ["x"], ["s"], name="shape_static"),
        oh.make_node("Gather", ["s", "i0"], ["g"], axis=0, name="gather"),
        oh.make_node("Unsqueeze", ["g", "ax0"], ["u"], name="unsqueeze"),
        oh.make_node("Concat", ["u", "m1"], ["new_shape"], axis=0, name="concat"),
        oh.make_node("Reshape", ["x", "new_shape"], ["y"], name="reshape"),
        oh.make_node("Shape", ["z"], ["w"], name="shape_dynamic"),
    ]
    inputs = [_x(), oh.make_tensor_value_info("z", F, ["n", 3])]
    outputs = [_y(), oh.make_tensor_value_info("w", TensorProto.INT64, [2])]
    inits = [_i64("ax0", [0]), _i64("m1", [-1]), onnx.numpy_helper.from_array(np.array(0), "i0")]
    pred = _check(_model(nodes, inputs, outputs, inits))
    assert pred.removed_by_rule() == {"constant_folding": 3, "shape_folding": 1}
    assert {r.name for r in pred.removed} == {"shape_static", "gather", "unsqueeze", "concat"}


def test_graph_outputs_and_random_ops_are_kept() -> None:
    """An Identity whose output is a graph output stays; two RandomNormalLike never merge."""
    nodes = [
        oh.make_node("Identity", ["x"], ["y"], name="identity_out"),
        oh.make_node("RandomNormalLike", ["x"], ["n1"], name="random1"),
        oh.make_node("RandomNormalLike", ["x"], ["n2"], name="random2"),
        oh.make_node("Add", ["n1", "n2"], ["z"], name="add"),
    ]
    pred = _check(_model(nodes, [_x()], [_y(), _y("z")]))
    assert not pred.removed


def test_a_reshape_chain_with_a_static_result_becomes_one_reshape() -> None:
    nodes = [
        oh.make_node("Relu", ["x"], ["r"], name="relu"),
        oh.make_node("Reshape", ["r", "s6"], ["flat"], name="reshape"),
        oh.make_node("Unsqueeze", ["flat", "ax0"], ["u"], name="unsqueeze"),
        oh.make_node("Squeeze", ["u", "ax0"], ["q"], name="squeeze"),
        oh.make_node("Relu", ["q"], ["y"], name="relu_out"),
    ]
    model = _model(nodes, [_x()], [_y()], [_i64("s6", [6]), _i64("ax0", [0])])
    pred = predict_placement(model, TABLE, optimization_level=1)
    assert pred.removed_by_rule() == {"reshape_fusion": 2}
    assert _ort_kept(model) == collections.Counter(
        {"relu": 1, "reshape_new_reshape": 1, "relu_out": 1}
    )
    assert [n.name for n in pred.nodes] == ["relu", "reshape_new_reshape", "relu_out"]


@pytest.mark.parametrize(("first", "last", "kept"), [(1, 0, 3), (0, 1, 2), (1, 1, 3)])
def test_a_reshape_with_allowzero_neither_starts_nor_extends_a_chain(
    first: int, last: int, kept: int
) -> None:
    nodes = [
        oh.make_node("Relu", ["x"], ["r"], name="relu"),
        oh.make_node("Reshape", ["r", "s6"], ["flat"], name="reshape", allowzero=first),
        oh.make_node("Unsqueeze", ["flat", "ax0"], ["u"], name="unsqueeze"),
        oh.make_node("Reshape", ["u", "s23"], ["q"], name="reshape_last", allowzero=last),
        oh.make_node("Relu", ["q"], ["y"], name="relu_out"),
    ]
    inits = [_i64("s6", [6]), _i64("ax0", [0]), _i64("s23", [2, 3])]
    model = _model(nodes, [_x()], [_y()], inits)
    pred = predict_placement(model, TABLE, optimization_level=1)
    assert collections.Counter(n.name for n in pred.nodes) == _ort_kept(model)
    assert len(pred.nodes) == kept + 2


def test_transpose_pairs_that_cancel_go() -> None:
    nodes = [
        oh.make_node("Relu", ["x"], ["r"], name="relu"),
        oh.make_node("Transpose", ["r"], ["t1"], perm=[0, 2, 1], name="t1"),
        oh.make_node("Transpose", ["t1"], ["t2"], perm=[0, 2, 1], name="t2"),
        oh.make_node("Relu", ["t2"], ["y"], name="relu_out"),
    ]
    pred = _check(_model(nodes, [_x([2, 3, 4])], [_y()]))
    assert pred.removed_by_rule() == {"transpose_cancellation": 2}


def test_nodes_an_edit_makes_equal_merge_in_the_next_round() -> None:
    """A Relu of x and a Relu of a cancelling Transpose pair over x: equal only once the
    pair is gone (round 1's last rule), so common-subexpression elimination merges them
    in round 2, on the key of the rewired Relu computed again."""
    nodes = [
        oh.make_node("Relu", ["x"], ["r1"], name="relu_x"),
        oh.make_node("Transpose", ["x"], ["t1"], perm=[1, 0], name="t1"),
        oh.make_node("Transpose", ["t1"], ["t2"], perm=[1, 0], name="t2"),
        oh.make_node("Relu", ["t2"], ["r2"], name="relu_tt"),
        oh.make_node("Add", ["r1", "r2"], ["y"], name="add"),
    ]
    pred = _check(_model(nodes, [_x()], [_y()]))
    assert pred.removed_by_rule() == {"common_subexpression": 1, "transpose_cancellation": 2}


def test_disabled_removes_nothing_and_levels_are_checked() -> None:
    nodes = [oh.make_node("Identity", ["x"], ["i"], name="identity")]
    nodes.append(oh.make_node("Relu", ["i"], ["y"], name="relu"))
    model = _model(nodes, [_x()], [_y()])
    as_written = predict_placement(model, TABLE, optimization_level=0)
    assert not as_written.removed and len(as_written.nodes) == 2
    assert as_written.optimization_level == OptimizationLevel.DISABLE_ALL
    default = predict_placement(model, TABLE)
    assert default.optimization_level == OptimizationLevel.ENABLE_ALL
    assert [r.name for r in default.removed] == ["identity"]
    assert OptimizationLevel.of(ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED).folds
    with pytest.raises(ValueError, match="not an ORT graph optimization level: 7"):
        predict_placement(model, TABLE, optimization_level=7)


def _ref(node: onnx.NodeProto, name: str, kind: int, parameter: str) -> onnx.NodeProto:
    attr = node.attribute.add()
    attr.name, attr.type, attr.ref_attr_name = name, kind, parameter
    return node


def _leaky(name: str, x: str, y: str, parameter: str = "p") -> onnx.NodeProto:
    node = oh.make_node("LeakyRelu", [x], [y], name=name)
    return _ref(node, "alpha", onnx.AttributeProto.FLOAT, parameter)


def _with_functions(
    calls: list[dict[str, object]],
    functions: list[onnx.FunctionProto],
    shape: list[int],
    op: str = "F",
) -> onnx.ModelProto:
    """One call of ``op`` on x per entry of ``calls`` (its attributes), each followed by a
    Relu, the Relus summed."""
    nodes = []
    for i, attrs in enumerate(calls):
        nodes.append(oh.make_node(op, ["x"], [f"o{i}"], domain="local", name=f"call{i}", **attrs))
        nodes.append(oh.make_node("Relu", [f"o{i}"], [f"r{i}"], name=f"relu{i}"))
    total = "r0"
    for i in range(1, len(calls)):
        nodes.append(oh.make_node("Add", [total, f"r{i}"], [f"s{i}"], name=f"add{i}"))
        total = f"s{i}"
    nodes[-1].output[0] = "y"
    graph = oh.make_graph(nodes, "g", [_x(shape)], [_y()])
    opsets = [oh.make_opsetid("", 21), oh.make_opsetid("local", 1)]
    model = oh.make_model(graph, opset_imports=opsets, functions=functions)
    model.ir_version = 10
    return model


def _check_ops(model: onnx.ModelProto) -> PlacementPrediction:
    """As :func:`_check`, by op type: ORT renames the second inlining of a function's node
    (``_inlfunc_F_token_0_<node>``), which the prediction does not."""
    pred = predict_placement(model, TABLE, optimization_level=OptimizationLevel.ENABLE_BASIC)
    kept = collections.Counter(n.op_type for n in _ort_optimized(model).graph.node)
    assert collections.Counter(n.op_type for n in pred.nodes) == kept
    return pred


def _function(
    nodes: list[onnx.NodeProto],
    parameters: list[str],
    defaults: list[onnx.AttributeProto] = (),  # type: ignore[assignment]
    name: str = "F",
) -> onnx.FunctionProto:
    opsets = [oh.make_opsetid("", 21), oh.make_opsetid("local", 1)]
    return oh.make_function(
        "local", name, ["a"], ["b"], nodes, opsets, parameters, attribute_protos=list(defaults)
    )


def test_function_nodes_merge_on_the_attribute_values_of_their_calls() -> None:
    """ORT substitutes a function's attribute parameters when it inlines it: the Transposes
    of two calls with perm [0, 2, 1] merge (and the Relus after them), not the third's."""
    transpose = _ref(
        oh.make_node("Transpose", ["a"], ["b"], name="t"), "perm", onnx.AttributeProto.INTS, "p"
    )
    calls: list[dict[str, object]] = [{"p": [0, 2, 1]}, {"p": [0, 2, 1]}, {"p": [1, 0, 2]}]
    model = _with_functions(calls, [_function([transpose], ["p"])], [3, 3, 3])
    pred = _check_ops(model)
    assert pred.removed_by_rule() == {"common_subexpression": 2}
    assert [r.name for r in pred.removed] == ["_inlfunc_F_t", "relu0"]


def test_a_parameter_reads_the_call_then_the_function_default_then_the_schema_one() -> None:
    """A call that leaves alpha to the function's default 0.5 merges with one that sets 0.5,
    not with 0.2; through a nested call (q passed on as p) too. Calls of a function
    without a default that leave the parameter unset lose the attribute, so read
    LeakyRelu's schema default 0.01: they merge with a call that sets 0.01."""
    defaulted = _function([_leaky("l", "a", "b")], [], [oh.make_attribute("p", 0.5)])
    outer = _function(
        [
            _ref(
                oh.make_node("F", ["a"], ["b"], domain="local"), "p", onnx.AttributeProto.FLOAT, "q"
            )
        ],
        ["q"],
        name="G",
    )
    calls: list[dict[str, object]] = [{"p": 0.5}, {}, {"p": 0.2}]
    pred = _check_ops(_with_functions(calls, [defaulted], [2, 3]))
    assert pred.removed_by_rule() == {"common_subexpression": 2}
    pred = _check_ops(
        _with_functions([{"q": 0.5}, {"q": 0.2}, {"q": 0.5}], [defaulted, outer], [2, 3], "G")
    )
    assert pred.removed_by_rule() == {"common_subexpression": 2}
    unset = _function([_leaky("l", "a", "b")], ["p"])
    pred = _check_ops(_with_functions([{}, {"p": 0.01}, {}], [unset], [2, 3]))
    assert pred.removed_by_rule() == {"common_subexpression": 4}


def test_an_unset_attribute_counts_with_its_schema_default() -> None:
    """ORT sets a schema's defaults on the nodes it loads: a LeakyRelu without alpha merges
    with one with alpha 0.01 (its default), not with 0.02; Transpose's perm has no default,
    so a Transpose without one stays apart from one with perm [1, 0]."""
    nodes = [
        oh.make_node("LeakyRelu", ["x"], ["l1"], name="leaky_unset"),
        oh.make_node("LeakyRelu", ["x"], ["l2"], alpha=0.01, name="leaky_default"),
        oh.make_node("LeakyRelu", ["x"], ["l3"], alpha=0.02, name="leaky_other"),
        oh.make_node("Transpose", ["x"], ["t1"], name="transpose_unset"),
        oh.make_node("Transpose", ["x"], ["t2"], perm=[1, 0], name="transpose_10"),
        oh.make_node("Sum", ["l1", "l2", "l3", "t1", "t2"], ["y"], name="sum"),
    ]
    pred = _check(_model(nodes, [_x([3, 3])], [_y()]))
    assert [r.name for r in pred.removed] == ["leaky_unset"]


@pytest.mark.parametrize("in_function", [False, True])
def test_float_attributes_that_are_nan_never_merge(in_function: bool) -> None:
    """Two LeakyRelus of x with alpha NaN stay two, as in ORT: written so, or in a function
    whose two nodes read the same parameter (the same attribute object)."""
    nan = float("nan")
    if in_function:
        body = [_leaky("l1", "a", "b1"), _leaky("l2", "a", "b2")]
        body.append(oh.make_node("Add", ["b1", "b2"], ["b"], name="add"))
        model = _with_functions([{"p": nan}], [_function(body, ["p"])], [2, 3])
    else:
        nodes = [
            oh.make_node("LeakyRelu", ["x"], ["a"], alpha=nan, name="l1"),
            oh.make_node("LeakyRelu", ["x"], ["b"], alpha=nan, name="l2"),
            oh.make_node("Add", ["a", "b"], ["y"], name="add"),
        ]
        model = _model(nodes, [_x()], [_y()])
    pred = _check_ops(model)
    assert not pred.removed
