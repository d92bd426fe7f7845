"""The EP search's options work alike on ``lower``, ``report`` and ``optimize``.

Each command is given the same shared options (:func:`onnxscript_ep_passes.cli.options.
search_arguments`): a ``--kernel-table`` file for an EP without a shipped table, a
``--lowest-opset`` bound and ``--dims``, on a real model, and its verdict line says what
each did.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from onnxscript_ep_passes.cli import main

# Reshape has a kernel at since_version 21 (opset 21..22) only; Relu at 14 and later.
_TSV = "domain\top\tstart\tend\nai.onnx\tReshape\t21\t22\nai.onnx\tRelu\t14\tinf\n"
COMMANDS = ("lower", "report", "optimize")


def _model(tmp_path: Path) -> Path:
    """Reshape -> Relu at opset 24 on a ``batch`` x 6 input (Reshape-24: no kernel)."""
    shape = numpy_helper.from_array(np.array([-1, 3], np.int64), "shape")
    graph = oh.make_graph(
        [
            oh.make_node("Relu", ["x"], ["a"], name="relu0"),
            oh.make_node("Reshape", ["a", "shape"], ["r"], name="reshape"),
            oh.make_node("Relu", ["r"], ["y"], name="relu"),
        ],
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
        initializer=[shape],
    )
    path = tmp_path / "m.onnx"
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)]), path)
    return path


def _table(tmp_path: Path) -> Path:
    path = tmp_path / "made-up.tsv"
    path.write_text(_TSV, encoding="utf-8")
    return path


def _verdict(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    model, out = _model(tmp_path), tmp_path / f"{command}-out.onnx"
    argv = [command, str(model), "--ep", "tensorrt", "--kernel-table", str(_table(tmp_path))]
    argv += ["--no-run"] if command == "report" else ["-o", str(out)]
    assert main([*argv, *extra]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if " on TensorRT (" in line]
    assert lines, f"no verdict from {command}"
    return lines[0]


def _copied_bytes(line: str) -> str:
    """The bytes the model as given copies per run, from ``Memcpy a -> b (X -> Y per run)``."""
    found = re.search(r"Memcpy \d+ -> \d+ \((.+?) -> .+? per run\)", line)
    assert found, line
    return found.group(1)


@pytest.mark.parametrize("command", COMMANDS)
def test_kernel_table_file(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _verdict(command, tmp_path, capsys)
    # Reshape-21 has a kernel in the file: opset 22, the highest that reaches it.
    assert "opset 24 -> 22" in line, line
    assert f"file:{tmp_path / 'made-up.tsv'}" in line, line


@pytest.mark.parametrize("command", COMMANDS)
def test_lowest_opset(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _verdict(command, tmp_path, capsys, "--lowest-opset", "23")
    assert "opset 24 kept" in line, line  # 22 may not be weighed, and 23 gains nothing


@pytest.mark.parametrize("command", COMMANDS)
def test_dims(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small = _copied_bytes(_verdict(command, tmp_path, capsys, "--dims", "batch=1"))
    large = _copied_bytes(_verdict(command, tmp_path, capsys, "--dims", "batch=1000"))
    # The same figures from each command: the copies of x (batch x 6) and of the Reshape's
    # output (its symbolic "n" at the default 128), priced with the user's batch.
    assert (small, large) == ("1.6 kB", "25.5 kB")


@pytest.mark.parametrize("command", COMMANDS)
def test_an_ep_without_a_table_names_both_options(
    command: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    argv = [command, str(_model(tmp_path)), "--ep", "tensorrt"]
    argv += ["--no-run"] if command == "report" else ["-o", str(tmp_path / "o.onnx")]
    assert main(argv) == 1
    assert "--kernel-table FILE" in caplog.text and "--measure" in caplog.text, caplog.text
