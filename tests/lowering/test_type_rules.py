"""The type rules the registry derives from ``onnx.defs``, proven by running models.

For every derived (type-only) step ``(op, v)`` with ``18 < v <= 28``:

* benign, one step: real one-op models at opset ``v`` (ONNX's own node test cases,
  relabelled; hand-built where ONNX has none) lower to ``v - 1``; the lowered model passes
  ``onnx.checker`` (full_check) there, its node is untouched, and ORT's outputs (or
  onnx.reference's, for an original ORT cannot load) are equal on the same inputs;
* benign, down to 18: the same for a model whose types opset 18 allows too, lowered straight
  to 18 through every later step of the op;
* new feature (steps that add types): the model retyped to an added type is refused with a
  message naming the node, the op and version, and the type; the model is left unchanged.

Plus a model mixing many ops at opset 28 lowered straight to 18 (every node benign), and
the same model with two new-type nodes added (both refused, listed together).

Where the original cannot run in ORT 1.32 (no kernel registered at its opset):

* onnx.reference runs it (Q/DQ-28, OptionalGetElement/OptionalHasElement-28, RoiAlign-22);
* GlobalLpPool-22, MaxRoiPool-22 (no reference implementation) and Optional-28 (the
  reference wraps an optional tensor in a list) are compared with outputs computed
  independently in numpy, the lowered model running in ORT;
* random ops (Bernoulli, Multinomial, Random*) carry a ``seed``: their outputs are compared
  exactly when both models run through onnx.reference (same seeded generator), and the
  lowered model's ORT outputs by shape and dtype (Multinomial: only that, as nothing runs
  Multinomial-22).

In every one-step case the test also checks that the derived rule left the nodes untouched.
"""

from __future__ import annotations

import re
from typing import cast

import numpy as np
import onnx
import onnx.helper as oh
import onnx.reference
import pytest
from onnx import TensorProto

from onnxscript_ep_passes import DEFAULT_REGISTRY, AdapterEntry, DowngradeError, lower_opset
from onnxscript_ep_passes.lowering import schemas
from onnxscript_ep_passes.lowering.lower_opset import max_ir_version_for_opset
from tests.harness import assert_lowers_exactly, assert_refuses, make_model, run_model
from tests.lowering.backend_cases import (
    RANDOM_OPS,
    OneOpModel,
    benign_models,
    missing_steps,
    new_type_model,
    pretty_type,
)

LOW, HIGH = 18, 28
ONE_STEP_CASES = 3  # backend cases per step for the one-step variant

DERIVED = [entry for entry in DEFAULT_REGISTRY.entries(LOW, HIGH) if entry.derived]
WIDENING = [e for e in DERIVED if schemas.step_diff(e.op_type, e.version).added_types]
# Steps of ops that exist at opset 18 and are more than one step above it.
DOWN_TO_LOW = [e for e in DERIVED if e.version - 1 > LOW and schemas.since_version(e.op_type, LOW)]


def _id(entry: AdapterEntry) -> str:
    return f"{entry.op_type}-{entry.version}"


def _previous(entry: AdapterEntry) -> int:
    previous = schemas.since_version(entry.op_type, entry.version - 1)
    assert previous is not None
    return previous


def _nodes(model: onnx.ModelProto) -> list[str]:
    """The nodes (subgraphs included) as text: equal when they mean the same."""
    return [onnx.printer.to_text(node) for node in model.graph.node]


def _lower(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    # cast: mypy resolves the overloads of lower_opset to ir.Model for a proto too
    return cast(onnx.ModelProto, lower_opset(model, target))


def _lower_random(one: OneOpModel, target: int) -> onnx.ModelProto:
    """Lower a seeded random op; compare what can be compared (see module docstring)."""
    model, feeds = one.model, one.feeds
    onnx.checker.check_model(model, full_check=True)
    lowered = _lower(model, target)
    onnx.checker.check_model(lowered, full_check=True)
    actual, _ = run_model(lowered, feeds)
    declared = [out.type.tensor_type for out in model.graph.output]
    for value, info in zip(actual, declared):
        expected_dtype = onnx.helper.tensor_dtype_to_np_dtype(info.elem_type)
        assert value.dtype == expected_dtype
        assert list(value.shape) == [d.dim_value for d in info.shape.dim]
    try:
        reference = onnx.reference.ReferenceEvaluator(model)
    except Exception:
        return lowered  # no implementation anywhere for the original (Multinomial)
    expected = reference.run(None, feeds)
    again = onnx.reference.ReferenceEvaluator(lowered).run(None, feeds)
    for e, a, value in zip(expected, again, actual):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(e))
        assert np.asarray(e).shape == value.shape and np.asarray(e).dtype == value.dtype
    return lowered


def _lower_unrunnable(one: OneOpModel, target: int) -> onnx.ModelProto:
    """Neither ORT nor onnx.reference runs the original: compare the lowered model's ORT
    outputs with outputs computed independently (numpy)."""
    assert one.expected is not None
    onnx.checker.check_model(one.model, full_check=True)
    before = one.model.SerializeToString()
    lowered = _lower(one.model, target)
    assert one.model.SerializeToString() == before
    onnx.checker.check_model(lowered, full_check=True)
    actual, how = run_model(lowered, one.feeds)
    assert how == "onnxruntime"
    for index, (e, a) in enumerate(zip(one.expected, actual, strict=True)):
        assert a.dtype == e.dtype and a.shape == e.shape, f"output {index}"
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6, err_msg=f"output {index}")
    return lowered


def _prove(one: OneOpModel, op: str, target: int) -> onnx.ModelProto:
    if op in RANDOM_OPS:
        return _lower_random(one, target)
    if one.expected is not None:
        return _lower_unrunnable(one, target)
    return assert_lowers_exactly(one.model, target, one.feeds)


@pytest.mark.parametrize("entry", DERIVED, ids=_id)
def test_benign_one_step(entry: AdapterEntry) -> None:
    op, version = entry.op_type, entry.version
    models = benign_models(op, version, version - 1, ONE_STEP_CASES)
    assert models, f"no benign one-op model of {op} at opset {version}"
    for one in models:
        lowered = _prove(one, op, version - 1)
        # A type rule changes nothing but the opset the node is read at.
        assert _nodes(lowered) == _nodes(one.model), f"{one.name}: the node was rewritten"


@pytest.mark.parametrize("entry", DOWN_TO_LOW, ids=_id)
def test_benign_down_to_18(entry: AdapterEntry) -> None:
    op, version = entry.op_type, entry.version
    models = benign_models(op, version, LOW, 1)
    assert models, f"no one-op model of {op} at opset {version} whose types opset {LOW} allows"
    one = models[0]
    missing = missing_steps(one.model, version, LOW)
    if missing:
        pytest.skip(
            f"{one.name} cannot reach opset {LOW} yet: no rule for {', '.join(missing)} "
            "(hand-written adapter not registered)"
        )
    _prove(one, op, LOW)


@pytest.mark.parametrize("entry", WIDENING, ids=_id)
def test_new_type_refused(entry: AdapterEntry) -> None:
    op, version = entry.op_type, entry.version
    model, node_name, retyped = new_type_model(op, version)
    onnx.checker.check_model(model, full_check=True)  # valid where the type exists
    pattern = (
        rf"node '{re.escape(node_name)}' \({op}-{version}\b[^\n]*"
        rf"is {re.escape(pretty_type(retyped[0]))}, which {op}-{_previous(entry)} does not allow"
    )
    error = assert_refuses(model, version - 1, pattern)
    assert any(r.node_name == node_name and r.step == version for r in error.refusals)
    # Straight to the lowest target: refused at the same step, for the same reason.
    with pytest.raises(DowngradeError, match=pattern):
        lower_opset(model, LOW)


def test_new_type_variants_use_an_added_type() -> None:
    """The retyped values really use types the step added (so the refusal is the point)."""
    for entry in WIDENING:
        diff = schemas.step_diff(entry.op_type, entry.version)
        added = set().union(*diff.added_types.values())
        _, _, retyped = new_type_model(entry.op_type, entry.version)
        assert retyped, _id(entry)
        assert set(retyped) <= added, f"{_id(entry)}: {retyped} not all in {sorted(added)}"


def _mixed_model() -> onnx.ModelProto:
    """Several ops at opset 28, each with types opset 18 allows, chained."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    init = [
        oh.make_tensor("shape", i64, [2], [6, 4]),
        oh.make_tensor("axes0", i64, [1], [0]),
        oh.make_tensor("axes1", i64, [1], [1]),
        oh.make_tensor("k", i64, [1], [2]),
    ]
    nodes = [
        oh.make_node("Celu", ["x"], ["a"], name="celu", alpha=0.7),  # 28
        oh.make_node("Elu", ["a"], ["b"], name="elu"),  # 22
        oh.make_node("Sin", ["b"], ["c"], name="sin"),  # 22
        oh.make_node("Transpose", ["c"], ["t"], name="transpose", perm=[0, 2, 1]),  # 21..24
        oh.make_node("Reshape", ["t", "shape"], ["r"], name="reshape"),  # 19..25
        oh.make_node("Unsqueeze", ["r", "axes0"], ["u"], name="unsqueeze"),  # 21..25
        oh.make_node("Squeeze", ["u", "axes0"], ["s"], name="squeeze"),  # 21..25
        oh.make_node("Flatten", ["s"], ["fl"], name="flatten", axis=1),  # 21..25
        oh.make_node("TopK", ["fl", "k"], ["vals", "idx"], name="topk"),  # 24
        oh.make_node("Einsum", ["fl"], ["ein"], name="einsum", equation="ij->ji"),  # 28
        oh.make_node("ReduceMax", ["fl", "axes1"], ["rmax"], name="reducemax"),  # 20
        oh.make_node("ReduceLogSumExp", ["fl", "axes1"], ["rlse"], name="rlse"),  # 28
        oh.make_node("Shape", ["fl"], ["sh"], name="shape_op"),  # 19..25
        oh.make_node("Size", ["fl"], ["sz"], name="size"),  # 19..25
        oh.make_node(
            "ConstantOfShape",
            ["sh"],
            ["ones"],
            name="cos",
            value=oh.make_tensor("one", f, [1], [1.0]),
        ),  # 20..25
        oh.make_node("Identity", ["ones"], ["ident"], name="identity"),  # 19..25
        oh.make_node("IsNaN", ["vals"], ["nan"], name="isnan"),  # 20
        oh.make_node("Equal", ["idx", "idx"], ["eq"], name="equal"),  # 19
        oh.make_node(
            "BitShift", ["bits", "amount"], ["shifted"], name="bitshift", direction="LEFT"
        ),  # 28
    ]
    inputs = [
        oh.make_tensor_value_info("x", f, [2, 3, 4]),
        oh.make_tensor_value_info("bits", TensorProto.UINT8, [5]),
        oh.make_tensor_value_info("amount", TensorProto.UINT8, [5]),
    ]
    outputs = [
        oh.make_tensor_value_info("ident", f, [6, 4]),
        oh.make_tensor_value_info("vals", f, [6, 2]),
        oh.make_tensor_value_info("ein", f, [4, 6]),
        oh.make_tensor_value_info("rmax", f, [6, 1]),
        oh.make_tensor_value_info("rlse", f, [6, 1]),
        oh.make_tensor_value_info("sz", i64, []),
        oh.make_tensor_value_info("nan", TensorProto.BOOL, [6, 2]),
        oh.make_tensor_value_info("eq", TensorProto.BOOL, [6, 2]),
        oh.make_tensor_value_info("shifted", TensorProto.UINT8, [5]),
    ]
    return make_model(nodes, inputs, outputs, HIGH, initializers=init, name="mixed")


def test_mixed_model_28_to_18() -> None:
    model = _mixed_model()
    assert model.ir_version == max_ir_version_for_opset(HIGH)
    assert not missing_steps(model, HIGH, LOW)
    for node in model.graph.node:  # every node has at least one step to undo
        assert schemas.since_version(node.op_type, HIGH) != schemas.since_version(
            node.op_type, LOW
        ), node.op_type
    rng = np.random.default_rng(0)
    feeds: dict[str, np.ndarray] = {
        "x": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "bits": rng.integers(0, 16, 5).astype(np.uint8),
        "amount": rng.integers(0, 4, 5).astype(np.uint8),
    }
    assert_lowers_exactly(model, LOW, feeds)


def test_mixed_model_refuses_every_new_type_node() -> None:
    """Two nodes using new types in one model: both are listed, nothing is changed."""
    model = _mixed_model()
    x8 = oh.make_tensor_value_info("x8", TensorProto.FLOAT8E8M0, [2, 2])
    x4 = oh.make_tensor_value_info("x4", TensorProto.INT4, [2, 2])
    model.graph.input.extend([x8, x4])
    model.graph.node.extend(
        [
            oh.make_node("Transpose", ["x8"], ["y8"], name="t8"),
            oh.make_node("Flatten", ["x4"], ["y4"], name="f4"),
        ]
    )
    model.graph.output.extend(
        [
            oh.make_tensor_value_info("y8", TensorProto.FLOAT8E8M0, [2, 2]),
            oh.make_tensor_value_info("y4", TensorProto.INT4, [2, 2]),
        ]
    )
    onnx.checker.check_model(model, full_check=True)
    error = assert_refuses(model, LOW, r"node 't8' \(Transpose-25")
    by_node = {r.node_name: r for r in error.refusals}
    assert set(by_node) == {"t8", "f4"}, error
    assert by_node["t8"].step == 24 and "FLOAT8E8M0, which Transpose-23" in by_node["t8"].reason
    assert by_node["f4"].step == 21 and "INT4, which Flatten-13" in by_node["f4"].reason
