"""display.shown: terminal escapes in a stranger's model never reach the terminal.

Node, graph, function, domain and value names carry ESC, BEL, CSI, OSC and C1 control
characters. Through ``lower`` (its refusal, its verdict, its logs at ``-v``), ``report``
(text) and ``optimize``, everything printed on stdout and stderr shows them escaped
(:func:`onnxscript_ep_passes.core.display.shown`); ``report --json`` keeps the exact strings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from onnxscript_ep_passes.core.display import shown, shown_lines
from tests.harness import make_model

HOSTILE = "n\x1b]0;PWNED\x07\x1b[2J\x9b31m\u202e\x00end"
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\x00")


def test_shown_escapes_every_control_character() -> None:
    assert shown(HOSTILE) == "n\\x1b]0;PWNED\\x07\\x1b[2J\\x9b31m\\u202e\\x00end"
    assert shown("a\nb\tc") == "a\\x0ab\\x09c"
    assert shown_lines("line one\nline \x1b two") == "line one\nline \\x1b two"
    assert shown("Résumé 注意") == "Résumé 注意"  # letters stay


def _hostile_model(*, refuse: bool) -> onnx.ModelProto:
    """A Reshape-24 (CUDA 1.24 has only Reshape 23+) named and wired with hostile names,
    a call of a model-local function in a hostile domain, in a hostile graph; with
    ``refuse`` also a Cast to float8e8m0, which cannot be lowered to 23."""
    domain = f"evil.{HOSTILE}"
    function = oh.make_function(
        domain,
        f"f{HOSTILE}",
        ["a"],
        ["b"],
        [oh.make_node("Relu", ["a"], ["b"], name=f"inner{HOSTILE}")],
        [oh.make_opsetid("", 24)],
    )
    value = f"v{HOSTILE}"
    nodes = [
        oh.make_node(f"f{HOSTILE}", ["x"], [value], name=f"call{HOSTILE}", domain=domain),
        oh.make_node("Reshape", [value, "shape"], ["y"], name=HOSTILE),
    ]
    outputs = [oh.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])]
    if refuse:
        nodes.append(
            oh.make_node("Cast", ["y"], ["z"], name=f"cast{HOSTILE}", to=TensorProto.FLOAT8E8M0)
        )
        outputs.append(oh.make_tensor_value_info("z", TensorProto.FLOAT8E8M0, [3, 4]))
    shape = numpy_helper.from_array(np.array([3, 4], np.int64), "shape")
    model = make_model(
        nodes,
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
        outputs,
        24,
        initializers=[shape],
        functions=[function],
        extra_opsets={domain: 1},
        name=f"graph{HOSTILE}",
    )
    model.doc_string = f"doc{HOSTILE}"
    onnx.checker.check_model(model, full_check=True)
    return model


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "onnxscript_ep_passes", *args]
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(command, capture_output=True, text=True, check=False, env=env)


def _assert_escaped(result: subprocess.CompletedProcess[str]) -> str:
    printed = result.stdout + result.stderr
    for raw in RAW:
        assert raw not in printed, (raw, printed)
    return printed


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("hostile")
    paths = {}
    for refuse in (False, True):
        path = folder / ("refused.onnx" if refuse else "hostile.onnx")
        onnx.save(_hostile_model(refuse=refuse), path)
        paths["refused" if refuse else "hostile"] = path
    return paths


def test_lower_refusal_names_the_node_escaped(models: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "o.onnx"
    result = _run("lower", str(models["refused"]), "-o", str(out), "--target-opset", "23")
    assert result.returncode == 3, result.stderr
    printed = _assert_escaped(result)
    assert f"node 'cast{shown(HOSTILE)}' (Cast-24" in printed
    assert not out.exists()


@pytest.mark.parametrize("verbose", [[], ["-vv"]])
def test_lower_for_an_ep_prints_and_logs_escaped(
    models: dict[str, Path], tmp_path: Path, verbose: list[str]
) -> None:
    out = tmp_path / "o.onnx"
    args = ["lower", str(models["hostile"]), "-o", str(out), "--ep", "cuda"]
    result = _run(*verbose, *args, "--ort-version", "1.24")
    assert result.returncode == 0, result.stderr
    printed = _assert_escaped(result)
    if verbose:  # the per-node DEBUG lines name the hostile nodes, escaped
        assert shown(HOSTILE) in printed, printed
    lowered = onnx.load(out)
    assert lowered.graph.node[-1].name == HOSTILE  # the model keeps its exact names


def test_report_text_escaped_and_json_exact(models: dict[str, Path]) -> None:
    args = ["report", str(models["hostile"]), "--ep", "cuda", "--ort-version", "1.24"]
    text = _run(*args)
    assert text.returncode == 0, text.stderr
    printed = _assert_escaped(text)
    assert shown(HOSTILE) in printed  # the decisions name the Reshape
    data = _run(*args, "--json")
    assert data.returncode == 0, data.stderr
    report = json.loads(data.stdout)
    names = {n["name"] for n in report["before"]["nodes"]}
    assert HOSTILE in names and report["decisions"][0]["node"] == HOSTILE


def test_optimize_escaped(models: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "o.onnx"
    args = ["-v", "optimize", str(models["hostile"]), "-o", str(out), "--ep", "cuda"]
    result = _run(*args, "--ort-version", "1.24", "--no-fuse")
    assert result.returncode == 0, result.stderr
    _assert_escaped(result)


def test_an_op_type_and_ort_errors_quoting_it_are_escaped(tmp_path: Path) -> None:
    """An op with no schema is refused by lower (exit 3) and fails ORT's session, whose
    error the report quotes: every quote of it is escaped."""
    node = oh.make_node(f"Op{HOSTILE}", ["x"], ["y"], name=f"bad{HOSTILE}")
    graph = oh.make_graph(
        [node],
        f"g{HOSTILE}",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    path = tmp_path / "op.onnx"
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)]), path)
    refused = _run("lower", str(path), "-o", str(tmp_path / "o.onnx"), "--target-opset", "23")
    assert refused.returncode == 3
    assert f"(Op{shown(HOSTILE)}-24" in _assert_escaped(refused)
    report = _run("report", str(path), "--ep", "cuda", "--ort-version", "1.24")
    assert report.returncode == 0, report.stderr
    printed = _assert_escaped(report)
    assert "does not run on ORT's CPU EP" in printed and f"bad{shown(HOSTILE)}" in printed
