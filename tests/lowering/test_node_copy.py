"""node_copy: build_node and copy_attr give what ir.Node and ir.Attr give, slot for slot."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.lowering import node_copy


def _slots(obj: object) -> dict[str, object]:
    """Every slot of ``obj`` and whatever its ``__dict__`` holds, if it has one."""
    names = [n for cls in type(obj).__mro__ for n in getattr(cls, "__slots__", ())]
    held = {n: getattr(obj, n) for n in names if hasattr(obj, n)}
    return {**held, **{f"__dict__.{k}": v for k, v in getattr(obj, "__dict__", {}).items()}}


def _attrs() -> list[ir.Attr]:
    return [
        ir.AttrInt64("axis", -1),
        ir.Attr("perm", ir.AttributeType.INTS, [0, 2, 1, 3]),
        ir.AttrFloat32("epsilon", 1e-5),
        ir.AttrString("mode", "constant", doc_string="a doc"),
        ir.AttrTensor("value", ir.tensor(np.arange(3, dtype=np.float32))),
    ]


def _same_node(fast: ir.Node, slow: ir.Node) -> None:
    a, b = _slots(fast), _slots(slow)
    assert a.keys() == b.keys()
    for name in a:
        if name == "_attributes":
            assert type(a[name]) is type(b[name])
            assert dict(a[name]) == dict(b[name])
            assert vars(a[name]).keys() == vars(b[name]).keys()
            assert a[name]._owner is fast and b[name]._owner is slow  # type: ignore[attr-defined]
        elif name == "_outputs":
            assert len(a[name]) == len(b[name])  # type: ignore[arg-type]
            for x, y in zip(a[name], b[name]):  # type: ignore[call-overload]
                sx, sy = _slots(x), _slots(y)
                assert sx.pop("_producer") is fast and sy.pop("_producer") is slow
                assert sx == sy
        else:
            assert a[name] == b[name], name


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("num_outputs", [1, 3])
def test_build_node_is_ir_node(
    monkeypatch: pytest.MonkeyPatch, fast: bool, num_outputs: int
) -> None:
    monkeypatch.setattr(node_copy, "FAST", fast)
    x, y = ir.Value(name="x"), ir.Value(name="y")
    inputs, attrs = [x, None, y, x], _attrs()
    slow = ir.Node("", "Op", inputs, attrs, num_outputs=num_outputs, name="n")
    built = node_copy.build_node("", "Op", inputs, attrs, num_outputs, "n")
    _same_node(built, slow)
    # Each input records the new node's uses, after the earlier node's, in order.
    assert list(x.uses()) == [(slow, 0), (slow, 3), (built, 0), (built, 3)]
    assert list(y.uses()) == [(slow, 2), (built, 2)]
    assert [out.index() for out in built.outputs] == list(range(num_outputs))


def test_this_onnx_ir_takes_the_fast_path() -> None:
    """The layout read is this onnx-ir's (else build_node falls back: right, but slow)."""
    assert node_copy.FAST


@pytest.mark.parametrize("fast", [True, False])
def test_copy_attr_is_ir_attr(monkeypatch: pytest.MonkeyPatch, fast: bool) -> None:
    monkeypatch.setattr(node_copy, "FAST", fast)
    for attr in _attrs():
        copy = node_copy.copy_attr(attr)
        fresh = ir.Attr(attr.name, attr.type, attr.value, doc_string=attr.doc_string)
        assert copy is not attr and type(copy) is type(fresh)
        assert _slots(copy) == _slots(fresh)
        if fast:  # the value object itself, shared
            assert copy.value is attr.value
        copy.name = "renamed"
        assert attr.name != "renamed"


def test_built_node_in_a_graph_serializes_as_ir_node() -> None:
    """Inserted in a graph, named and serialized: the same proto as ir.Node's."""
    protos, attrs = [], _attrs()
    for build in (
        lambda i: ir.Node("", "Transpose", i, attrs[1:2], num_outputs=1, name="t"),
        lambda i: node_copy.build_node("", "Transpose", i, attrs[1:2], 1, "t"),
    ):
        x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([1, 2, 3, 4]))
        node = build([x])
        graph = ir.Graph([x], node.outputs, nodes=[node], opset_imports={"": 22})
        protos.append(ir.serde.serialize_graph(graph).SerializeToString())
    assert protos[0] == protos[1]
