"""LowerOpsetForEpPass: the choice of opset, its logs, and its overrides (snapshot tables)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto

from onnxscript_ep_passes import ORT_TRACKING_ISSUE, DowngradeError
from onnxscript_ep_passes.ep import KernelRange, KernelTable, get_table
from onnxscript_ep_passes.passes import LowerOpsetForEpPass, choose_target_opset
from tests.ep.snapshot_oracle import has_kernel, snapshot_rows
from tests.harness import benchmark_decoder, make_model, run_model

F = TensorProto.FLOAT


def _reshape_transpose(opset: int, *, extra: list[onnx.NodeProto] | None = None) -> ir.Model:
    nodes = [
        oh.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
        oh.make_node("Transpose", ["r"], ["t"], name="transpose", perm=[1, 0]),
        oh.make_node("Relu", ["t"], ["y"], name="relu"),
        *(extra or []),
    ]
    outputs = [oh.make_tensor_value_info("y", F, [4, 3])]
    if extra:
        outputs.append(oh.make_tensor_value_info("z", TensorProto.FLOAT8E8M0, [2, 6]))
    proto = make_model(
        nodes,
        [oh.make_tensor_value_info("x", F, [2, 6])],
        outputs,
        opset,
        initializers=[oh.make_tensor("shape", TensorProto.INT64, [2], [3, 4])],
    )
    return ir.from_proto(proto)


def _table(**ranges: list[tuple[int, int | None]]) -> KernelTable:
    rows = {
        ("", op): tuple(KernelRange(start, end, None) for start, end in spans)
        for op, spans in ranges.items()
    }
    return KernelTable("TestExecutionProvider", "0.0", "test", rows)


def test_info_and_debug_logs(caplog: pytest.LogCaptureFixture) -> None:
    model = _reshape_transpose(24)
    with caplog.at_level(logging.INFO, logger="onnxscript_ep_passes"):
        LowerOpsetForEpPass("cuda", "1.24")(model)
    assert model.opset_imports[""] == 23
    info = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
    for needle in (
        "opset 24 -> 23",
        "'test_graph'",
        "on CUDA",  # the one INFO line (per-node decisions are DEBUG)
        "1.24",
        ORT_TRACKING_ISSUE,
    ):
        assert needle in info, (needle, info)
    # A table where Relu has no kernel at all: it stays on CPU; the INFO line counts it,
    # a DEBUG line (-v) lists it, and nothing is a WARNING (the result is not a fault).
    caplog.clear()
    table = _table(Reshape=[(23, None)], Transpose=[(23, None)])
    model = _reshape_transpose(24)
    with caplog.at_level(logging.DEBUG, logger="onnxscript_ep_passes"):
        LowerOpsetForEpPass("cuda", table=table, legalize=False)(model)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    (info,) = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert "fall back 3" in info, info  # the Reshape and Transpose stay with the Relu
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("1 x Relu-14: no " in m for m in debug), debug


def test_ties_go_to_the_higher_opset() -> None:
    # Open ranges 21+ and 23+: 23 matches exactly; 22 and 21 would not both match.
    table = _table(
        Reshape=[(21, 22), (23, None)], Transpose=[(21, 22), (23, None)], Relu=[(14, None)]
    )
    choice = choose_target_opset(_reshape_transpose(24), table, legalize=False)
    assert choice.chosen_opset == 23
    assert not choice.after.fallback_nodes


def test_explicit_target_and_unreachable_target() -> None:
    model = _reshape_transpose(24)
    LowerOpsetForEpPass("cuda", "1.24", target_opset=21)(model)
    assert model.opset_imports[""] == 21
    bad = _reshape_transpose(
        24, extra=[oh.make_node("Cast", ["x"], ["z"], name="to_e8m0", to=TensorProto.FLOAT8E8M0)]
    )
    before = ir.to_proto(bad).SerializeToString()
    with pytest.raises(DowngradeError, match="to_e8m0"):
        LowerOpsetForEpPass("cuda", "1.24", target_opset=23)(bad)
    assert ir.to_proto(bad).SerializeToString() == before


def test_search_stops_at_the_first_refused_step() -> None:
    bad = _reshape_transpose(
        24, extra=[oh.make_node("Cast", ["x"], ["z"], name="to_e8m0", to=TensorProto.FLOAT8E8M0)]
    )
    choice = choose_target_opset(bad, get_table("cuda", "1.24"), legalize=False)
    assert choice.chosen_opset == 24  # 23 is out of reach: nothing better is possible
    assert choice.blocked is not None and "to_e8m0" in str(choice.blocked)


def test_cpu_is_a_noop() -> None:
    model = _reshape_transpose(24)
    result = LowerOpsetForEpPass("cpu")(model)
    assert not result.modified and model.opset_imports[""] == 24


def test_outputs_unchanged_after_lowering_for_dml() -> None:
    from tests.harness import run_model

    model = _reshape_transpose(24)
    original = ir.to_proto(model)
    LowerOpsetForEpPass("dml", "1.24")(model)
    # The expected opset from an independent reading of the DML 1.24 snapshot: the highest
    # one at which every op has a kernel (ties go to the higher opset).
    rows = snapshot_rows("dml-ort-1.24")
    ops = [n.op_type for n in original.graph.node]
    expected = max(o for o in range(18, 25) if all(has_kernel(rows, op, o) for op in ops))
    assert expected < 24  # the lowering was needed
    assert model.opset_imports[""] == expected
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    expected, _ = run_model(original, {"x": x})
    actual, _ = run_model(ir.to_proto(model), {"x": x})
    np.testing.assert_array_equal(actual[0], expected[0])


def test_one_info_line_per_run_and_a_summarised_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 30 Relu nodes the EP has no kernel for, behind a Reshape/Transpose that lowering fixes.
    relus = [
        oh.make_node("Relu", [f"y{i}" if i else "y"], [f"y{i + 1}"], name=f"relu{i}")
        for i in range(30)
    ]
    model = _reshape_transpose(24, extra=None)
    proto = ir.to_proto(model)
    proto.graph.node.extend(relus)
    proto.graph.output[0].name = "y30"
    model = ir.from_proto(proto)
    table = _table(Reshape=[(23, None)], Transpose=[(23, None)])
    with caplog.at_level(logging.DEBUG, logger="onnxscript_ep_passes"):
        # Forced: with every Relu on CPU anyway, the objective would keep the source (all
        # on CPU: no Memcpy); this test is about the log lines of a run that lowers.
        LowerOpsetForEpPass("cuda", table=table, target_opset=23)(model)
    assert model.opset_imports[""] == 23
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(info) == 1 and "opset 24 -> 23" in info[0], info
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    (listed,) = [m for m in debug if "predicted on CPU" in m]
    assert "31 nodes" in listed and "31 x Relu-14" in listed, listed
    assert len(listed.splitlines()) == 2, listed
    assert any("relu29" in m for m in debug)  # each node is still there with -v


def test_lowest_opset_bounds_the_search(tmp_path: Path) -> None:
    # The decoder's Cos/Sin-22 have no CUDA 1.24 kernel at 24 or 23: the full search weighs
    # every opset down to 18 (each below 23 with Attention expanded) and, on this small
    # decoder, picks one of them. Bounded at 23 it weighs 24 and 23 only, prices them
    # exactly as the full search does, and picks the best of the two.
    proto = benchmark_decoder(tmp_path / "decoder.onnx")
    table = get_table("cuda", "1.24")
    full = choose_target_opset(ir.from_proto(proto), table)
    bounded = choose_target_opset(ir.from_proto(proto), table, lowest_opset=23)
    assert min(full.costs) == 18 and full.lowest_opset == 18 and full.chosen_opset < 23
    assert sorted(bounded.costs) == [23, 24] and bounded.lowest_opset == 23
    assert set(bounded.legalized_costs) <= {23, 24} and bounded.blocked is None
    assert {o: full.costs[o] for o in bounded.costs} == bounded.costs
    assert {o: full.legalized_costs[o] for o in bounded.legalized_costs} == (
        bounded.legalized_costs
    )
    weighed = [*bounded.costs.values(), *bounded.legalized_costs.values()]
    # Released CUDA 1.24 has no Attention kernel (the table from the release): at 23 the
    # candidate that expands the Attention for the EP is the cheapest of those weighed.
    assert (bounded.chosen_opset, bounded.legalized) == (23, True)
    assert bounded.legalized_costs[23].cost == min(c.cost for c in weighed)
    # The pass applies the bounded choice: a checked model that computes what the original does.
    model = ir.from_proto(proto)
    result = LowerOpsetForEpPass("cuda", "1.24", lowest_opset=23)(model)
    lowered = ir.to_proto(model)
    assert result.modified and lowered.opset_import[0].version == 23
    onnx.checker.check_model(lowered, full_check=True)
    rng = np.random.default_rng(0)
    feeds = {
        "input_ids": rng.integers(0, 50, size=(2, 5)).astype(np.int64),
        "attention_mask": np.array([[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]], dtype=np.int64),
        "position_ids": np.tile(np.arange(5, dtype=np.int64), (2, 1)),
    }
    for expected, actual in zip(run_model(proto, feeds)[0], run_model(lowered, feeds)[0]):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def test_lowest_opset_out_of_range_is_refused() -> None:
    model = _reshape_transpose(24)
    before = ir.to_proto(model).SerializeToString()
    with pytest.raises(ValueError, match="lowest_opset 17 is below 18"):
        LowerOpsetForEpPass("cuda", "1.24", lowest_opset=17)
    with pytest.raises(ValueError, match="target_opset 21 is below lowest_opset 22"):
        LowerOpsetForEpPass("cuda", "1.24", target_opset=21, lowest_opset=22)
    with pytest.raises(ValueError, match="lowest_opset 17"):
        choose_target_opset(model, get_table("cuda", "1.24"), lowest_opset=17)
    assert ir.to_proto(model).SerializeToString() == before
    # A bound at or above the model's opset: only the model's own opset is weighed.
    choice = choose_target_opset(model, get_table("cuda", "1.24"), lowest_opset=24)
    assert sorted(choice.costs) == [24] and choice.chosen_opset == 24
