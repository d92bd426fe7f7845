"""What a lowering run visits, and the model-wide inference it skips.

The walk lists what onnx-ir's ``RecursiveGraphIterator`` and ``Graph.subgraphs()`` list,
in the same order (nested If branches, an empty one too, a Loop body, function bodies).
The shortcut (inference only when a value lacks what its readers
need) lowers real models (the benchmark decoder, torch exports of tiny LLMs, a model with
a Loop and nested functions) step by step to byte-identical protos as the rule that asks
every value for its shape, while skipping inference that rule runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto

from onnxscript_ep_passes.errors import DowngradeError
from onnxscript_ep_passes.lowering import types, work
from onnxscript_ep_passes.lowering.context import DowngradeContext
from onnxscript_ep_passes.lowering.lower_opset import run_lowering
from onnxscript_ep_passes.lowering.opset_imports import default_opset
from onnxscript_ep_passes.lowering.registry import (
    DEFAULT_REGISTRY,
    AdapterRegistry,
    register_downgrade,
)
from tests.ep.models import if_model, loop_and_nested_functions_model
from tests.harness import make_model, tensor_info
from tests.lowering.test_body_cache import MODELS as BODY_CACHE_MODELS

F = TensorProto.FLOAT


def _nested_if(opset: int) -> onnx.ModelProto:
    """An If whose then-branch holds another If (and an empty else-branch graph)."""
    inner_then = oh.make_graph(
        [oh.make_node("Neg", ["r"], ["a"], name="inner_neg")],
        "inner_then",
        [],
        [oh.make_tensor_value_info("a", F, None)],
    )
    inner_else = oh.make_graph(
        [oh.make_node("Relu", ["r"], ["a2"], name="inner_relu")],
        "inner_else",
        [],
        [oh.make_tensor_value_info("a2", F, None)],
    )
    outer_then = oh.make_graph(
        [
            oh.make_node(
                "If", ["C"], ["b"], then_branch=inner_then, else_branch=inner_else, name="if2"
            )
        ],
        "outer_then",
        [],
        [oh.make_tensor_value_info("b", F, None)],
    )
    outer_else = oh.make_graph([], "outer_else", [], [oh.make_tensor_value_info("r", F, None)])
    nodes = [
        oh.make_node("Relu", ["X"], ["r"], name="relu"),
        oh.make_node("If", ["C"], ["Y"], then_branch=outer_then, else_branch=outer_else),
        oh.make_node("Sigmoid", ["Y"], ["Z"], name="sigmoid"),
    ]
    graph = oh.make_graph(
        nodes,
        "g",
        [tensor_info("X", F, [2]), tensor_info("C", TensorProto.BOOL, [])],
        [oh.make_tensor_value_info("Z", F, None)],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


@pytest.mark.parametrize(
    "proto",
    [_nested_if(24), if_model(24), loop_and_nested_functions_model(24)],
    ids=["nested_if", "if", "loop_and_functions"],
)
def test_walk_lists_what_onnx_ir_iterates(proto: onnx.ModelProto) -> None:
    model = ir.from_proto(proto)
    graphs: list[ir.Graph | ir.Function] = [model.graph, *model.functions.values()]
    for graph in graphs:
        nodes, subgraphs = work.walk(graph)
        assert nodes == list(ir.traversal.RecursiveGraphIterator(graph))
        assert subgraphs == list(graph.subgraphs())
    assert work.walk(model.graph)[1]


def test_stepping_nodes_are_those_a_step_may_apply_to() -> None:
    nodes = [
        oh.make_node("Reshape", ["X", "s"], ["r"], name="reshape"),  # Reshape-24 > 22
        oh.make_node("Relu", ["r"], ["a"], name="relu"),  # Relu-14: at 22 already
        oh.make_node("SimplifiedLayerNormalization", ["a", "w"], ["n"], name="ort_only"),
        oh.make_node("Custom", ["n"], ["c"], domain="custom", name="custom"),
        oh.make_node("Cos", ["c"], ["Y"], name="cos"),  # Cos-22 is not above 22
    ]
    proto = make_model(
        nodes,
        [
            tensor_info("X", F, [2, 3]),
            tensor_info("s", TensorProto.INT64, [1]),
            tensor_info("w", F, [6]),
        ],
        [tensor_info("Y", F, [6])],
        opset=24,
        extra_opsets={"custom": 1},
    )
    model = ir.from_proto(proto)
    kept = work.stepping_nodes(model.graph, 24, 22)
    assert [(node.name, opset) for node, opset in kept] == [("reshape", 24), ("ort_only", 24)]
    reshape = next(n for n in model.graph if n.name == "reshape")
    reshape.version = 21  # a per-node opset: Reshape-21, at the target already
    assert [n.name for n, _ in work.stepping_nodes(model.graph, 24, 22)] == ["ort_only"]
    reshape.version = 23
    assert work.stepping_nodes(model.graph, 24, 22)[0] == (reshape, 23)


def test_type_rules_and_cast_lend_no_shapes_and_other_adapters_do() -> None:
    # Reshape 24 -> 18 is type rules only; ReduceMax-20 has a rewrite; Cast-24 and
    # Cast-19 only drop an attribute and check types.
    nodes = [
        oh.make_node("Reshape", ["X", "s"], ["r"], name="reshape"),
        oh.make_node("ReduceMax", ["r"], ["m"], name="reduce"),
        oh.make_node("Cast", ["m"], ["Y"], to=TensorProto.FLOAT16, name="cast"),
    ]
    proto = make_model(
        nodes,
        [tensor_info("X", F, [2, 3]), tensor_info("s", TensorProto.INT64, [1])],
        [tensor_info("Y", TensorProto.FLOAT16, [])],
        opset=24,
    )
    model = ir.from_proto(proto)
    steps = [(node, 24, "graph") for node in model.graph]

    def names(registry: AdapterRegistry, target: int) -> tuple[set[str | None], ...]:
        typed, shaped = work.prepared_values(steps, target, registry)
        return {v.name for v in typed}, {v.name for v in shaped}

    assert names(DEFAULT_REGISTRY, 18) == ({"X", "s", "r", "m", "Y"}, {"r"})
    with work.every_shape_asked():
        assert names(DEFAULT_REGISTRY, 18) == (set(), {"X", "s", "r", "m", "Y"})
    registry = AdapterRegistry()
    registry.register("Cast", 24, lambda node, ctx: None, kind="attribute")
    assert names(registry, 23) == ({"X", "s", "r", "Y"}, {"m"})


def test_an_adapter_lent_no_shapes_may_build_no_node() -> None:
    registry = AdapterRegistry()

    @register_downgrade("Reshape", 24, registry=registry, lend_shapes=False)
    def reshape_24(node: ir.Node, ctx: DowngradeContext) -> list[ir.Value | None]:
        return [ctx.op("Identity", [ctx.op("Reshape", list(node.inputs))])]

    proto = make_model(
        [oh.make_node("Reshape", ["X", "s"], ["Y"], name="reshape")],
        [tensor_info("X", F, [2, 3]), tensor_info("s", TensorProto.INT64, [1])],
        [tensor_info("Y", F, [6])],
        opset=24,
    )
    model = ir.from_proto(proto)
    with pytest.raises(AssertionError, match="Reshape-24 is lent no shapes"):
        run_lowering(model, 23, registry=registry)
    unchanged = ir.to_proto(ir.from_proto(proto)).SerializeToString()
    assert ir.to_proto(model).SerializeToString() == unchanged


# The real models the body-cache test lowers, and one with a Loop and nested functions.
MODELS: dict[str, Callable[[Path], onnx.ModelProto]] = {
    **BODY_CACHE_MODELS,
    "loop_and_functions": lambda _: loop_and_nested_functions_model(24),
}


def _steps(proto: onnx.ModelProto) -> list[bytes | str]:
    """The model lowered one opset at a time down to 18, serialized after each step."""
    model = ir.from_proto(proto)
    source = default_opset(model.opset_imports)
    assert source is not None
    results: list[bytes | str] = []
    for target in range(source - 1, 17, -1):
        try:
            run_lowering(model, target)
        except DowngradeError as error:
            results.append(str(error))
            break
        results.append(ir.to_proto(model).SerializeToString())
    return results


@pytest.mark.parametrize("name", list(MODELS))
def test_skipped_inference_changes_nothing(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inferred = [0]  # model-wide inferences run
    original = types.TypeOracle._infer_model

    def counting(self: types.TypeOracle) -> dict[str, onnx.TypeProto]:
        inferred[0] += 1
        return original(self)

    monkeypatch.setattr(types.TypeOracle, "_infer_model", counting)
    proto = MODELS[name](tmp_path)
    with work.every_shape_asked():
        expected = _steps(proto)
    asked_every_shape, inferred[0] = inferred[0], 0
    assert _steps(proto) == expected
    if name != "loop_and_functions":  # its values all declare types and shapes
        assert inferred[0] < asked_every_shape
