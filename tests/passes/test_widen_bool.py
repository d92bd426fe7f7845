"""Bool data-movement nodes run in a carrier type between exact Casts (passes/widen_bool).

Models are lowered with the live WebGPU table (no bool Pad/Shape/Slice/Concat kernels,
int32 ones and bool <-> int32 Casts), checked with onnx.checker's full check and run in
ORT against the original; one model also runs in a real WebGPU session, where legalization
must remove the Memcpy nodes the bool Pad caused.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto

from onnxscript_ep_passes.ep import KernelTable
from onnxscript_ep_passes.lowering.context import NodeRefusedError
from onnxscript_ep_passes.passes import legalize
from onnxscript_ep_passes.passes.widen_bool import widen_carrier, widen_node
from tests.e2e.helpers import run_on_webgpu
from tests.harness import make_model, run_model

BOOL, INT64, FLOAT = TensorProto.BOOL, TensorProto.INT64, TensorProto.FLOAT
pytestmark = pytest.mark.usefixtures("webgpu")


def _int64(name: str, values: list[int]) -> onnx.NodeProto:
    return oh.make_node(
        "Constant", [], [name], value=oh.make_tensor(name, INT64, [len(values)], values)
    )


def _mask_model(opset: int = 21) -> onnx.ModelProto:
    """A bool mask built on the EP (Expand), padded and cut (Pad, Slice), concatenated,
    its width read (Shape), then used by Where: bool data movement between EP nodes."""
    nodes = [
        oh.make_node("Less", ["x", "zero"], ["neg"], name="less"),
        oh.make_node("Expand", ["neg", "shape"], ["mask"], name="expand"),
        _int64("pads", [0, 0, 0, 2]),
        oh.make_node("Constant", [], ["false"], value=oh.make_tensor("false", BOOL, [], [False])),
        oh.make_node("Pad", ["mask", "pads", "false"], ["padded"], name="pad"),
        _int64("starts", [1]),
        _int64("ends", [4]),
        _int64("axes", [1]),
        oh.make_node("Slice", ["padded", "starts", "ends", "axes"], ["cut"], name="slice"),
        oh.make_node("Concat", ["cut", "cut"], ["both"], name="concat", axis=1),
        oh.make_node("Shape", ["mask"], ["width"], name="shape", start=-1),
        oh.make_node("Where", ["both", "one", "minus"], ["y"], name="where"),
    ]
    model = make_model(
        nodes,
        [oh.make_tensor_value_info("x", FLOAT, [1, 5])],
        [
            oh.make_tensor_value_info("y", FLOAT, [3, 6]),
            oh.make_tensor_value_info("padded", BOOL, [3, 7]),
            oh.make_tensor_value_info("width", INT64, [1]),
        ],
        opset,
        initializers=[
            onnx.numpy_helper.from_array(np.zeros((1, 5), np.float32), "zero"),
            onnx.numpy_helper.from_array(np.array([3, 5], np.int64), "shape"),
            onnx.numpy_helper.from_array(np.ones((3, 6), np.float32), "one"),
            onnx.numpy_helper.from_array(-np.ones((3, 6), np.float32), "minus"),
        ],
    )
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.array([[-1.0, 2.0, -0.0, -3.0, 4.0]], np.float32)}


def _by_name(model: ir.Model) -> dict[str, ir.Node]:
    return {n.name: n for n in model.graph if n.name}


def _same_outputs(original: onnx.ModelProto, model: ir.Model) -> onnx.ModelProto:
    proto = ir.to_proto(model)
    onnx.checker.check_model(proto, full_check=True)
    expected, _ = run_model(original, _feeds())
    actual, how = run_model(proto, _feeds())
    assert how == "onnxruntime"
    for e, a in zip(expected, actual):
        assert e.dtype == a.dtype
        np.testing.assert_array_equal(a, e)
    return proto


def test_each_bool_data_movement_node_runs_in_int32_between_casts(
    webgpu_table: KernelTable,
) -> None:
    original = _mask_model()
    model = ir.from_proto(original)
    nodes = _by_name(model)
    int32, float = ir.DataType.INT32, ir.DataType.FLOAT  # WebGPU's Slice: float only
    for name, carrier in (("pad", int32), ("slice", float), ("concat", int32), ("shape", int32)):
        assert widen_carrier(nodes[name], webgpu_table, 21) == carrier, name
        widen_node(nodes[name], webgpu_table, 21)
        assert all(v.dtype != ir.DataType.BOOL for v in nodes[name].inputs if v is not None)
    casts = [n for n in model.graph if n.op_type == "Cast"]
    # In: mask (one Cast shared by Pad and Shape), padded (to float), cut; back: one per
    # bool output (padded, cut, both). Pad's constant False becomes an int32 constant 0.
    to = collections.Counter(n.attributes.get_int("to") for n in casts)
    assert to == {TensorProto.INT32: 2, FLOAT: 1, BOOL: 3}, to
    fill = nodes["pad"].inputs[2]
    assert fill is not None and fill.dtype == ir.DataType.INT32
    assert ir.convenience.get_const_tensor(fill).numpy().tolist() == 0
    assert all(
        n.inputs[0].dtype == ir.DataType.BOOL for n in casts if n.attributes.get_int("to") != BOOL
    )
    proto = _same_outputs(original, model)
    assert [o.name for o in proto.graph.output] == ["y", "padded", "width"]


def test_what_is_not_data_movement_or_has_no_carrier_is_refused(
    webgpu_table: KernelTable,
) -> None:
    model = ir.from_proto(_mask_model())
    nodes = _by_name(model)
    assert widen_carrier(nodes["where"], webgpu_table, 21) is None  # not data movement
    assert widen_carrier(nodes["less"], webgpu_table, 21) is None
    no_int = KernelTable.from_rows("TestEP", "0.0", "test", [("", "Pad", 1, 40, None)])
    with pytest.raises(NodeRefusedError, match="Pad on bool"):
        widen_node(nodes["pad"], no_int, 21)  # no Cast kernels: no carrier
    assert all(n.op_type != "Cast" for n in model.graph)


def test_widening_a_clone_leaves_the_original_types(webgpu_table: KernelTable) -> None:
    model = ir.from_proto(_mask_model())
    clone = model.clone()
    widen_node(_by_name(clone)["pad"], webgpu_table, 21)
    padded = _by_name(model)["pad"].outputs[0]
    assert padded.dtype == ir.DataType.BOOL and padded.name == "padded"


def test_legalize_widens_on_webgpu_and_removes_the_copies(webgpu_table: KernelTable) -> None:
    original = _mask_model()
    model = ir.from_proto(original)
    result = legalize(model, webgpu_table)
    widened = sorted(n.name for n in result.widened)
    # The Shape of the static [3, 5] mask is folded by ORT before placement (its default
    # level): it never runs, so it is not widened.
    assert widened == ["concat", "pad", "slice"], widened
    assert not result.expanded
    decisions = {d.node: d.decision for d in result.decisions}
    assert all(decisions[name] == "ep_equivalent" for name in widened), decisions
    proto = _same_outputs(original, model)
    before, after = run_on_webgpu(original, _feeds()), run_on_webgpu(proto, _feeds())
    assert after.memcpy < before.memcpy, (before.memcpy, after.memcpy)
    assert {n.op_type for n in after.cpu_nodes} <= {"Shape"}, after.cpu_summary()
    for e, a in zip(before.outputs, after.outputs):
        np.testing.assert_array_equal(a, e)
