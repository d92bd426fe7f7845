"""Legalization without a device: in-place expansion, static shape folding, cost decisions.

Synthetic kernel tables stand for an EP that lacks an op; outputs are checked on ORT's CPU
EP against the original. The real-WebGPU checks are in ``test_legalize_webgpu.py``.
"""

from __future__ import annotations

import collections
import importlib
from collections.abc import Iterable
from typing import Any

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.ep import KernelTable, get_table, predict_placement
from onnxscript_ep_passes.lowering.context import NodeRefusedError
from onnxscript_ep_passes.lowering.expansion import (
    expand_node,
    function_body_version,
    meaning_changed,
)
from onnxscript_ep_passes.passes import (
    EpLoweringChoice,
    EpLoweringResult,
    LegalizeForEpPass,
    LegalizeForEpResult,
    LowerOpsetForEpPass,
    fold_static_shapes,
    legalize,
)
from onnxscript_ep_passes.reports.report import format_report, placement_report
from tests.harness import gelu_in_if, make_model, run_model

FLOAT = onnx.TensorProto.FLOAT

# Ops of Gelu's and LayerNormalization's bodies, and of the test graphs.
_COMMON_OPS = (
    "Add",
    "Cast",
    "CastLike",
    "Concat",
    "Constant",
    "Div",
    "Flatten",
    "Mul",
    "Neg",
    "Pow",
    "Reciprocal",
    "ReduceMean",
    "Relu",
    "Reshape",
    "Shape",
    "Size",
    "Slice",
    "Sqrt",
    "Sub",
    "Sum",
    "Tanh",
    "ConstantOfShape",
)


def _table(ops: Iterable[str]) -> KernelTable:
    """A table with one kernel per op matching every since_version (types unchecked)."""
    rows = [("", op, 1, 40, None) for op in ops]
    return KernelTable.from_rows("TestEP", "0.0", "test", rows)


def _ops(model: ir.Model) -> collections.Counter[str]:
    return collections.Counter(n.op_type for n in ir.traversal.RecursiveGraphIterator(model.graph))


def _gelu_model(opset: int = 24, *, output_is_gelu: bool = False) -> onnx.ModelProto:
    nodes = [oh.make_node("Gelu", ["x"], ["g"], name="gelu", approximate="tanh")]
    if output_is_gelu:
        out = "g"
    else:
        nodes.append(oh.make_node("Neg", ["g"], ["y"], name="neg"))
        out = "y"
    return make_model(
        nodes,
        [oh.make_tensor_value_info("x", FLOAT, [2, 5])],
        [oh.make_tensor_value_info(out, FLOAT, [2, 5])],
        opset,
    )


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)}


def _assert_same_outputs(original: onnx.ModelProto, model: ir.Model, feeds: dict) -> None:
    proto = ir.to_proto(model)
    onnx.checker.check_model(proto, full_check=True)
    expected, _ = run_model(original, feeds)
    actual, how = run_model(proto, feeds)
    assert how == "onnxruntime"
    for e, a in zip(expected, actual):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6)


# -- expand_node -------------------------------------------------------------------------


@pytest.mark.parametrize("output_is_gelu", [False, True], ids=["inner", "graph-output"])
def test_expand_node_in_place_at_the_model_opset(output_is_gelu: bool) -> None:
    original = _gelu_model(24, output_is_gelu=output_is_gelu)
    model = ir.from_proto(original)
    gelu = next(n for n in model.graph if n.op_type == "Gelu")
    built = expand_node(model, gelu)
    assert built and all(n.graph is model.graph for n in built)
    assert all(n.name.startswith("gelu/expanded_") for n in built)
    assert _ops(model)["Gelu"] == 0
    assert model.opset_imports[""] == 24
    assert [o.name for o in model.graph.outputs] == ["g" if output_is_gelu else "y"]
    _assert_same_outputs(original, model, _feeds())


def test_expand_node_takes_the_newest_body_not_above_the_opset() -> None:
    # LayerNormalization-17 has bodies for opsets 17 and 18; at 24 the 18 one is used
    # (ReduceMean with axes as an input), and it reads the same at 24.
    assert function_body_version("LayerNormalization", 24) == 18
    assert function_body_version("LayerNormalization", 17) == 17
    assert function_body_version("Neg", 24) is None
    original = make_model(
        [oh.make_node("LayerNormalization", ["x", "s", "b"], ["y"], name="ln", axis=-1)],
        [
            oh.make_tensor_value_info("x", FLOAT, [2, 5]),
            oh.make_tensor_value_info("s", FLOAT, [5]),
            oh.make_tensor_value_info("b", FLOAT, [5]),
        ],
        [oh.make_tensor_value_info("y", FLOAT, [2, 5])],
        24,
    )
    model = ir.from_proto(original)
    expand_node(model, next(iter(model.graph)))
    assert _ops(model)["LayerNormalization"] == 0
    rng = np.random.default_rng(1)
    feeds = {
        "x": rng.standard_normal((2, 5)).astype(np.float32),
        "s": rng.standard_normal(5).astype(np.float32),
        "b": rng.standard_normal(5).astype(np.float32),
    }
    _assert_same_outputs(original, model, feeds)


def test_expand_node_refuses_an_op_without_body_and_leaves_the_model() -> None:
    original = _gelu_model(24)
    model = ir.from_proto(original)
    neg = next(n for n in model.graph if n.op_type == "Neg")
    with pytest.raises(NodeRefusedError, match="no ONNX function body"):
        expand_node(model, neg)
    assert (
        ir.to_proto(model).SerializeToString()
        == ir.to_proto(ir.from_proto(original)).SerializeToString()
    )


def test_body_nodes_must_mean_the_same_at_the_model_opset() -> None:
    def node(op: str) -> ir.Node:
        return ir.Node("", op, [], num_outputs=1)

    assert meaning_changed(node("Reshape"), 23, 25) is None  # type-only steps
    assert meaning_changed(node("Cast"), 23, 25) is None  # round_mode: float8e8m0 only
    assert meaning_changed(node("Softmax"), 13, 28) is None  # unchanged
    reason = meaning_changed(node("Mod"), 27, 28)  # float fmod=0 became floor-mod at 28
    assert reason is not None and "Mod-28" in reason
    reason = meaning_changed(node("GroupNormalization"), 18, 21)
    assert reason is not None and "stash_type" in reason


# -- fold_static_shapes ----------------------------------------------------------------


def _shape_math_model(batch: int | str) -> onnx.ModelProto:
    nodes = [
        oh.make_node("Shape", ["x"], ["s"], name="shape", start=0, end=1),
        oh.make_node("Shape", ["x"], ["t"], name="tail", start=1),
        oh.make_node("ReduceProd", ["t"], ["p"], name="prod", keepdims=1),
        oh.make_node("Concat", ["s", "p"], ["new_shape"], name="concat", axis=0),
        oh.make_node("Reshape", ["x", "new_shape"], ["y"], name="reshape"),
    ]
    return make_model(
        nodes,
        [oh.make_tensor_value_info("x", FLOAT, [batch, 3, 4])],
        [oh.make_tensor_value_info("y", FLOAT, [batch, 12])],
        24,
    )


def test_fold_static_shapes_replaces_static_shape_math_by_constants() -> None:
    original = _shape_math_model(2)
    model = ir.from_proto(original)
    math_nodes = [n for n in model.graph if n.op_type != "Reshape"]
    assert fold_static_shapes(math_nodes, 24) == 4
    assert _ops(model) == {"Constant": 1, "Reshape": 1}
    shape_value = next(n for n in model.graph if n.op_type == "Reshape").inputs[1]
    assert shape_value is not None and shape_value.name == "new_shape"
    assert ir.convenience.get_const_tensor(shape_value).numpy().tolist() == [2, 12]
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)}
    _assert_same_outputs(original, model, feeds)


def test_fold_static_shapes_keeps_dynamic_dimensions() -> None:
    model = ir.from_proto(_shape_math_model("batch"))
    math_nodes = [n for n in model.graph if n.op_type != "Reshape"]
    # The static tail folds (Shape -> ReduceProd); the batch Shape and the Concat stay.
    assert fold_static_shapes(math_nodes, 24) == 2
    assert _ops(model) == {"Shape": 1, "Constant": 1, "Concat": 1, "Reshape": 1}


def test_fold_static_shapes_only_touches_the_given_nodes() -> None:
    model = ir.from_proto(_shape_math_model(2))
    assert fold_static_shapes([], 24) == 0
    assert _ops(model)["Shape"] == 2


# -- legalize: the cost decision -------------------------------------------------------


def test_legalize_expands_a_node_the_ep_cannot_run() -> None:
    original = _gelu_model(24)
    model = ir.from_proto(original)
    result = legalize(model, _table(_COMMON_OPS))
    assert [n.name for n in result.expanded] == ["gelu"]
    assert [(d.node, d.op_type, d.decision) for d in result.decisions] == [
        ("gelu", "Gelu", "expand")
    ]
    assert "function body" in result.decisions[0].reason
    assert result.after is not None and result.after.fully_on_ep
    # The body's constants were folded: only on-EP arithmetic is left.
    assert _ops(model)["Gelu"] == 0
    _assert_same_outputs(original, model, _feeds())


def test_legalize_never_expands_what_the_ep_runs() -> None:
    original = _gelu_model(24)
    model = ir.from_proto(original)
    result = legalize(model, _table((*_COMMON_OPS, "Gelu")))
    assert not result.modified and result.decisions == []
    assert _ops(model)["Gelu"] == 1


def test_legalize_keeps_a_node_on_cpu_when_its_body_would_be_worse() -> None:
    # The EP lacks Tanh and Pow too: the body puts more nodes on CPU than the Gelu.
    ops = [op for op in _COMMON_OPS if op not in ("Tanh", "Pow")]
    original = _gelu_model(24)
    model = ir.from_proto(original)
    result = legalize(model, _table(ops))
    assert result.expanded == []
    (decision,) = result.decisions
    assert decision.decision == "cpu" and "would not help" in decision.reason
    assert (
        ir.to_proto(model).SerializeToString()
        == ir.to_proto(ir.from_proto(original)).SerializeToString()
    )


def test_a_failure_inside_a_trial_leaves_the_model_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Trials expand the model in place: a failure while one is priced (here, injected in
    the placement prediction after the expansion) puts the model back before it spreads."""
    module = importlib.import_module("onnxscript_ep_passes.passes.legalize")
    original = _gelu_model(24)
    model = ir.from_proto(original)
    calls = []
    real = module.predict_placement

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(_ops(model)["Gelu"])
        if len(calls) == 1:  # the prediction before legalizing
            return real(*args, **kwargs)
        raise MemoryError("injected")

    monkeypatch.setattr(module, "predict_placement", failing)
    with pytest.raises(MemoryError):
        LegalizeForEpPass("webgpu", table=_table(_COMMON_OPS))(model)
    assert calls == [1, 0]  # it failed with the Gelu expanded ...
    assert (  # ... and the model is as it was
        ir.to_proto(model).SerializeToString()
        == ir.to_proto(ir.from_proto(original)).SerializeToString()
    )


def test_legalize_reports_ops_without_body() -> None:
    model = ir.from_proto(_gelu_model(24))
    result = legalize(model, _table([op for op in _COMMON_OPS if op != "Neg"] + ["Gelu"]))
    (decision,) = result.decisions
    assert (decision.node, decision.decision) == ("neg", "cpu")
    assert "no ONNX function body" in decision.reason


def test_legalize_pass_and_cpu_noop() -> None:
    model = ir.from_proto(_gelu_model(24))
    assert not LegalizeForEpPass("cpu")(model).modified
    result = LegalizeForEpPass("dml", table=_table(_COMMON_OPS))(model)
    assert isinstance(result, LegalizeForEpResult) and result.modified
    assert result.legalization is not None
    assert [n.name for n in result.legalization.expanded] == ["gelu"]


def _gelu_in_if_model(if_name: str) -> onnx.ModelProto:
    """``y = If(c, then: Neg(Gelu(x)), else: Neg(x))``, the If named ``if_name``."""
    out = oh.make_tensor_value_info
    return make_model(
        [gelu_in_if(if_name, "y")],
        [out("x", FLOAT, [2, 5]), out("c", onnx.TensorProto.BOOL, [])],
        [out("y", FLOAT, [2, 5])],
        24,
    )


def test_an_if_named_function_gate_does_not_put_its_branch_in_a_function() -> None:
    # Decisions come from the IR, not from labels: the If's name reads like the label of
    # a model-local function, its branch's Gelu is still a candidate and is expanded.
    original = _gelu_in_if_model("function_gate")
    model = ir.from_proto(original)
    table = _table((*_COMMON_OPS, "If"))
    placed = {p.name: p for p in predict_placement(model, table).nodes}
    assert "function" in placed["branch_gelu"].scope  # the label says "function" ...
    assert placed["branch_gelu"].function is None  # ... the structure does not
    result = legalize(model, table)
    assert [(d.node, d.decision) for d in result.decisions] == [("branch_gelu", "expand")]
    assert _ops(model)["Gelu"] == 0
    feeds = {**_feeds(), "c": np.array(True)}
    _assert_same_outputs(original, model, feeds)


def test_a_node_of_a_model_local_function_is_not_rewritten() -> None:
    function = oh.make_function(
        "local",
        "GeluBlock",
        ["x"],
        ["y"],
        [
            oh.make_node("Gelu", ["x"], ["g"], name="fn_gelu", approximate="tanh"),
            oh.make_node("Neg", ["g"], ["y"], name="fn_neg"),
        ],
        [oh.make_opsetid("", 24)],
    )
    original = make_model(
        [oh.make_node("GeluBlock", ["x"], ["y"], name="call", domain="local")],
        [oh.make_tensor_value_info("x", FLOAT, [2, 5])],
        [oh.make_tensor_value_info("y", FLOAT, [2, 5])],
        24,
        functions=[function],
        extra_opsets={"local": 1},
    )
    model = ir.from_proto(original)
    result = legalize(model, _table(_COMMON_OPS))
    (decision,) = result.decisions
    assert decision.decision == "cpu" and "model-local function" in decision.reason
    assert decision.ir_node is not None and decision.ir_node.op_type == "Gelu"
    assert not result.modified


# -- inside the EP pass ------------------------------------------------------------------


def _choice(lowering: LowerOpsetForEpPass, model: ir.Model) -> EpLoweringChoice:
    result = lowering(model)
    assert isinstance(result, EpLoweringResult) and result.choice is not None
    return result.choice


def test_lower_for_ep_prefers_a_native_kernel_at_a_lower_opset_to_expansion() -> None:
    # Elu-22 (at opset 24) has a body; the EP runs only Elu-6, reachable by lowering to
    # 21. Both candidates put everything on the EP: the native kernel wins.
    rows = [("", "Elu", 6, 21, None)]
    body_ops = ("Cast", "CastLike", "Constant", "Exp", "Less", "Mul", "Neg", "Sub", "Where")
    rows += [("", op, 1, 40, None) for op in body_ops]
    table = KernelTable.from_rows("TestEP", "0.0", "test", rows)
    original = make_model(
        [
            oh.make_node("Elu", ["x"], ["e"], name="elu", alpha=0.5),
            oh.make_node("Neg", ["e"], ["y"], name="neg"),
        ],
        [oh.make_tensor_value_info("x", FLOAT, [2, 5])],
        [oh.make_tensor_value_info("y", FLOAT, [2, 5])],
        24,
    )
    model = ir.from_proto(original)
    choice = _choice(LowerOpsetForEpPass("dml", table=table), model)
    assert choice.legalized_predictions[24].fully_on_ep  # expansion would do as well ...
    assert choice.chosen_opset == 21 and not choice.legalized  # ... but native is preferred
    assert [(d.node, d.decision) for d in choice.decisions] == [("elu", "lower")]
    assert _ops(model)["Elu"] == 1
    _assert_same_outputs(original, model, _feeds())


def test_lower_for_ep_legalizes_and_records_decisions() -> None:
    original = _gelu_model(24)
    model = ir.from_proto(original)
    result = LowerOpsetForEpPass("dml", table=_table(_COMMON_OPS))(model)
    assert isinstance(result, EpLoweringResult) and result.modified
    choice = result.choice
    assert choice is not None and choice.legalized and choice.chosen_opset == 24
    assert [n.name for n in choice.expanded] == ["gelu"]
    assert [(d.node, d.decision) for d in choice.decisions] == [("gelu", "expand")]
    assert choice.after.fully_on_ep and not choice.before.fully_on_ep
    _assert_same_outputs(original, model, _feeds())


def test_lower_for_ep_without_legalization_is_the_plain_choice() -> None:
    # Plain choice: the lowest opset where the Gelu goes (19: the lowering expands the
    # Gelu-20 it cannot keep). With legalization, the same cost is reached at 24.
    original = _gelu_model(24)
    plain = LowerOpsetForEpPass("dml", table=_table(_COMMON_OPS), legalize=False)
    model = ir.from_proto(original)
    choice = _choice(plain, model)
    assert not choice.legalized and not choice.legalized_predictions
    assert choice.chosen_opset == 19 and model.opset_imports[""] == 19
    assert [(d.node, d.decision) for d in choice.decisions] == [("gelu", "expand")]
    assert "the lowering to opset 19 expanded it" in choice.decisions[0].reason
    _assert_same_outputs(original, model, _feeds())


def test_report_shows_decisions() -> None:
    model = ir.from_proto(_gelu_model(24))
    table = _table(_COMMON_OPS)
    report = placement_report(model, "dml", table=table)
    assert {"ep", "chosen", "blocked", "candidates", "before", "after"} <= set(report)
    assert {k: report["chosen"][k] for k in ("opset", "legalized")} == {
        "opset": 24,
        "legalized": True,
    }
    (legalized_24,) = (c for c in report["candidates"] if c["opset"] == 24 and c["legalized"])
    assert legalized_24["predicted"]["fallback_nodes"] == legalized_24["predicted"]["memcpy"] == 0
    assert legalized_24["measured"] is None
    (decision,) = report["decisions"]
    assert decision["node"] == "gelu" and decision["decision"] == "expand"
    text = format_report(report)
    assert text.splitlines()[0].startswith("test_graph: opset 24 kept (1 node expanded) on ")
    # The chosen candidate's row is marked; its changes say what legalization did.
    (chosen,) = [line for line in text.splitlines() if line.split()[:1] == ["*"]]
    assert chosen.split()[1:3] == ["24", "legalized"] and "1 expanded" in chosen, chosen
    decision_lines = [line.split() for line in text.splitlines()]
    assert ["1", "x", "Gelu-20:", "expand", "(e.g.", "gelu)"] in decision_lines, text
    assert _ops(model)["Gelu"] == 1  # the report does not change the model


# -- CUDA: Attention has kernels, so it is never expanded --------------------------------


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("ort_version", ["1.25", "main-2026-09"])
@pytest.mark.parametrize("opset", [23, 24])
def test_cuda_keeps_attention(ort_version: str, opset: int) -> None:
    # CUDA registers ai.onnx Attention from 1.25 on (1.24 has none: see below).
    from tests.torch_models import export_proto

    model = ir.from_proto(export_proto("llama", opset))
    assert _ops(model)["Attention"] == 2
    table = get_table("cuda", ort_version)
    choice = _choice(LowerOpsetForEpPass("cuda", table=table), model)
    assert not choice.legalized
    assert _ops(model)["Attention"] == 2
    assert not any(d.op_type == "Attention" and d.decision != "lower" for d in choice.decisions)
    assert not choice.after.fallback_nodes


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_cuda_124_expands_attention() -> None:
    # onnxruntime-gpu 1.24 registers no ai.onnx Attention: the search expands it (its ONNX
    # function body) rather than leave it on CPU, and nothing falls back.
    from tests.torch_models import export_proto

    model = ir.from_proto(export_proto("llama", 24))
    table = get_table("cuda", "1.24")
    assert not table.supports("", "Attention", 23) and not table.supports("", "Attention", 24)
    choice = _choice(LowerOpsetForEpPass("cuda", table=table), model)
    assert choice.legalized and _ops(model)["Attention"] == 0
    assert any(d.op_type == "Attention" and d.decision == "expand" for d in choice.decisions)
    assert not choice.after.fallback_nodes and choice.after.memcpy == 0
