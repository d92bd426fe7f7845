"""Smoke test of the benchmark scripts at a tiny size (the benchmarks themselves are not
run in CI): the decoder generator makes a valid model that lowers exactly, and
bench_scale writes its results files with the commit and date, raw data beside them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxscript_ep_passes.cli.program import main as cli
from tests.harness import run_model

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(autouse=True)
def _benchmarks_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))


def _feeds(batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    mask = np.ones((batch, seq), np.int64)
    mask[1, seq - 2 :] = 0  # padding in the second row
    return {
        "input_ids": rng.integers(0, 256, (batch, seq)).astype(np.int64),
        "attention_mask": mask,
        "position_ids": np.broadcast_to(np.arange(seq), (batch, seq)).astype(np.int64),
    }


def test_decoder_generator_lowers_exactly(tmp_path: Path) -> None:
    import make_decoder

    src, dst = tmp_path / "decoder.onnx", tmp_path / "lowered.onnx"
    info = make_decoder.build(src, 120, 400_000)
    assert info["nodes"] == make_decoder.NODES_ONCE + 3 * make_decoder.NODES_PER_BLOCK
    original = onnx.load(src)
    ops = {(n.op_type) for n in original.graph.node}
    assert {"Attention", "RMSNormalization", "RotaryEmbedding", "Shape", "Reshape"} <= ops
    assert cli(["-q", "lower", str(src), "-o", str(dst), "--target-opset", "23"]) == 0
    onnx.checker.check_model(str(dst), full_check=True)
    lowered = onnx.load(dst)
    assert lowered.opset_import[0].version == 23
    feeds = _feeds(2, 5)
    expected, actual = run_model(original, feeds)[0], run_model(lowered, feeds)[0]
    np.testing.assert_array_equal(expected, actual)


def test_chain_generator_lowers_on_the_proto_fast_path(tmp_path: Path) -> None:
    """make_chain.py: no value_info, and yet the label-only lowering takes the proto fast
    path (its types inferred once), with the same outputs."""
    import make_chain

    from onnxscript_ep_passes.lowering.proto_fast_path import try_lower_proto

    src, dst = tmp_path / "chain.onnx", tmp_path / "lowered.onnx"
    info = make_chain.build(src, 30, 20_000)
    assert info["nodes"] == 30
    original = onnx.load(src)
    assert not original.graph.value_info
    assert {n.op_type for n in original.graph.node} == {
        "MatMul", "Add", "Shape", "Reshape", "Transpose", "Cast", "Unsqueeze", "Squeeze"
    }  # fmt: skip
    fast = onnx.load(src, load_external_data=False)
    assert try_lower_proto(fast, 23)
    assert cli(["-q", "lower", str(src), "-o", str(dst), "--target-opset", "23"]) == 0
    onnx.checker.check_model(str(dst), full_check=True)
    lowered = onnx.load(dst)
    assert lowered.opset_import[0].version == 23
    x = np.random.default_rng(0).standard_normal((2, 8, info["hidden"])).astype(np.float32)
    np.testing.assert_array_equal(run_model(original, {"x": x})[0], run_model(lowered, {"x": x})[0])


def test_bench_scale_writes_results_with_commit_and_raw_json(tmp_path: Path) -> None:
    import bench_scale

    commands = "lower_23,report_json,ir_roundtrip"
    argv = ["--models", "60:100K", "--commands", commands, "--workdir", str(tmp_path)]
    argv += ["--chain-models", "40:100K", "--notes", "a smoke test"]
    assert bench_scale.main([*argv, "--out-dir", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "results_scale.md").read_text()
    raw = json.loads((tmp_path / "out" / "results_scale.json").read_text())
    commit = raw["environment"]["git"]["commit"]
    assert f"at commit {commit}" in text and raw["environment"]["date"][:10] in text
    assert "results_scale.json" in text
    assert "Notes: a smoke test" in text and raw["results"]["notes"] == "a smoke test"
    entry, chain = raw["results"]["models"].values()
    assert entry["tools"]["lower_23"]["ok"], entry
    assert entry["verify"]["lower_23"].startswith("opset 23, checker ok"), entry["verify"]
    assert entry["tools"]["ir_roundtrip"]["ok"], entry  # the worker ran and saved
    per_model = raw["results"]["derived"]["per_model"]
    label, chain_label = raw["results"]["models"]
    assert "time_vs_ir_roundtrip" in per_model[label]["report_json"]
    # The chain model (no value_info): the label-only lowering against parse + copy.
    assert chain["info"]["kind"] == "chain" and set(chain["tools"]) == {
        "lower_23",
        "parse_copy",
        "ir_roundtrip",
    }
    assert all(s["ok"] for s in chain["tools"].values()), chain
    assert chain["verify"]["lower_23"].startswith("opset 23, checker ok"), chain["verify"]
    assert per_model[chain_label]["lower_23"]["time_vs_parse_copy"] > 0
    assert "## Issue 23's targets" in text
    (report_run,) = entry["runs"]["report_json"]
    assert report_run["rc"] == 0 and "candidates" not in report_run  # the report is not kept


def test_profile_search_accounts_for_the_search_phase_by_phase(tmp_path: Path) -> None:
    import make_decoder
    import profile_search

    src = tmp_path / "decoder.onnx"
    make_decoder.build(src, 120, 400_000)
    assert profile_search.main([str(src), "--write", "--out-dir", str(tmp_path)]) == 0
    raw = json.loads((tmp_path / "results_profile_search.json").read_text())
    (result,) = raw["results"]["models"].values()
    phases = result["phases"]
    assert {"lower", "predict", "price", "restore"} <= set(phases)  # restore: of an edit log
    assert phases["predict"]["calls"] >= len(result["candidates"])  # one per candidate at least
    assert phases["other"]["seconds"] >= 0  # no phase was counted twice (nested calls)
    assert list(result["candidates"]) == [str(o) for o in range(24, 17, -1)]
