"""try_lower_proto: the same model as the full pass when only labels change; the proto
untouched (and False) whenever the full pass must decide."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto

from onnxscript_ep_passes.lowering.lower_opset import LowerOpsetPass
from onnxscript_ep_passes.lowering.proto_fast_path import try_lower_proto
from tests.harness import make_model, run_model, tensor_info

F, F16, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64


def _model(
    *,
    value_info: bool = True,
    extra: list[onnx.NodeProto] | None = None,
    extra_opsets: dict[str, int] | None = None,
) -> onnx.ModelProto:
    nodes = [
        oh.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
        oh.make_node("Transpose", ["r"], ["t"], name="transpose", perm=[1, 0]),
        # Cast-24 with round_mode: its hand-written adapter drops the attribute.
        oh.make_node("Cast", ["t"], ["h"], name="to_half", to=F16, round_mode="up"),
        oh.make_node("Cast", ["h"], ["c"], name="to_float", to=F),
        oh.make_node("Relu", ["c"], ["y"], name="relu"),
        *(extra or []),
    ]
    model = make_model(
        nodes,
        [tensor_info("x", F, [2, 6])],
        [tensor_info("y", F, [6, 2])],
        24,
        initializers=[oh.make_tensor("shape", I64, [2], [2, 6])],
        extra_opsets=extra_opsets,
    )
    if value_info:
        model.graph.value_info.extend(
            [
                tensor_info("r", F, [2, 6]),
                tensor_info("t", F, [6, 2]),
                tensor_info("h", F16, [6, 2]),
                tensor_info("c", F, [6, 2]),
            ]
        )
    return model


def _full_pass(proto: onnx.ModelProto, target: int) -> onnx.ModelProto:
    model = ir.from_proto(proto)
    LowerOpsetPass(target)(model)
    return ir.to_proto(model)


def _nodes(proto: onnx.ModelProto) -> list[tuple[object, ...]]:
    return [
        (n.op_type, n.name, list(n.input), list(n.output), sorted(a.name for a in n.attribute))
        for n in proto.graph.node
    ]


@pytest.mark.parametrize("value_info", [True, False])
@pytest.mark.parametrize("target", [23, 21, 19])
def test_same_model_as_the_full_pass(target: int, value_info: bool) -> None:
    """Declared types, or (no value_info) the types shape inference gives (rule 1)."""
    proto = _model(value_info=value_info)
    expected = _full_pass(proto, target)
    fast = onnx.ModelProto()
    fast.CopyFrom(proto)
    assert try_lower_proto(fast, target)
    assert _nodes(fast) == _nodes(expected)
    assert [(o.domain, o.version) for o in fast.opset_import] == [("", target)]
    assert fast.ir_version == expected.ir_version
    onnx.checker.check_model(fast, full_check=True)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)}
    np.testing.assert_array_equal(run_model(proto, feeds)[0], run_model(fast, feeds)[0])


@pytest.mark.parametrize(
    "case",
    [
        "uninferable type",  # a custom op's output: unknown, the full pass refuses it
        "declared twice",  # two value_info entries disagree: unknown, the full pass infers it
        "refused",  # Cast to float8e8m0: the full pass lists the refusal
        "rewrite",  # Swish-24: a hand-written expansion
        "subgraph",
        "function",
        "at target",
    ],
)
def test_full_pass_cases_leave_the_proto_untouched(case: str) -> None:
    extra: list[onnx.NodeProto] = []
    opsets = None
    if case == "uninferable type":
        extra = [
            oh.make_node("Custom", ["y"], ["u"], name="custom", domain="test.custom"),
            oh.make_node("Transpose", ["u"], ["z"], name="after_custom", perm=[1, 0]),
        ]
        opsets = {"test.custom": 1}
    elif case == "refused":
        extra = [oh.make_node("Cast", ["y"], ["z"], name="e8m0", to=TensorProto.FLOAT8E8M0)]
    elif case == "rewrite":
        extra = [oh.make_node("Swish", ["y"], ["z"], name="swish")]
    elif case == "subgraph":
        branch = oh.make_graph(
            [oh.make_node("Identity", ["y"], ["b"])], "b", [], [tensor_info("b", F, [6, 2])]
        )
        extra = [oh.make_node("If", ["cond"], ["z"], then_branch=branch, else_branch=branch)]
    proto = _model(value_info=case != "uninferable type", extra=extra, extra_opsets=opsets)
    if case == "declared twice":
        proto.graph.value_info.append(tensor_info("t", F16, [6, 2]))
    if case == "function":
        proto.functions.append(
            oh.make_function(
                "local",
                "f",
                ["a"],
                ["b"],
                [oh.make_node("Relu", ["a"], ["b"])],
                [oh.make_opsetid("", 24)],
            )
        )
    before = proto.SerializeToString()
    target = 24 if case == "at target" else 23
    assert not try_lower_proto(proto, target)
    assert proto.SerializeToString() == before


def test_attention_24_without_nonpad_kv_seqlen_keeps_its_node() -> None:
    """A hand-written rewrite adapter that leaves the node as it is takes the fast path."""
    dims = ["batch", 2, "seq", 4]
    mask = ["batch", 1, "seq", "seq"]
    proto = make_model(
        [oh.make_node("Attention", ["q", "k", "v", "mask"], ["y"], name="attention")],
        [tensor_info(n, F, dims) for n in "qkv"] + [tensor_info("mask", F, mask)],
        [tensor_info("y", F, dims)],
        24,
    )
    expected = _full_pass(proto, 23)
    assert try_lower_proto(proto, 23)
    assert _nodes(proto) == _nodes(expected)
    onnx.checker.check_model(proto, full_check=True)


@pytest.mark.parametrize("value_info", [True, False])
def test_agrees_with_the_full_pass_on_every_step(value_info: bool) -> None:
    """Differential check over the registry: for the realistic models of each step (types
    declared in value_info, or, without it, left to the whole-graph inference of rule 1),
    whenever the fast path answers True the full pass gives the same nodes, opset and IR
    version (and no refusal); when it answers False the proto is untouched."""
    from onnxscript_ep_passes.lowering.registry import DEFAULT_REGISTRY
    from tests.lowering.backend_cases import benign_models
    from tests.lowering.test_type_rules import ONE_STEP_CASES  # the same, cached, models

    fast_count = 0
    for entry in DEFAULT_REGISTRY.entries(18, 28):
        steps = (entry.op_type, entry.version, entry.version - 1, ONE_STEP_CASES)
        for case in benign_models(*steps):
            model = onnx.shape_inference.infer_shapes(case.model)
            if not value_info:
                model.graph.ClearField("value_info")
            fast = onnx.ModelProto()
            fast.CopyFrom(model)
            if not try_lower_proto(fast, entry.version - 1):
                assert fast == model, entry
                continue
            fast_count += 1
            expected = _full_pass(model, entry.version - 1)
            assert _nodes(fast) == _nodes(expected), entry
            assert [n.attribute for n in fast.graph.node] == [
                n.attribute for n in expected.graph.node
            ], entry
            assert fast.ir_version == expected.ir_version, entry
    assert fast_count > 100  # the fast path is the common case


@pytest.mark.parametrize("odd", [None, "input type", "attribute"])
def test_nodes_alike_share_a_verdict_and_only_they(odd: str | None) -> None:
    """Cast-24 nodes with the same attributes and value types share one adapter run; a
    node differing only in its input's type (float8e8m0, refused) or in an attribute
    (``to`` float8e8m0, refused) gets its own, so the fast path declines the model."""
    f8 = TensorProto.FLOAT8E8M0
    casts = [
        oh.make_node("Cast", [f"x{i}"], [f"y{i}"], name=f"cast{i}", to=F, round_mode="up")
        for i in range(4)
    ]
    inputs = [tensor_info(f"x{i}", F16, [3]) for i in range(4)]
    outputs = [tensor_info(f"y{i}", F, [3]) for i in range(4)]
    if odd == "input type":
        inputs[2] = tensor_info("x2", f8, [3])
    elif odd == "attribute":
        casts[2] = oh.make_node("Cast", ["x2"], ["y2"], name="cast2", to=f8, round_mode="up")
        outputs[2] = tensor_info("y2", f8, [3])
    proto = make_model(casts, inputs, outputs, 24)
    before = proto.SerializeToString()
    if odd is not None:
        assert not try_lower_proto(proto, 23)
        assert proto.SerializeToString() == before
        return
    expected = _full_pass(proto, 23)
    assert try_lower_proto(proto, 23)
    assert _nodes(proto) == _nodes(expected)
    assert all(sorted(a.name for a in n.attribute) == ["to"] for n in proto.graph.node)
    onnx.checker.check_model(proto, full_check=True)


def test_types_only_inference_tells_are_inferred_once_for_the_graph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without value_info, a chain of type-rule steps takes the fast path with one
    whole-graph shape inference, none per node; with value_info, none at all."""
    calls: list[int] = []
    original = onnx.shape_inference.infer_shapes

    def counting(model: onnx.ModelProto, *args: object, **kwargs: object) -> onnx.ModelProto:
        calls.append(len(model.graph.node))
        return original(model, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", counting)
    chain = [oh.make_node("Reshape", ["x", "shape"], ["r0"], name="reshape0")]
    for i in range(20):
        chain.append(oh.make_node("Transpose", [f"r{i}"], [f"t{i}"], name=f"t{i}", perm=[1, 0]))
        chain.append(oh.make_node("Transpose", [f"t{i}"], [f"r{i + 1}"], name=f"b{i}", perm=[1, 0]))
    proto = make_model(
        chain,
        [tensor_info("x", F, [2, 6])],
        [tensor_info("r20", F, [2, 6])],
        24,
        initializers=[oh.make_tensor("shape", I64, [2], [2, 6])],
    )
    expected = _full_pass(proto, 23)  # its oracle infers once too
    calls.clear()
    assert try_lower_proto(proto, 23)
    assert calls == [len(chain)]
    assert _nodes(proto) == _nodes(expected)
    calls.clear()
    declared = onnx.shape_inference.infer_shapes(_model())
    calls.clear()
    assert try_lower_proto(declared, 23)
    assert calls == []


def _cast_24(op: str, round_mode: str | None) -> onnx.ModelProto:
    """x -> Transpose -> t -> Cast (or CastLike) to float16 -> y; ``t`` declares no type."""
    attrs = {} if round_mode is None else {"round_mode": round_mode}
    if op == "Cast":
        cast = oh.make_node("Cast", ["t"], ["y"], name="cast", to=F16, **attrs)
    else:
        cast = oh.make_node("CastLike", ["t", "like"], ["y"], name="cast", **attrs)
    inputs = [tensor_info("x", F, [2, 3])]
    if op == "CastLike":
        inputs.append(tensor_info("like", F16, [1]))
    return make_model(
        [oh.make_node("Transpose", ["x"], ["t"], name="transpose", perm=[1, 0]), cast],
        inputs,
        [tensor_info("y", F16, [3, 2])],
        24,
    )


@pytest.mark.parametrize("round_mode", [None, "up"], ids=["no_round_mode", "round_mode"])
@pytest.mark.parametrize("op", ["Cast", "CastLike"])
def test_types_only_cast_24_builds_no_ir(
    op: str, round_mode: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cast-24/CastLike-24 without ``round_mode``: the adapter's ``types_only`` test says
    the step's type rule is enough, so no IR copy of the node is built; with it, the
    adapter runs on one (and drops the attribute). Either way the model is the full
    pass's, passes the checker's full check and computes what the original computes."""
    import onnxscript_ep_passes.lowering.proto_fast_path as fast_path

    runs: list[str] = []
    run_adapter = fast_path._run_adapter

    def counting(node: onnx.NodeProto, *args: object) -> object:
        runs.append(node.op_type)
        return run_adapter(node, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(fast_path, "_run_adapter", counting)
    proto = _cast_24(op, round_mode)
    expected = _full_pass(proto, 23)
    fast = onnx.ModelProto()
    fast.CopyFrom(proto)
    assert try_lower_proto(fast, 23)
    assert runs == ([] if round_mode is None else [op])
    assert _nodes(fast) == _nodes(expected)
    assert all(a.name != "round_mode" for n in fast.graph.node for a in n.attribute)
    onnx.checker.check_model(fast, full_check=True)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32)}
    if op == "CastLike":
        feeds["like"] = np.zeros(1, np.float16)
    original, _ = run_model(proto, feeds, strict=False)  # ORT rejects round_mode here
    lowered, how = run_model(fast, feeds)
    assert how == "onnxruntime"
    np.testing.assert_array_equal(original[0], lowered[0])


def test_types_only_cast_24_to_float8e8m0_is_left_to_the_full_pass() -> None:
    """Without ``round_mode`` but to float8e8m0: the type rule fails on the output, so the
    proto is untouched (the full pass lists the refusal)."""
    proto = _cast_24("Cast", None)
    proto.graph.node[1].attribute[0].i = TensorProto.FLOAT8E8M0
    proto.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT8E8M0
    before = proto.SerializeToString()
    assert not try_lower_proto(proto, 23)
    assert proto.SerializeToString() == before
