"""predict_placement without a session: since_version resolution, functions, subgraphs,
ORT's CPU preference for shape computations, layout Transposes, the Memcpy rules."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxscript_ep_passes.ep import (
    EpTraits,
    KernelTable,
    NodePlacement,
    PlacementPrediction,
    load_snapshot,
    predict_placement,
    traits_for,
)
from tests.ep.models import chain_model, cnn_model, function_model, if_model, shared_input_model
from tests.ep.snapshot_oracle import has_kernel, snapshot_rows

F = TensorProto.FLOAT
ALL_FLOAT = ["tensor(float)", "tensor(float16)"]


def _table(
    *rows: tuple[str, str, int, int | None], types: dict[str, list[str]] | None = None
) -> KernelTable:
    return KernelTable.from_rows(
        "TestEP", "0.0", "test", [(d, op, s, e, types) for d, op, s, e in rows]
    )


NO_TRAITS = EpTraits(ep="TestEP", cpu_inputs={}, cpu_outputs={})
RESHAPE_TRAITS = EpTraits(ep="TestEP", cpu_inputs={("", "Reshape"): frozenset({1})}, cpu_outputs={})


def _by_name(pred: PlacementPrediction) -> dict[str, NodePlacement]:
    return {n.name: n for n in pred.nodes}


def _relu_op_relu(
    op: str, opset: int, inputs: list[str], inits: list[onnx.TensorProto], **attrs
) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["X"], ["r"], name="pre"),
        helper.make_node(op, ["r", *inputs], ["o"], name="op", **attrs),
        helper.make_node("Relu", ["o"], ["Y"], name="post"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", F, [2, 3, 4])],
        [helper.make_tensor_value_info("Y", F, None)],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_since_version_at_model_opset_and_open_range() -> None:
    table = _table(("", "Relu", 14, None), ("", "Reshape", 21, 22), ("", "Reshape", 23, None))
    shape = numpy_helper.from_array(np.array([4, 6], dtype=np.int64), "s")
    for opset, since, on_ep in ((21, 21, True), (23, 23, True), (24, 24, False), (25, 25, False)):
        pred = predict_placement(
            _relu_op_relu("Reshape", opset, ["s"], [shape]), table, traits=RESHAPE_TRAITS
        )
        node = _by_name(pred)["op"]
        assert node.since_version == since
        assert (node.placement == "ep") is on_ep
        if not on_ep:
            assert node.reason == (
                f"no kernel for Reshape at since_version {since} (registered: [21, 22], 23+)"
            )
            assert node.reason_code == "no_kernel_version" and node.is_fallback
            # the data crosses to CPU and back; the shape initializer costs nothing
            assert (pred.memcpy_from_host, pred.memcpy_to_host) == (1, 1)
            assert {t.value for t in pred.transfers} == {"r", "o"}
            assert pred.version_fallback_nodes == [node]
        else:
            assert pred.memcpy == 0 and pred.fully_on_ep


def test_types_decide_when_known() -> None:
    table = KernelTable.from_rows(
        "TestEP",
        "0",
        "test",
        [
            ("", "Relu", 14, None, {"T": ALL_FLOAT}),
            ("", "Cast", 24, 24, {"T1": ALL_FLOAT, "T2": ALL_FLOAT}),
        ],
    )
    m = _relu_op_relu("Cast", 24, [], [], to=TensorProto.FLOAT16)
    m.graph.node[2].op_type = "Identity"  # keep the f16 output away from the float-only Relu
    pred = predict_placement(m, table, traits=NO_TRAITS)
    assert _by_name(pred)["op"].placement == "ep"
    m = _relu_op_relu("Cast", 24, [], [], to=TensorProto.FLOAT8E8M0)
    m.graph.node[2].op_type = "Identity"
    cast = _by_name(predict_placement(m, table, traits=NO_TRAITS))["op"]
    assert cast.placement == "cpu" and cast.reason_code == "type"
    assert "type tensor(float8e8m0) not supported for T2" in cast.reason


def test_other_domains_use_their_opset() -> None:
    table = _table(("", "Relu", 14, None), ("com.microsoft", "FastGelu", 1, None))
    nodes = [
        helper.make_node("Relu", ["X"], ["r"], name="relu"),
        helper.make_node("FastGelu", ["r"], ["Y"], domain="com.microsoft", name="gelu"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", F, [2])],
        [helper.make_tensor_value_info("Y", F, [2])],
    )
    for ms_version, on_ep in ((1, True), (2, False)):
        m = helper.make_model(
            g,
            opset_imports=[
                helper.make_opsetid("", 21),
                helper.make_opsetid("com.microsoft", ms_version),
            ],
        )
        gelu = _by_name(predict_placement(m, table, traits=NO_TRAITS))["gelu"]
        assert gelu.since_version == ms_version and (gelu.placement == "ep") is on_ep


def test_function_calls_are_inlined_at_the_model_opset() -> None:
    table = load_snapshot("webgpu-ort-1.32")
    pred = predict_placement(function_model(25, 24), table)
    names = _by_name(pred)
    assert "call" not in names  # the call itself is not a node once inlined
    inner = names["_inlfunc_Block_transpose"]
    assert inner.since_version == 25 and inner.placement == "cpu"
    assert inner.scope == "graph 'main' / function 'local::Block'"
    assert inner.function is not None and (inner.function.domain, inner.function.name) == (
        "local",
        "Block",
    )
    assert inner.node is not None and inner.node in list(inner.function)
    pred = predict_placement(function_model(24, 25), table)
    assert _by_name(pred)["_inlfunc_Block_transpose"].placement == "ep"


def test_subgraph_nodes_are_placed() -> None:
    table = load_snapshot("webgpu-ort-1.32")
    names = _by_name(predict_placement(if_model(25), table))
    assert names["if"].placement == "cpu"  # If-25 vs WebGPU's 21+
    assert names["then_transpose"].placement == "cpu"
    assert names["then_transpose"].scope == "subgraph 'if/then_branch'"
    assert names["then_transpose"].function is None
    assert names["else_neg"].placement == "ep"
    pred = predict_placement(if_model(21), table)
    assert pred.fully_on_ep


def test_memcpy_rules_for_graph_inputs_outputs_and_initializers() -> None:
    table = load_snapshot("webgpu-ort-1.32")
    # X is read on the EP (relu) and on CPU (cos_in): one MemcpyFromHost; R is an EP output
    # read by a CPU node: one MemcpyToHost even though it is also a graph output; c1, c2 come
    # from CPU into the EP Add: two MemcpyFromHost.
    pred = predict_placement(shared_input_model(24), table)
    assert {(t.value, t.direction) for t in pred.transfers} == {
        ("X", "MemcpyFromHost"),
        ("R", "MemcpyToHost"),
        ("c1", "MemcpyFromHost"),
        ("c2", "MemcpyFromHost"),
    }
    # Everything on the EP: graph inputs and outputs are copied by the session, not Memcpy.
    assert predict_placement(shared_input_model(21), table).memcpy == 0


def test_cpu_input_slots_need_no_copy() -> None:
    # Relu -> [CPU node producing the shape] -> Reshape's CPU slot: no MemcpyFromHost.
    table = _table(("", "Relu", 14, None), ("", "Reshape", 21, None))
    nodes = [
        helper.make_node("Relu", ["X"], ["r"], name="relu"),
        helper.make_node("Abs", ["S"], ["s"], name="abs"),  # no kernel: CPU
        helper.make_node("Reshape", ["r", "s"], ["Y"], name="reshape"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("X", F, [2, 3]),
            helper.make_tensor_value_info("S", TensorProto.INT64, [1]),
        ],
        [helper.make_tensor_value_info("Y", F, None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    assert predict_placement(m, table, traits=RESHAPE_TRAITS).memcpy == 0
    assert predict_placement(m, table, traits=NO_TRAITS).memcpy_from_host == 1


def test_shape_computation_preferred_on_cpu_is_not_fallback() -> None:
    """CUDA applies GetCpuPreferredNodes: Shape -> Gather -> Unsqueeze -> Concat -> Reshape
    puts the three int64 nodes on CPU by choice, with no Memcpy."""
    table = load_snapshot("cuda-ort-1.24")
    # The graph as written: at ORT's default level the static shape chain is folded first.
    pred = predict_placement(
        chain_model(18), table, traits=traits_for("cuda"), optimization_level=0
    )
    names = _by_name(pred)
    for name in ("gather", "unsqueeze_dim", "concat"):
        assert names[name].placement == "cpu" and names[name].is_shape_computation, name
        assert names[name].reason_code == "shape_computation"
    assert names["shape"].placement == "ep" and names["reshape_dyn"].placement == "ep"
    assert pred.fallback_nodes == [] and pred.memcpy == 0
    assert pred.summary()["Unsqueeze"] == {"ep": 1, "shape": 1}
    # The same model at opset 21: the nodes without a kernel (by an independent reading of
    # the snapshot, see snapshot_oracle) fall back, and each costs a copy in and a copy out.
    rows = snapshot_rows("cuda-ort-1.24")
    for opset in (18, 21):
        proto = chain_model(opset)
        pred = predict_placement(proto, table, traits=traits_for("cuda"), optimization_level=0)
        expected = [n.name for n in proto.graph.node if not has_kernel(rows, n.op_type, opset)]
        assert [n.name for n in pred.fallback_nodes] == expected
    assert expected, "at opset 21 some node of the chain has no CUDA 1.24 kernel"
    assert (pred.memcpy_from_host, pred.memcpy_to_host) == (len(expected), len(expected))


def test_layout_transposes_for_nhwc_eps() -> None:
    table = load_snapshot("webgpu-ort-1.32")
    for opset, placement in ((24, "ep"), (25, "cpu")):
        pred = predict_placement(cnn_model(opset), table)
        inserted = [n for n in pred.nodes if n.inserted_by_ort]
        assert len(inserted) == 4  # into and out of each Conv(+Relu) region
        assert {n.placement for n in inserted} == {placement}
        assert {n.since_version for n in inserted} == {opset}
    # Without the layout model: r1 -> MaxPool-22 (CPU), p1 -> conv2, r2 -> GAP-22 (CPU).
    assert predict_placement(cnn_model(25), table, layout_transform=False).memcpy == 3
    # With it: X -> Transpose-25 (CPU) -> conv1 adds a copy in; the other three remain.
    assert predict_placement(cnn_model(25), table).memcpy == 4
    assert predict_placement(cnn_model(24), table).memcpy == 3
    # Without an NHWC domain (CUDA), no Transposes are added.
    pred = predict_placement(cnn_model(21), load_snapshot("cuda-ort-1.24"))
    assert not any(n.inserted_by_ort for n in pred.nodes)


def test_accepts_ir_models_and_leaves_them_unchanged() -> None:
    table = load_snapshot("webgpu-ort-1.32")
    proto = chain_model(25)
    model = ir.serde.deserialize_model(proto)
    before = ir.serde.serialize_model(model).SerializeToString()
    from_ir = predict_placement(model, table)
    from_proto = predict_placement(proto, table)
    assert from_ir == from_proto
    assert ir.serde.serialize_model(model).SerializeToString() == before
    assert "fallback" in str(from_ir)


@pytest.mark.parametrize("opset", [21, 25])
def test_prediction_is_deterministic(opset: int) -> None:
    table = load_snapshot("webgpu-ort-1.32")
    assert predict_placement(chain_model(opset), table) == predict_placement(
        chain_model(opset), table
    )


def test_records_point_at_the_models_ir_nodes_and_values() -> None:
    """Predictions are joined to the model by reference, never by name."""
    model = ir.serde.deserialize_model(chain_model(25))
    pred = predict_placement(model, load_snapshot("webgpu-ort-1.32"))
    nodes = set(ir.traversal.RecursiveGraphIterator(model.graph))
    placed = [p for p in pred.nodes if not p.inserted_by_ort]
    assert placed and all(p.node in nodes and p.node.op_type == p.op_type for p in placed)
    assert all(p.function is None and not p.inlined_by_ort for p in placed)
    assert all(p.node is None for p in pred.nodes if p.inserted_by_ort)
    # The Reshape ORT fuses Reshape -> Unsqueeze -> Squeeze into points at the first one.
    fused = [p for p in placed if p.node is not None and p.name != p.node.name]
    assert [(p.name, p.node.name if p.node else None) for p in fused] == [
        ("reshape_new_reshape", "reshape")
    ]
    assert pred.transfers
    for transfer in pred.transfers:
        assert transfer.ir_value is not None and transfer.ir_value.name == transfer.value
