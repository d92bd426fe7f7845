"""Per-node inference kept by node signature: equal types, inferred once per signature."""

from __future__ import annotations

import numpy as np
import onnx.shape_inference
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.lowering.node_types import infer_node_output_types


def _value(name: str, shape: list[int | str | None]) -> ir.Value:
    return ir.Value(name=name, type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(shape))


def _reshape(x: ir.Value, target: list[int], name: str) -> ir.Node:
    shape = ir.Value(name=f"{name}_shape", const_value=ir.Tensor(np.array(target, np.int64)))
    shape.type, shape.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([len(target)])
    return ir.Node("", "Reshape", [x, shape], name=name)


def _infer(node: ir.Node, memo: dict[object, object]) -> None:
    for index, out in enumerate(node.outputs):
        out.name = f"{id(node)}_{index}"  # as in a graph: inference reads outputs by name
    infer_node_output_types(node, 23, memo=memo)  # type: ignore[arg-type]


@pytest.fixture
def inferences(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = onnx.shape_inference.infer_node_outputs

    def counting(schema, node, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(node.op_type)
        return real(schema, node, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_node_outputs", counting)
    return calls


def test_a_kept_signature_gives_equal_fresh_types_without_inferring(
    inferences: list[str],
) -> None:
    memo: dict[object, object] = {}
    first = ir.Node("", "Shape", [_value("a", ["batch", 3])], attributes=[ir.AttrInt64("start", 1)])
    second = ir.Node(
        "", "Shape", [_value("b", ["batch", 3])], attributes=[ir.AttrInt64("start", 1)]
    )
    for node in (first, second):
        _infer(node, memo)
    assert inferences == ["Shape"]
    (one,), (two,) = first.outputs, second.outputs
    assert one.type == two.type == ir.TensorType(ir.DataType.INT64)
    assert one.type is not two.type
    assert one.shape == two.shape == ir.Shape([1])


def test_what_the_signature_reads_tells_nodes_apart(inferences: list[str]) -> None:
    """Another constant input, input shape or attribute: inferred again, its own result."""
    memo: dict[object, object] = {}
    x = _value("x", [2, 6])
    nodes = [_reshape(x, [3, 4], "r1"), _reshape(x, [12], "r2"), _reshape(x, [3, 4], "r3")]
    for node in nodes:
        _infer(node, memo)
    assert [n.outputs[0].shape for n in nodes] == [
        ir.Shape([3, 4]),
        ir.Shape([12]),
        ir.Shape([3, 4]),
    ]
    assert inferences == ["Reshape", "Reshape"]
    other = ir.Node("", "Shape", [_value("y", ["batch", 4])], attributes=[ir.AttrInt64("start", 0)])
    same = ir.Node("", "Shape", [_value("z", ["batch", 3])], attributes=[ir.AttrInt64("start", 0)])
    for node in (other, same):
        _infer(node, memo)
    assert [n.outputs[0].shape for n in (other, same)] == [ir.Shape([2]), ir.Shape([2])]
    assert inferences.count("Shape") == 2


def test_a_node_with_a_tensor_attribute_is_inferred_each_time(inferences: list[str]) -> None:
    memo: dict[object, object] = {}
    for value in (1.0, 2.0):
        count = ir.Value(name=f"c{value}", const_value=ir.Tensor(np.array([2], np.int64)))
        count.type, count.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([1])
        fill = ir.AttrTensor("value", ir.Tensor(np.array([value], np.float32)))
        node = ir.Node("", "ConstantOfShape", [count], attributes=[fill])
        _infer(node, memo)
        assert node.outputs[0].type == ir.TensorType(ir.DataType.FLOAT)
    assert inferences == ["ConstantOfShape", "ConstantOfShape"]
    assert not memo


def _external(name: str, offset: int, dims: list[int], dtype: ir.DataType) -> ir.Value:
    tensor = ir.ExternalTensor(
        "w.data", offset, 8 * int(np.prod(dims)), dtype, shape=ir.Shape(dims), name=name,
        base_dir="/nonexistent",
    )  # fmt: skip
    value = ir.Value(name=name, const_value=tensor)
    value.type, value.shape = ir.TensorType(dtype), ir.Shape(dims)
    return value


@pytest.mark.parametrize("op", ["Mul", "Reshape"])
def test_small_external_constants_share_a_signature_by_type_and_dims(
    inferences: list[str], op: str
) -> None:
    """Inference sees a reference, never the bytes (it refuses to read them): two small
    external constants of one type and dims, in other places, get one inference, and
    the types each would get alone."""
    dtype = ir.DataType.FLOAT if op == "Mul" else ir.DataType.INT64
    dims = [4] if op == "Mul" else [2]
    memo: dict[object, object] = {}
    nodes = []
    for index in range(2):
        constant = _external(f"scale_{index}", 4096 * index, dims, dtype)
        nodes.append(ir.Node("", op, [_value(f"x{index}", ["batch", 4]), constant]))
        _infer(nodes[-1], memo)
    assert inferences == [op]
    alone = ir.Node("", op, [_value("x", ["batch", 4]), _external("other", 64, dims, dtype)])
    _infer(alone, {})  # not memoized: inferred on its own
    for node in nodes:
        assert node.outputs[0].type == alone.outputs[0].type
        assert node.outputs[0].shape == alone.outputs[0].shape
    if op == "Reshape":  # the target's data is not read: nothing inferred
        assert alone.outputs[0].type is None
    else:
        assert alone.outputs[0].shape == ir.Shape(["batch", 4])
    wider = ir.Node("", op, [_value("y", ["batch", 4]), _external("w", 0, [1, *dims], dtype)])
    _infer(wider, memo)  # other dims: inferred again
    assert inferences.count(op) == 3
