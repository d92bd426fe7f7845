"""The undo journal on ``ir.Model`` inputs: a refusal of any class, after other nodes were
already rewritten (an expansion that built and rewired nodes, an attribute dropped, an
attribute edited), leaves the caller's model byte-identical and its node objects in place.

Refusal classes: a derived type rule; a hand-written adapter's refusal; a refusal of a
node an expansion built (after the expansion inserted its nodes); a step no rule undoes;
an op ONNX does not define; a refusal inside an If branch and inside a model-local
function; and an adapter that raises an unexpected exception (rolled back, re-raised).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto

from onnxscript_ep_passes import DowngradeError
from onnxscript_ep_passes.lowering.adapters.opset28 import spacetodepth_28
from onnxscript_ep_passes.lowering.lower_opset import run_lowering
from onnxscript_ep_passes.lowering.registry import AdapterRegistry
from tests.harness import check_refusals, make_model, registry_expanding_celu_28_in_its_type

F, BF16 = TensorProto.FLOAT, TensorProto.BFLOAT16
TARGET = 18


def _rewritten_first() -> list[onnx.NodeProto]:
    """Nodes the lowering to 18 changes before it reaches the refusing node."""
    return [
        oh.make_node("Swish", ["x"], ["s"], name="swish", alpha=0.5),  # expansion
        oh.make_node("SpaceToDepth", ["s"], ["d"], name="s2d", blocksize=2, mode="DCR"),
        oh.make_node(  # ceil_mode=1 -> 0
            "MaxPool", ["d"], ["p"], name="pool", kernel_shape=[1, 1], strides=[2, 2], ceil_mode=1
        ),
        oh.make_node("Reshape", ["p", "shape"], ["r"], name="reshape"),
    ]


def _model(
    refusing: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    functions: list[onnx.FunctionProto] | None = None,
    *,
    check: bool = True,
) -> ir.Model:
    proto = make_model(
        [*_rewritten_first(), *refusing],
        [oh.make_tensor_value_info("x", F, [1, 4, 4, 4]), *inputs],
        [oh.make_tensor_value_info("r", F, [16]), *outputs],
        28,
        initializers=[oh.make_tensor("shape", TensorProto.INT64, [1], [16])],
        functions=functions or [],
        extra_opsets={"local": 1} if functions else None,
    )
    if check:  # (the checker knows no NoSuchOp)
        onnx.checker.check_model(proto, full_check=True)
    return ir.from_proto(proto)


def _vi(name: str, elem: int, shape: list[int]) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, elem, shape)


def _type_rule() -> ir.Model:
    node = oh.make_node("Transpose", ["e"], ["et"], name="refused")
    return _model(
        [node],
        [_vi("e", TensorProto.FLOAT8E8M0, [2, 3])],
        [_vi("et", TensorProto.FLOAT8E8M0, [3, 2])],
    )


def _adapter_refuses() -> ir.Model:
    node = oh.make_node(
        "AveragePool", ["a"], ["ap"], name="refused", kernel_shape=[2], dilations=[2]
    )
    return _model([node], [_vi("a", F, [1, 1, 6])], [_vi("ap", F, [1, 1, 4])])


def _built_node_refused() -> ir.Model:
    nodes = [
        oh.make_node("Cast", ["c"], ["cb"], to=BF16),
        oh.make_node("Celu", ["cb"], ["cy"], name="refused"),  # expands; its Elu is bf16
        oh.make_node("Cast", ["cy"], ["co"], to=F),
    ]
    return _model(nodes, [_vi("c", F, [5])], [_vi("co", F, [5])])


def _unknown_op() -> ir.Model:
    node = oh.make_node("NoSuchOp", ["u"], ["uo"], name="refused")
    return _model([node], [_vi("u", F, [2])], [_vi("uo", F, [2])], check=False)


def _in_if_branch() -> ir.Model:
    branch = oh.make_graph(
        [oh.make_node("Transpose", ["e"], ["b_out"], name="refused")],
        "then",
        [],
        [_vi("b_out", TensorProto.FLOAT8E8M0, [3, 2])],
    )
    other = oh.make_graph(
        [oh.make_node("Transpose", ["e"], ["o_out"], name="kept")],
        "else",
        [],
        [_vi("o_out", TensorProto.FLOAT8E8M0, [3, 2])],
    )
    node = oh.make_node("If", ["cond"], ["io"], name="if", then_branch=branch, else_branch=other)
    inputs = [_vi("cond", TensorProto.BOOL, []), _vi("e", TensorProto.FLOAT8E8M0, [2, 3])]
    return _model([node], inputs, [_vi("io", TensorProto.FLOAT8E8M0, [3, 2])])


def _in_function() -> ir.Model:
    function = oh.make_function(
        "local",
        "Refuse",
        ["fx"],
        ["fy"],
        [
            oh.make_node("Swish", ["fx"], ["fs"], name="f_swish"),  # rewritten first
            oh.make_node(
                "AveragePool", ["fs"], ["fy"], name="refused", kernel_shape=[2], dilations=[2]
            ),
        ],
        [oh.make_opsetid("", 28)],
    )
    node = oh.make_node("Refuse", ["a"], ["ap"], domain="local", name="call")
    return _model([node], [_vi("a", F, [1, 1, 6])], [_vi("ap", F, [1, 1, 4])], [function])


_CLASSES: dict[str, tuple[Callable[[], ir.Model], str]] = {
    "type_rule": (_type_rule, "FLOAT8E8M0, which Transpose-23 does not allow"),
    "adapter_refusal": (_adapter_refuses, "dilations"),
    "refusal_of_a_built_node": (_built_node_refused, "BFLOAT16, which Elu-6 does not allow"),
    "unknown_op": (_unknown_op, "no ONNX schema for NoSuchOp"),
    "in_if_branch": (_in_if_branch, "Transpose-23 does not allow"),
    "in_function": (_in_function, "dilations"),
}


def _snapshot(model: ir.Model) -> tuple[bytes, list[int]]:
    nodes = [id(n) for n in ir.traversal.RecursiveGraphIterator(model.graph)]
    nodes += [id(n) for f in model.functions.values() for n in f]
    return ir.to_proto(model).SerializeToString(), nodes


@pytest.mark.parametrize("kind", sorted(_CLASSES))
def test_refusal_after_rewrites_leaves_ir_model_identical(kind: str) -> None:
    build, reason = _CLASSES[kind]
    model = build()
    before = _snapshot(model)
    # The package computes a half-type Celu-28 in float32; the expanding adapter builds the
    # Elu in bfloat16, which no opset below 22 allows.
    registry = (
        registry_expanding_celu_28_in_its_type() if kind == "refusal_of_a_built_node" else None
    )
    with pytest.raises(DowngradeError) as raised:
        run_lowering(model, TARGET, registry=registry)
    check_refusals(raised.value, TARGET)
    # The refusing node (or a node built from it) is named; no rewritten node is.
    names = [r.node_name for r in raised.value.refusals]
    assert any(name.startswith("refused") for name in names), names
    assert not {"swish", "s2d", "pool", "reshape"} & set(names)
    assert reason in str(raised.value)
    assert _snapshot(model) == before


def test_the_rewrites_before_the_refusal_really_happen() -> None:
    """Without the refusing node the same model lowers, changing every rewritten node: the
    rollback tests above undo real changes."""
    model = _model([], [], [])
    result = run_lowering(model, TARGET)
    ops = [n.op_type for n in model.graph]
    assert "Swish" not in ops and "Sigmoid" in ops
    s2d = next(n for n in model.graph if n.op_type == "SpaceToDepth")
    pool = next(n for n in model.graph if n.op_type == "MaxPool")
    assert "mode" not in s2d.attributes
    assert pool.attributes["ceil_mode"].value == 0
    assert result.rewritten == 3


def test_step_without_a_rule_after_rewrites() -> None:
    """A registry with no rule for Swish-24: the SpaceToDepth rewrite before it is undone."""
    registry = AdapterRegistry()
    registry.register("SpaceToDepth", 28, spacetodepth_28, kind="attribute")
    nodes = [
        oh.make_node("SpaceToDepth", ["x"], ["d"], name="s2d", blocksize=2, mode="DCR"),
        oh.make_node("Swish", ["d"], ["y"], name="refused"),
    ]
    proto = make_model(nodes, [_vi("x", F, [1, 4, 4, 4])], [_vi("y", F, [1, 16, 2, 2])], 28)
    model = ir.from_proto(proto)
    before = _snapshot(model)
    with pytest.raises(DowngradeError, match="no adapter for this change") as raised:
        run_lowering(model, 23, registry=registry)
    check_refusals(raised.value, 23)
    assert _snapshot(model) == before


def test_an_adapter_that_raises_is_rolled_back_and_re_raised() -> None:
    registry = AdapterRegistry()
    registry.register("SpaceToDepth", 28, spacetodepth_28, kind="attribute")

    def broken(node: ir.Node, ctx: object) -> None:
        node.attributes.pop("alpha", None)
        raise RuntimeError("adapter bug")

    registry.register("Swish", 24, broken, kind="attribute")
    nodes = [
        oh.make_node("SpaceToDepth", ["x"], ["d"], name="s2d", blocksize=2, mode="DCR"),
        oh.make_node("Swish", ["d"], ["y"], name="swish", alpha=0.5),
    ]
    proto = make_model(nodes, [_vi("x", F, [1, 4, 4, 4])], [_vi("y", F, [1, 16, 2, 2])], 28)
    model = ir.from_proto(proto)
    before = _snapshot(model)
    with pytest.raises(RuntimeError, match="adapter bug"):
        run_lowering(model, 23, registry=registry)
    assert _snapshot(model) == before
    assert np.all([n.name for n in model.graph] == ["s2d", "swish"])
