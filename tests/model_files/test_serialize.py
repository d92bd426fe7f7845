"""serialize_model writes the bytes onnx-ir's serializer writes, memoized or not."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.core.onnx_utils import point_external_data
from onnxscript_ep_passes.model_files.serialize import (
    serialize_model,
    serialize_parts,
    splice_graph_entries,
)


def _same(model: ir.Model) -> None:
    expected = ir.serde.serialize_model(model).SerializeToString()
    assert serialize_parts(model).data() == expected  # spliced, the nodes' proto never built
    assert serialize_model(model).SerializeToString() == expected


def _typed(value: ir.Value, dims: list[int | str | None], dtype: ir.DataType) -> ir.Value:
    value.type = ir.TensorType(dtype)
    value.shape = ir.Shape(dims)
    return value


def _model(ir_version: int = 10) -> tuple[ir.Model, ir.Graph, ir.Value]:
    x = _typed(ir.Value(name="x"), ["batch", 4], ir.DataType.FLOAT)
    weight = ir.Value(name="w", const_value=ir.tensor(np.ones((4,), dtype=np.float32), name="w"))
    graph = ir.Graph([x], [], nodes=[], initializers=[weight], opset_imports={"": 23}, name="g")
    shared = ir.tensor(np.array([2.0], dtype=np.float32))
    current = x
    for _ in range(3):  # a repeated body: equal attributes, equal types
        const = ir.node("Constant", [], attributes={"value": shared})
        graph.append(const)
        mul = ir.node("Mul", [current, const.outputs[0]])
        graph.append(mul)
        add = ir.node("Add", [mul.outputs[0], weight])
        graph.append(add)
        _typed(mul.outputs[0], ["batch", 4], ir.DataType.FLOAT)
        _typed(add.outputs[0], ["batch", 4], ir.DataType.FLOAT)
        current = add.outputs[0]
    graph.outputs.append(current)
    return ir.Model(graph, ir_version=ir_version), graph, current


def test_a_repeated_body_is_written_as_onnx_ir_writes_it() -> None:
    model, graph, _ = _model()
    split = ir.node("Split", [graph.inputs[0]], attributes={"axis": 1}, num_outputs=3)
    split.outputs[1].name = ""  # a skipped output in the middle, an unnamed trailing one
    split.outputs[2].name = ""
    graph.append(split)
    clip = ir.node("Clip", [graph.inputs[0], None, split.outputs[0]])
    graph.append(clip)
    clip.outputs[0].shape = ir.Shape([None, ir.SymbolicDim(None)], denotations=["a", None])
    clip.outputs[0].type = ir.TensorType(ir.DataType.FLOAT, denotation="TENSOR")
    clip.outputs[0].doc_string = "documented"  # written by onnx-ir
    seq = ir.node("SequenceConstruct", [graph.inputs[0]])
    graph.append(seq)
    seq.outputs[0].type = ir.SequenceType(ir.TensorType(ir.DataType.FLOAT))
    graph.append(ir.node("Relu", [graph.inputs[0]], name="named", doc_string="doc"))
    noted = ir.node("Neg", [graph.inputs[0]])
    graph.append(noted)
    noted.outputs[0].metadata_props["note"] = "kept"  # an untyped output with metadata
    _same(model)


def test_attribute_values_memoized_by_value_only_where_equal_values_write_equal_bytes() -> None:
    """Equal ints, ints and strings in distinct objects share a memo entry; floats (0.0
    equals -0.0) and tensors do not, so each node keeps its own bytes."""
    model, graph, _ = _model()
    x = graph.inputs[0]
    attributes = [
        ("Transpose", ir.Attr("perm", ir.AttributeType.INTS, [1, 0])),
        ("Transpose", ir.Attr("perm", ir.AttributeType.INTS, [1, 0])),  # equal, not the same
        ("Transpose", ir.Attr("perm", ir.AttributeType.INTS, [0, 1])),
        ("Softmax", ir.AttrInt64("axis", 1)),
        ("Softmax", ir.AttrInt64("axis", -1)),
        ("Softmax", ir.AttrInt64("axis", 1)),
        ("LeakyRelu", ir.AttrFloat32("alpha", 0.0)),
        ("LeakyRelu", ir.AttrFloat32("alpha", -0.0)),
        ("DepthToSpace", ir.AttrString("mode", "DCR")),
        ("DepthToSpace", ir.AttrString("mode", "CRD")),
        ("DepthToSpace", ir.AttrString("mode", "DCR")),
    ]
    for op, attr in attributes:
        graph.append(ir.node(op, [x], attributes={attr.name: attr}))
    _same(model)
    written = serialize_model(model).graph.node[-len(attributes) :]
    alphas = [a.f for n in written for a in n.attribute if a.name == "alpha"]
    assert [np.signbit(a) for a in alphas] == [False, True]


def test_nodes_with_subgraphs_or_metadata_are_written_by_onnx_ir() -> None:
    model, graph, current = _model()
    then = ir.Graph([], [], nodes=[], name="then")
    identity = ir.node("Identity", [current])
    then.append(identity)
    then.outputs.append(identity.outputs[0])
    cond = ir.node("If", [graph.inputs[0]], attributes={"then_branch": then, "else_branch": then})
    graph.append(cond)
    cond.metadata_props["k"] = "v"
    relu = ir.node("Relu", [current])
    relu.metadata_props["note"] = "kept"
    graph.append(relu)
    _same(model)


@pytest.mark.parametrize("case", ["quantized", "functions below ir 10"])
def test_what_onnx_ir_orders_otherwise_falls_back_to_it(case: str) -> None:
    model, graph, current = _model(ir_version=9 if case != "quantized" else 10)
    relu = ir.node("Relu", [current])
    graph.append(relu)
    _typed(relu.outputs[0], [1], ir.DataType.FLOAT)
    if case == "quantized":
        relu.outputs[0].meta["quant_parameter_tensor_names"] = {"scale": "s"}
        graph.outputs[0].meta["quant_parameter_tensor_names"] = {"scale": "t"}
    else:
        inner = ir.Value(name="a")
        body = ir.node("Neg", [inner])
        _typed(body.outputs[0], [2], ir.DataType.FLOAT)
        function = ir.Function(
            "local", "f", "", graph=ir.Graph([inner], [body.outputs[0]], nodes=[body]),
            attributes=[],
        )  # fmt: skip
        model.functions[function.identifier()] = function
    _same(model)
    assert onnx.ModelProto.FromString(serialize_model(model).SerializeToString())


def test_a_location_points_every_graphs_external_initializers_at_it() -> None:
    model, graph, current = _model()

    def external(name: str) -> ir.Value:
        tensor = ir.ExternalTensor(
            "w.data", 0, 16, ir.DataType.FLOAT, shape=ir.Shape([4]), name=name, base_dir="/tmp"
        )
        return ir.Value(name=name, const_value=tensor)

    graph.register_initializer(external("big"))
    inner = external("inner_big")
    then = ir.Graph([], [], nodes=[], initializers=[inner], name="then")
    add = ir.node("Add", [current, inner])
    then.append(add)
    then.outputs.append(add.outputs[0])
    graph.append(ir.node("If", [graph.inputs[0]], attributes={"then_branch": then}))
    expected = ir.serde.serialize_model(model)
    point_external_data(expected, "out.onnx.data")
    got = serialize_model(model, "out.onnx.data")
    assert got.SerializeToString() == expected.SerializeToString()
    assert "out.onnx.data" in str(got.graph.node[-1].attribute[0].g.initializer[0])


def test_the_nodes_are_held_apart_and_spliced_where_protobuf_writes_them() -> None:
    model, graph, _ = _model()
    graph.doc_string = "field 10: before the value_info"
    graph.metadata_props["k"] = "v"  # field 16: after the value_info
    graph.outputs[0].doc_string = "a graph output"
    parts = serialize_parts(model, "w.data")
    assert parts.nodes and parts.value_info and not parts.shell.graph.node
    assert parts.ops == {("", "Constant"), ("", "Mul"), ("", "Add")}
    expected = serialize_model(model, "w.data").SerializeToString()
    assert parts.data() == expected
    assert parts.proto().SerializeToString() == expected  # merged into the shell, once
    assert parts.data() == expected and not parts.nodes


def test_splicing_declines_bytes_it_cannot_place() -> None:
    parts = serialize_parts(_model()[0])
    shell = parts.shell.SerializeToString()
    graph = parts.shell.graph.SerializeToString()
    assert splice_graph_entries(shell, parts.nodes, parts.value_info) is not None
    twice = shell + b"\x3a" + bytes([len(graph)]) + graph if len(graph) < 128 else b"\xff"
    assert splice_graph_entries(twice, parts.nodes, parts.value_info) is None  # two graphs
    opset_first = parts.shell.opset_import[0].SerializeToString()
    reordered = b"\x42" + bytes([len(opset_first)]) + opset_first + shell
    assert splice_graph_entries(reordered, parts.nodes, parts.value_info) is None
    assert splice_graph_entries(shell[:-1], parts.nodes, parts.value_info) is None  # cut short
    with_node = onnx.ModelProto()
    with_node.CopyFrom(parts.shell)
    with_node.graph.node.add(op_type="Relu")
    data = with_node.SerializeToString()
    assert splice_graph_entries(data, parts.nodes, parts.value_info) is None  # a node in it


def test_writing_makes_no_empty_metadata_store() -> None:
    """onnx-ir makes ``meta`` and ``metadata_props`` on their first read: the writer reads
    the slots behind them (this onnx-ir has them), and a quantization annotation in an
    existing store is still seen (test_what_onnx_ir_orders_otherwise_falls_back_to_it)."""
    model, graph, _ = _model()
    serialize_parts(model).data()
    for node in graph:
        for out in node.outputs:
            if out.is_graph_output():
                continue  # onnx-ir's serializer writes it, and reads its meta
            assert getattr(out, "_metadata", "no slot") is None
            assert getattr(out, "_metadata_props", "no slot") is None
    graph.node(1).outputs[0].meta["other"] = 1  # a store with other keys: written as before
    _same(model)
