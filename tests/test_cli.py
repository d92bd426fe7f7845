"""The command line, run as users run it (a subprocess), on files with external data."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from onnxscript_ep_passes.cli import main
from tests.harness import make_model, run_model


def _model_with_weights(opset: int = 24, *, bad: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((256, 512)).astype(np.float32), "w")
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
        oh.make_node("Swish", ["h"], ["s"], name="swish"),
        oh.make_node("Reshape", ["s", "shape"], ["y"], name="reshape"),
    ]
    if bad:
        nodes.append(oh.make_node("Cast", ["y"], ["z"], name="to_e8m0", to=TensorProto.FLOAT8E8M0))
    outputs = [oh.make_tensor_value_info("y", TensorProto.FLOAT, [4, 256])]
    if bad:
        outputs.append(oh.make_tensor_value_info("z", TensorProto.FLOAT8E8M0, [4, 256]))
    return make_model(
        nodes,
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 256])],
        outputs,
        opset,
        initializers=[weight, numpy_helper.from_array(np.array([4, 256], np.int64), "shape")],
    )


def _save_external(model: onnx.ModelProto, path: Path) -> None:
    onnx.save(
        model, path, save_as_external_data=True, location=path.name + ".data", size_threshold=1024
    )


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "onnxscript_ep_passes", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_lower_with_external_data_round_trip(tmp_path: Path) -> None:
    src = tmp_path / "in.onnx"
    _save_external(_model_with_weights(), src)
    digest = _digest(src, tmp_path / "in.onnx.data")
    out = tmp_path / "out" / "lowered.onnx"
    out.parent.mkdir()
    result = _run("lower", str(src), "-o", str(out), "--target-opset", "23")
    assert result.returncode == 0, result.stderr
    assert "from opset 24 to 23" in result.stderr
    assert (out.parent / "lowered.onnx.data").stat().st_size >= 256 * 512 * 4
    assert out.stat().st_size < 64 * 1024  # weights are not inlined
    assert _digest(src, tmp_path / "in.onnx.data") == digest  # the input is untouched
    lowered = onnx.load(out)
    assert [o.version for o in lowered.opset_import if o.domain == ""] == [23]
    onnx.checker.check_model(str(out), full_check=True)
    x = np.random.default_rng(1).standard_normal((2, 256)).astype(np.float32)
    expected, _ = run_model(onnx.load(src), {"x": x})
    actual, _ = run_model(lowered, {"x": x})
    np.testing.assert_allclose(actual[0], expected[0], rtol=1e-6, atol=1e-6)


def test_refusal_exits_nonzero_lists_nodes_and_writes_nothing(tmp_path: Path) -> None:
    src = tmp_path / "bad.onnx"
    onnx.save(_model_with_weights(bad=True), src)
    out = tmp_path / "out.onnx"
    result = _run("lower", str(src), "-o", str(out), "--target-opset", "23")
    assert result.returncode == 2
    assert "node 'to_e8m0' (Cast-24" in result.stderr
    assert "FLOAT8E8M0" in result.stderr
    assert not out.exists()
    assert not (tmp_path / "out.onnx.data").exists()


def test_console_entry_point_inline_weights(tmp_path: Path) -> None:
    src = tmp_path / "in.onnx"
    onnx.save(_model_with_weights(), src)
    out = tmp_path / "out.onnx"
    assert main(["-q", "lower", str(src), "-o", str(out), "--target-opset", "21"]) == 0
    lowered = onnx.load(out)
    assert not (tmp_path / "out.onnx.data").exists()
    assert lowered.ir_version == 10
    onnx.checker.check_model(lowered, full_check=True)


def test_missing_input_is_an_error(tmp_path: Path) -> None:
    assert (
        main(
            [
                "lower",
                str(tmp_path / "nope.onnx"),
                "-o",
                str(tmp_path / "o.onnx"),
                "--target-opset",
                "23",
            ]
        )
        == 1
    )


def _opset24_decoder_like(tmp_path: Path) -> Path:
    """Reshape/Transpose at opset 24: CUDA 1.24 only has their 23+ kernels."""
    model = make_model(
        [
            oh.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
            oh.make_node("Transpose", ["r"], ["t"], name="transpose", perm=[1, 0]),
            oh.make_node("Relu", ["t"], ["y"], name="relu"),
        ],
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
        24,
        initializers=[numpy_helper.from_array(np.array([3, 4], np.int64), "shape")],
    )
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return path


def test_report_json_for_cuda_snapshot(tmp_path: Path) -> None:
    import json

    path = _opset24_decoder_like(tmp_path)
    result = _run("-q", "report", str(path), "--ep", "cuda", "--ort-version", "1.24", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert {"ep", "ort_version", "table_source", "before", "after"} <= set(report)
    assert report["ep"] == "CUDAExecutionProvider"
    assert report["table_source"] == "snapshot:cuda-ort-1.24.tsv"
    before, after = report["before"], report["after"]
    assert before["opset"] == 24 and after["opset"] == 23
    for side in (before, after):
        assert {"opset", "memcpy", "nodes"} <= set(side)
        for node in side["nodes"]:
            assert {"name", "op_type", "domain", "since_version", "placement", "reason"} <= set(
                node
            )
    placed = {n["name"]: n for n in before["nodes"]}
    assert placed["reshape"]["placement"] == "cpu" and placed["reshape"]["since_version"] == 24
    assert "since_version 24" in placed["reshape"]["reason"]
    assert placed["relu"]["placement"] == "ep"
    assert before["memcpy"] > 0
    assert all(n["placement"] == "ep" for n in after["nodes"])
    assert after["memcpy"] == 0


def test_report_text_and_lower_for_ep(tmp_path: Path) -> None:
    path = _opset24_decoder_like(tmp_path)
    result = _run("-q", "report", str(path), "--ep", "cuda", "--ort-version", "1.24")
    assert result.returncode == 0, result.stderr
    assert "before: opset 24" in result.stdout and "after: opset 23" in result.stdout
    assert "no kernel for Reshape at since_version 24" in result.stdout
    out = tmp_path / "out.onnx"
    result = _run("lower", str(path), "-o", str(out), "--ep", "cuda", "--ort-version", "1.24")
    assert result.returncode == 0, result.stderr
    assert "CUDAExecutionProvider" in result.stderr and "27729" in result.stderr
    lowered = onnx.load(out)
    assert [o.version for o in lowered.opset_import if o.domain == ""] == [23]
    x = np.random.default_rng(2).standard_normal((2, 6)).astype(np.float32)
    expected, _ = run_model(onnx.load(path), {"x": x})
    actual, _ = run_model(lowered, {"x": x})
    np.testing.assert_array_equal(actual[0], expected[0])


def test_lower_for_cpu_is_a_noop_and_explicit_target_wins(tmp_path: Path) -> None:
    path = _opset24_decoder_like(tmp_path)
    out = tmp_path / "cpu.onnx"
    assert main(["-q", "lower", str(path), "-o", str(out), "--ep", "cpu"]) == 0
    assert [o.version for o in onnx.load(out).opset_import if o.domain == ""] == [24]
    out = tmp_path / "forced.onnx"
    args = ["-q", "lower", str(path), "-o", str(out), "--ep", "cuda", "--ort-version", "1.24"]
    assert main([*args, "--target-opset", "21"]) == 0
    assert [o.version for o in onnx.load(out).opset_import if o.domain == ""] == [21]


def test_report_unknown_ep_is_an_error(tmp_path: Path) -> None:
    path = _opset24_decoder_like(tmp_path)
    assert main(["report", str(path), "--ep", "NoSuchExecutionProvider"]) == 1


def test_report_webgpu_live_table_with_and_without_legalization(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], webgpu: None
) -> None:
    import json

    from tests.torch_models import export_proto

    path = tmp_path / "llama24.onnx"
    onnx.save(export_proto("llama", 24), path)
    reports = {}
    for flag in ([], ["--no-legalize"]):
        assert main(["-q", "report", str(path), "--ep", "webgpu", "--json", *flag]) == 0
        reports[bool(flag)] = json.loads(capsys.readouterr().out)
    plain, legalized = reports[True], reports[False]
    assert plain["table_source"] == "live:get_registered_ep_kernel_defs"
    # WebGPU has no ai.onnx Attention kernel at any opset: without legalization, the
    # objective (Attention on CPU is expensive) picks an opset below 23, where the exact
    # lowering has replaced Attention by its definition; its shape math stays on CPU.
    assert plain["chosen"]["opset"] < 23 and not plain["chosen"]["legalized"]
    assert "Attention" not in {n["op_type"] for n in plain["after"]["nodes"]}
    assert plain["after"]["memcpy"] > 0
    assert legalized["after"]["memcpy"] == 0
    assert any(d["decision"] == "expand" for d in legalized["decisions"])
