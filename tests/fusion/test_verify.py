"""fusion/verify.py: the inputs fusions are verified at, positions the mask drops, decisions.

The FuseForEpPass tests here use a small hand-built model whose "fusion" changes the output
only at padding positions, or also at a kept one, so each decision is forced; they run on
the CPU EP only (``check_ep=False``). The WebGPU cases are in test_verify_webgpu.py.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxscript_ep_passes.ep import load_snapshot
from onnxscript_ep_passes.fusion import FuseForEpPass, FusionResult, FusionSpec
from onnxscript_ep_passes.fusion.evaluate import Sizes, generate_feeds, padding_mask
from onnxscript_ep_passes.fusion.verify import verification_sizes


def _decoder_like(past: bool = False) -> ir.Model:
    """``y[b, s, :] = embedding[input_ids[b, s]] * 2`` with an unused ``attention_mask``."""
    rng = np.random.default_rng(0)
    table = numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "table")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["e"], name="embed"),
        helper.make_node("Mul", ["e", "two"], ["y"], name="scale"),
    ]
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
    ]
    if past:
        inputs.append(
            helper.make_tensor_value_info("past_key", TensorProto.FLOAT, ["batch", 2, "p", 4])
        )
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])],
        initializer=[table, two],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return ir.from_proto(model)


def _shift(where: str) -> FusionSpec:
    """A fusion that adds 0.5 to ``y`` where ``attention_mask`` is 0 (``where="padding"``)
    or everywhere (``"everywhere"``)."""

    def apply(model: ir.Model, max_length: int) -> tuple[int, dict[str, str]]:
        graph = model.graph
        (y,) = graph.outputs
        mask = next(v for v in graph.inputs if v.name == "attention_mask")
        half = ir.Value(name="half", const_value=ir.tensor(np.array(0.5, np.float32)))
        graph.register_initializer(half)
        nodes: list[ir.Node] = []
        if where == "padding":
            as_float = ir.node("Cast", [mask], attributes={"to": ir.DataType.FLOAT})
            one = ir.Value(name="one", const_value=ir.tensor(np.array(1.0, np.float32)))
            graph.register_initializer(one)
            dropped = ir.node("Sub", [one, as_float.outputs[0]])
            axes = ir.Value(name="axes", const_value=ir.tensor(np.array([2], np.int64)))
            graph.register_initializer(axes)
            column = ir.node("Unsqueeze", [dropped.outputs[0], axes])
            delta = ir.node("Mul", [column.outputs[0], half])
            nodes += [as_float, dropped, column, delta]
            shift = delta.outputs[0]
        else:
            shift = half
        add = ir.node("Add", [y, shift])
        nodes.append(add)
        graph.extend(nodes)
        out = add.outputs[0]
        out.dtype, out.shape = y.dtype, y.shape
        graph.outputs[0] = out
        y.name, out.name = "y.before", "y"
        return 1, {}

    return FusionSpec(f"shift_{where}", "com.microsoft", "GroupQueryAttention", apply, 1e-4)


def _fuse(spec: FusionSpec, allow: bool) -> FusionResult:
    fusing = FuseForEpPass(
        "webgpu",
        table=load_snapshot("webgpu-ort-1.32"),
        fusions=(spec,),
        allow_padding_differences=allow,
        check_ep=False,
    )
    return fusing(_decoder_like())


def test_padding_masks_pad_the_last_row_on_the_side_asked() -> None:
    np.testing.assert_array_equal(padding_mask(Sizes(2, 6, 0, "left")), [[1] * 6, [0, 0] + [1] * 4])
    np.testing.assert_array_equal(
        padding_mask(Sizes(2, 6, 0, "right")), [[1] * 6, [1] * 4 + [0, 0]]
    )
    np.testing.assert_array_equal(padding_mask(Sizes(1, 1, 0, "right")), [[1]])  # one kept
    feeds = generate_feeds(_decoder_like().graph.inputs, Sizes(2, 3, 0, "left"))
    np.testing.assert_array_equal(feeds["attention_mask"], [[1, 1, 1], [0, 1, 1]])
    with pytest.raises(ValueError, match="padding 'middle'"):
        Sizes(2, 3, 0, "middle")


def test_sizes_cover_padding_windows_and_the_cache() -> None:
    plain = verification_sizes(_decoder_like(), [], 4096)
    assert {s.padding for s in plain if s.batch == 2} == {"left", "right"}
    assert {s.seq for s in plain} == {3, 8, 13, 40} and all(s.past == 0 for s in plain)
    windowed = verification_sizes(_decoder_like(past=True), [4], 4096)
    assert {3, 5, 9} <= {s.seq for s in windowed if s.past == 0}
    assert any(s.past > 4 and s.seq == 1 and s.batch == 2 for s in windowed)  # decode past W
    assert any(s.past > 4 and s.seq > 1 for s in windowed)  # a chunk after the window
    # ORT's GroupQueryAttention refuses batch > 1 with a past and several new tokens
    assert not any(s.batch > 1 and s.past and s.seq > 1 for s in windowed)
    assert all(s.total <= 8 for s in verification_sizes(_decoder_like(True), [4], 8))


def test_a_fusion_differing_only_at_padding_is_dropped_by_default() -> None:
    (record,) = _fuse(_shift("padding"), allow=False).records
    assert not record.kept and record.excluded is None
    assert record.reason is not None
    assert "equal at every position attention_mask keeps" in record.reason
    assert "CPUExecutionProvider by up to 0.5 at padding positions" in record.reason
    assert "--allow-padding-differences" in record.reason
    (check,) = record.checks
    assert check["ok"] and not check["padded_ok"] and check["padded_positions"] > 0
    assert check["max_abs_diff"] == 0.0
    assert check["padded_max_abs_diff"] == pytest.approx(0.5, abs=1e-6)


def test_allow_padding_differences_keeps_it_and_says_what_was_excluded() -> None:
    (record,) = _fuse(_shift("padding"), allow=True).records
    assert record.kept and record.max_abs_diff == 0.0
    assert record.excluded is not None and "attention_mask is 0" in record.excluded
    assert "CPUExecutionProvider differs there by up to 0.5" in record.excluded
    assert "padded tokens" in record.summary() and record.not_checked == "check_ep=False"


@pytest.mark.parametrize("allow", [False, True])
def test_a_difference_at_kept_positions_is_dropped_even_when_padding_may_differ(
    allow: bool,
) -> None:
    (record,) = _fuse(_shift("everywhere"), allow=allow).records
    assert not record.kept
    assert record.reason is not None
    assert record.reason.startswith("outputs differ on CPUExecutionProvider by up to 0.5")
    assert "at positions attention_mask keeps (tolerance 0.0001; batch " in record.reason
