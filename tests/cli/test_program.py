"""The command line, run as users run it (a subprocess), on files with external data."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from onnxscript_ep_passes.cli.program import main
from tests.harness import benchmark_decoder, make_model, reshape_chain, run_model


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
    assert result.stdout.startswith("in.onnx: opset 24 -> 23\n"), result.stdout
    # One summary: the passes' own INFO lines stay off stderr, the tracking note is there.
    assert "from opset 24 to 23" not in result.stderr and "27729" in result.stderr
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
    assert result.returncode == 3  # the model cannot be lowered
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
    verdict, *rest = result.stdout.splitlines()
    # The verdict comes first, naming the file, the EP, the table and the figures.
    assert verdict.startswith(
        "m.onnx: opset 24 -> 23 on CUDA (ORT 1.24, snapshot cuda-ort-1.24): Memcpy "
    ), verdict
    assert verdict.endswith("; fall back 2 -> 0"), verdict
    text = "\n".join(rest)
    assert "placement per op, opset 24 -> 23" in text
    header = next(line for line in text.splitlines() if line.split()[:2] == ["op", "EP"])
    assert header.split() == ["op", "EP", "CPU", "shape", "EP", "CPU", "shape"], header
    assert "no kernel for Reshape at since_version 24" in text
    out = tmp_path / "out.onnx"
    result = _run("lower", str(path), "-o", str(out), "--ep", "cuda", "--ort-version", "1.24")
    assert result.returncode == 0, result.stderr
    # The verdict once, on stdout; stderr has the tracking note, not the verdict again.
    assert "on CUDA" in result.stdout and "on CUDA" not in result.stderr
    assert "27729" in result.stderr
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
    assert not out.exists()  # nothing to do: OUT is written only when asked
    assert main(["-q", "lower", str(path), "-o", str(out), "--ep", "cpu", "--write-unchanged"]) == 0
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
    # lowering has replaced Attention by its definition; its shape math has static shapes,
    # which ORT folds before placing (measured: 0 Memcpy in a real session at opset 22).
    assert plain["chosen"]["opset"] < 23 and not plain["chosen"]["legalized"]
    assert "Attention" not in {n["op_type"] for n in plain["after"]["nodes"]}
    assert plain["after"]["memcpy"] == 0
    assert legalized["after"]["memcpy"] == 0
    assert any(d["decision"] == "expand" for d in legalized["decisions"])


def test_lower_to_an_opset_imports_no_runtime_and_defers_sympy(tmp_path: Path) -> None:
    """`lower --target-opset` needs neither onnxscript nor the EP machinery,
    and onnx-ir's sympy import (a third of a small run's start-up) is never executed."""
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(_model_with_weights(), src)
    script = (
        "import sys; from onnxscript_ep_passes.cli.program import main\n"
        f"rc = main(['-q', 'lower', {str(src)!r}, '-o', {str(dst)!r}, '--target-opset', '23'])\n"
        # onnxruntime's kernel listing is read when an expansion builds an op with a
        # function body (the lowering keeps only what ORT can load).
        "heavy = ('onnxscript', 'onnx.reference', 'onnxscript_ep_passes.ep')\n"
        "print(rc, [m for m in heavy if m in sys.modules], type(sys.modules['sympy']).__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["0", "[]", "_DeferredModule"], done.stdout + done.stderr
    assert onnx.load(dst).opset_import[0].version == 23


def test_lower_to_an_opset_without_building_the_ir(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Only type rules and attribute drops: the proto is relabelled, the weights file
    copied whole; the result loads at 23, passes the checker and computes the same."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((256, 512)).astype(np.float32), "w")
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
        oh.make_node("Reshape", ["h", "shape"], ["r"], name="reshape"),
        oh.make_node("Cast", ["r"], ["y"], name="cast", to=TensorProto.FLOAT, round_mode="up"),
    ]
    shape = numpy_helper.from_array(np.array([4, 256], np.int64), "shape")
    proto = make_model(
        nodes,
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 256])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [4, 256])],
        24,
        initializers=[weight, shape],
    )
    proto.graph.value_info.extend(
        [
            oh.make_tensor_value_info("h", TensorProto.FLOAT, [2, 512]),
            oh.make_tensor_value_info("r", TensorProto.FLOAT, [4, 256]),
        ]
    )
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(proto, src, save_as_external_data=True, location="in.onnx.data")
    with caplog.at_level("INFO", logger="onnxscript_ep_passes"):
        assert main(["lower", str(src), "-o", str(dst), "--target-opset", "23"]) == 0
    assert any(r.name.endswith("proto_fast_path") for r in caplog.records), caplog.records
    onnx.checker.check_model(str(dst), full_check=True)
    lowered = onnx.load(dst)
    assert lowered.opset_import[0].version == 23
    assert [a.name for a in lowered.graph.node[2].attribute] == ["to"]
    assert (tmp_path / "out.onnx.data").read_bytes() == (tmp_path / "in.onnx.data").read_bytes()
    feeds = {"x": rng.standard_normal((2, 256)).astype(np.float32)}
    np.testing.assert_array_equal(run_model(onnx.load(src), feeds)[0], run_model(lowered, feeds)[0])


# -- the front door: version, global options, usage errors, nothing to do ----------------


def test_version() -> None:
    result = _run("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("onnxscript-ep-passes 0.")
    assert "onnx 1." in result.stdout and "onnxruntime" in result.stdout


def _help(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_help_has_examples_for_each_subcommand_and_the_exit_status(
    capsys: pytest.CaptureFixture[str],
) -> None:
    top = _help(capsys)
    for command in ("lower", "optimize", "report"):
        text = _help(capsys, command)
        assert f"onnxscript-ep-passes {command} model.onnx" in text
        assert f"onnxscript-ep-passes {command} model.onnx" in top
        assert "3  the model cannot be lowered exactly" in text
    assert "2  usage error" in top


@pytest.mark.parametrize("where", ["before", "after"])
def test_global_options_before_or_after_the_subcommand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    path = _opset24_decoder_like(tmp_path)
    out = tmp_path / "out.onnx"
    args = ["lower", str(path), "-o", str(out), "--target-opset", "23"]
    assert main(["-q", *args] if where == "before" else [*args, "-q"]) == 0
    assert capsys.readouterr().out == ""  # -q: no verdict line
    assert main(["-v", *args] if where == "before" else [*args, "-v"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "m.onnx: opset 24 -> 23",
        f"wrote {out}",
    ]


def test_lower_without_target_or_ep_is_a_usage_error(tmp_path: Path) -> None:
    path = _opset24_decoder_like(tmp_path)
    result = _run("lower", str(path), "-o", str(tmp_path / "o.onnx"))
    assert result.returncode == 2
    assert result.stderr.startswith("usage: onnxscript-ep-passes lower")
    assert "lower needs --target-opset N or --ep NAME" in result.stderr
    assert (
        _run("lower", str(path), "-o", "x.onnx", "--target-opset", "23", "--no-legalize").returncode
        == 2
    )
    assert _run("report", str(path), "--ep", "cuda", "--json", "--all").returncode == 2


def test_nothing_to_do_writes_nothing_unless_asked(tmp_path: Path) -> None:
    path = _opset24_decoder_like(tmp_path)
    out = tmp_path / "out.onnx"
    result = _run("lower", str(path), "-o", str(out), "--target-opset", "26")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "nothing to do: m.onnx: already at opset 24 (target 26)\n"
    assert not out.exists()
    result = _run("lower", str(path), "-o", str(out), "--target-opset", "24", "--write-unchanged")
    assert result.returncode == 0, result.stderr
    written, original = onnx.load(out), onnx.load(path)
    assert [o.version for o in written.opset_import if o.domain == ""] == [24]
    assert [n.op_type for n in written.graph.node] == [n.op_type for n in original.graph.node]


def test_lower_for_ep_when_nothing_changes_has_no_tracking_link(tmp_path: Path) -> None:
    path = _opset24_decoder_like(tmp_path)
    lowered = tmp_path / "m23.onnx"
    assert main(["-q", "lower", str(path), "-o", str(lowered), "--target-opset", "23"]) == 0
    out = tmp_path / "again.onnx"
    result = _run("lower", str(lowered), "-o", str(out), "--ep", "cuda", "--ort-version", "1.24")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        "nothing to do: m23.onnx: opset 23 kept on CUDA (ORT 1.24, snapshot cuda-ort-1.24)"
    )
    assert "-> 23" not in result.stdout + result.stderr
    assert "27729" not in result.stdout + result.stderr
    assert not out.exists()


# -- the text report --------------------------------------------------------------------


def _stdout(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run the command line in this process; its stdout (exit status 0 required)."""
    assert main(list(args)) == 0
    return capsys.readouterr().out


def test_report_states_an_assumed_ort_release(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _opset24_decoder_like(tmp_path)
    # No release named: the installed ORT (1.32) is the one asked for; CUDA cannot be
    # listed here, so the nearest shipped release at or below it is assumed.
    verdict, note, *_ = _stdout(capsys, "report", str(path), "--ep", "cuda").splitlines()
    assert "on CUDA (ORT 1.31 assumed, snapshot cuda-ort-1.31)" in verdict
    assert note.startswith("note: no ORT release given, so ORT 1.31 is assumed")
    report = json.loads(_stdout(capsys, "report", str(path), "--ep", "cuda", "--json"))
    assert report["ort_version_assumed"] is True and report["ort_version_requested"] is None
    assert (report["schema_version"], report["model"]) == (1, str(path))  # the path given
    named = json.loads(
        _stdout(capsys, "report", str(path), "--ep", "cuda", "--ort-version", "1.24", "--json")
    )
    assert named["ort_version_assumed"] is False and named["ort_version_requested"] == "1.24"
    # A release newer than every shipped table: the nearest one below, and it says so.
    args = ("report", str(path), "--ep", "cuda", "--ort-version", "1.33")
    verdict, note, *_ = _stdout(capsys, *args).splitlines()
    assert "on CUDA (ORT 1.31 assumed, snapshot cuda-ort-1.31)" in verdict
    assert note.startswith("note: no CUDA table of ORT 1.33 is shipped, so ORT 1.31 is assumed")
    newer = json.loads(_stdout(capsys, *args, "--json"))
    assert (newer["ort_version_assumed"], newer["ort_version_requested"]) == (True, "1.33")


def _many_reshapes(tmp_path: Path) -> Path:
    """Eight Reshape-24 (CUDA 1.24: only 23+) and a Relu that stays where it is; every
    Reshape's output is a graph output, so ORT does not fuse the chain into one Reshape."""
    path = tmp_path / "reshapes.onnx"
    proto = reshape_chain(24, 8)
    proto.graph.output.extend(
        onnx.helper.make_tensor_value_info(f"r{i}", onnx.TensorProto.FLOAT, [3, 4])
        for i in range(1, 8)
    )
    onnx.save(proto, path)
    return path


def _op_rows(text: str) -> list[str]:
    """The op column of the per-op table (the rows under its rule, up to a blank line)."""
    lines = text.split("placement per op")[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("─")) + 1
    rows = []
    for line in lines[start:]:
        if not line.strip():
            break
        rows.append(line.split()[0])
    return rows


def test_report_groups_decisions_and_lists_only_what_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _many_reshapes(tmp_path)
    args = ("report", str(path), "--ep", "cuda", "--ort-version", "1.24")
    text = _stdout(capsys, *args)
    decision_lines = [line for line in text.splitlines() if "Reshape-24" in line]
    # One group for the eight nodes: count, op, decision, example names; the reason below,
    # wrapped at 100 columns with no kernel range broken.
    assert len(decision_lines) == 1, text
    assert decision_lines[0].split()[:4] == ["8", "x", "Reshape-24:", "lower"]
    assert "reshape0, reshape1, reshape2, ..." in decision_lines[0]
    assert max(len(line) for line in text.splitlines()[1:]) <= 100, text
    reason = text.split(decision_lines[0], 1)[1]
    assert "(registered: [1, 4], [5, 12], [13, 13], [14, 18], [19, 20], [21, 22], 23+)" in reason
    assert _op_rows(text) == ["Reshape"]
    everything = _stdout(capsys, *args, "--all")
    assert _op_rows(everything) == ["Relu", "Reshape"]
    # Not a terminal: no colour codes.
    assert "\x1b[" not in text + everything


def test_report_text_unchanged_placement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _opset24_decoder_like(tmp_path)
    lowered = tmp_path / "m23.onnx"
    assert main(["-q", "lower", str(path), "-o", str(lowered), "--target-opset", "23"]) == 0
    text = _stdout(capsys, "report", str(lowered), "--ep", "cuda", "--ort-version", "1.24")
    assert text.splitlines()[0].startswith("m23.onnx: opset 23 kept on CUDA")
    assert "placement per op: unchanged (--all lists every op)" in text
    assert "decisions" not in text  # no node falls back: nothing to decide


def test_report_webgpu_stdout_holds_the_report_alone(tmp_path: Path, webgpu: None) -> None:
    path = _opset24_decoder_like(tmp_path)
    result = _run("report", str(path), "--ep", "webgpu")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("m.onnx: opset 24 ")
    assert "on WebGPU (ORT " in result.stdout.splitlines()[0]
    # What ORT and the Vulkan driver print while the EP is probed never reaches stdout,
    # and reaches stderr only with -v: no ANSI colour codes in a file or pipe.
    for noise in ("Warning:", "[W:onnxruntime", "INFO ", "WARNING "):
        assert noise not in result.stdout, result.stdout
        assert noise not in result.stderr, result.stderr
    assert "\x1b" not in result.stdout + result.stderr
    verbose = _run("-v", "report", str(path), "--ep", "webgpu")
    assert "onnxruntime" in verbose.stderr and "\x1b" not in verbose.stderr, verbose.stderr


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_optimize_writes_the_model_and_a_fusion_report(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    import json

    import jsonschema

    from onnxscript_ep_passes.cli.optimize import report_schema
    from tests.torch_models import llm_export

    # a binding window (mistral_w4): WebGPU's GroupQueryAttention is exact there, so the
    # fusion passes its check on the real EP where it loads (test_optimize_webgpu.py)
    source = tmp_path / "mistral.onnx"
    onnx.save(llm_export("mistral_w4", 24), source)
    out, report = tmp_path / "out.onnx", tmp_path / "fusions.json"
    argv = ["optimize", str(source), "-o", str(out), "--ep", "webgpu"]
    argv += ["--ort-version", "1.32.0", "--max-length", "64", "--report-json", str(report)]
    argv += ["--allow-padding-differences"]
    assert main(argv) == 0
    printed = capfd.readouterr()
    # One summary of the whole pipeline; no inner step's intermediate state on stderr.
    summary, wrote = printed.out.splitlines()
    assert summary.startswith("mistral.onnx: opset 24 ") and " nodes fused (4 GroupQuery" in summary
    assert " on WebGPU (ORT 1.32.0" in summary and "Memcpy " in summary, summary
    assert wrote == f"wrote {out}"
    for inner in ("nothing to do", "fall back to CPU", "fused at opset", "Registered"):
        assert inner not in printed.err, printed.err
    ops = {(n.domain, n.op_type) for n in onnx.load(str(out)).graph.node}
    assert ("com.microsoft", "GroupQueryAttention") in ops
    data = json.loads(report.read_text())
    jsonschema.validate(data, report_schema())
    assert data["measured"] is False and data["candidates"] == []
    assert data["allow_padding_differences"] is True
    kept = {f["pattern"]: f for f in data["fusions"] if f["kept"]}
    assert kept["group_query_attention"]["count"] == 4
    assert kept["group_query_attention"]["max_abs_diff"] < 1e-3
    # the table predicts one Memcpy more than WebGPU sessions have (2: the padding bias)
    assert data["predicted_after"]["memcpy"] <= 3


def test_lowest_opset_bounds_the_search_of_report_and_lower(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import jsonschema

    from onnxscript_ep_passes.reports.report import report_schema

    path = tmp_path / "decoder.onnx"
    benchmark_decoder(path)  # its full search on CUDA 1.24 weighs 24 down to 18
    bound = ("--ep", "cuda", "--ort-version", "1.24", "--lowest-opset", "23")
    report = json.loads(_stdout(capsys, "report", str(path), *bound, "--json"))
    jsonschema.validate(report, report_schema())
    assert report["lowest_opset"] == 23
    assert {c["opset"] for c in report["candidates"]} == {24, 23}
    # Released CUDA 1.24 has no Attention kernel: 23 with the Attention expanded is chosen.
    assert {k: report["chosen"][k] for k in ("opset", "legalized")} == {
        "opset": 23,
        "legalized": True,
    }
    text = _stdout(capsys, "report", str(path), *bound)
    assert "opsets below 23 were not weighed (--lowest-opset 23)" in text
    full = json.loads(_stdout(capsys, "report", str(path), *bound[:4], "--json"))
    assert full["lowest_opset"] == 18 and min(c["opset"] for c in full["candidates"]) == 18
    assert "were not weighed" not in _stdout(capsys, "report", str(path), *bound[:4])
    out = tmp_path / "out.onnx"
    assert main(["-q", "lower", str(path), "-o", str(out), *bound]) == 0
    assert [o.version for o in onnx.load(out).opset_import if o.domain == ""] == [23]
    # Out of range, contradicting --target-opset, or without --ep: usage errors, nothing written.
    for args, message in (
        (("report", str(path), "--ep", "cuda", "--lowest-opset", "17"), "is below 18"),
        (
            ("lower", str(path), "-o", str(tmp_path / "x.onnx"), *bound, "--target-opset", "22"),
            "target_opset 22 is below lowest_opset 23",
        ),
        (
            ("lower", str(path), "-o", str(tmp_path / "x.onnx"), "--target-opset", "23",
             "--lowest-opset", "23"),
            "--lowest-opset need --ep",
        ),
    ):  # fmt: skip
        result = _run(*args)
        assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "x.onnx").exists()


# -- bad option values: a usage error naming the option, on every command ------------------

_LOWER = ["lower", "{m}", "-o", "{o}"]
_LOWER_EP = [*_LOWER, "--ep", "cuda"]
_REPORT = ["report", "{m}", "--ep", "cuda"]
_OPTIMIZE = ["optimize", "{m}", "-o", "{o}", "--ep", "cuda"]

# (command, the bad option and value, the option argparse names)
BAD_OPTIONS = [
    *(
        (command, ["--target-opset", value], "--target-opset")
        for command in (_LOWER, _REPORT, _OPTIMIZE)
        for value in ("0", "-1", "17", "99", "x", "")
    ),
    *(
        (command, ["--lowest-opset", value], "--lowest-opset")
        for command in (_LOWER_EP, _REPORT, _OPTIMIZE)
        for value in ("-1", "17", "99", "1.5")
    ),
    *((_OPTIMIZE, ["--max-length", value], "--max-length") for value in ("-1", "0", "x")),
    *(
        (command, ["--dims", value], "--dims")
        for command in (_LOWER_EP, _REPORT, _OPTIMIZE)
        for value in ("batch=-1", "garbage", "batch=0", "=3")
    ),
    *(
        (command, ["--ort-version", value], "--ort-version")
        for command in (_LOWER_EP, _REPORT, _OPTIMIZE)
        for value in ("banana", "", "1.24; rm -rf")
    ),
    *(
        ([*command[:-2], "--ep", value], [], "--ep")
        for command in (_LOWER_EP, _REPORT, _OPTIMIZE)
        for value in ("", "bogus", "cuda\x1b[2J")
    ),
    (["lower", "", "-o", "{o}", "--target-opset", "23"], [], "model"),
    (["report", "", "--ep", "cuda"], [], "model"),
    (["optimize", "", "-o", "{o}", "--ep", "cuda"], [], "model"),
    (["lower", "{m}", "-o", "", "--target-opset", "23"], [], "-o/--output"),
    (["optimize", "{m}", "-o", "", "--ep", "cuda"], [], "-o/--output"),
    (_LOWER_EP, ["--report-json", ""], "--report-json"),
    (_OPTIMIZE, ["--report-json", ""], "--report-json"),
    (_REPORT, ["--kernel-table", ""], "--kernel-table"),
    (_LOWER_EP, ["--kernel-table", ""], "--kernel-table"),
]


@pytest.mark.parametrize(
    ("command", "option", "named"),
    BAD_OPTIONS,
    ids=[f"{c[0]}-{n}-{(o or c[-1:])[-1]!r}" for c, o, n in BAD_OPTIONS],
)
def test_a_bad_option_value_is_a_usage_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], option: list[str],
    named: str,
) -> None:  # fmt: skip
    """``--target-opset 0`` exited 1 and ``optimize --max-length -1`` was accepted. Every
    bad value is refused by the parser (exit 2, the option named) before any file is read:
    the model given here does not exist, and nothing is written."""
    argv = [a.format(m=tmp_path / "absent.onnx", o=tmp_path / "o.onnx") for a in command]
    with pytest.raises(SystemExit) as exit_:
        main(["-q", *argv, *option])
    assert exit_.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and f"argument {named}: " in errors[0], errors
    assert "Traceback" not in errors[0] and "\x1b" not in errors[0]
    assert list(tmp_path.iterdir()) == []
