"""Kernel tables from a user's file, and the error for an EP with no table at all."""

from __future__ import annotations

from pathlib import Path

import onnx.helper as oh
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.ep.table_source import MEASURED_ONLY, read_kernel_table, resolve_table
from onnxscript_ep_passes.passes import LowerOpsetForEpPass

_TSV = "# kernels of a made-up EP\ndomain\top\tstart\tend\nai.onnx\tReshape\t21\t22\nai.onnx\tRelu\t14\tinf\n"


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "tensorrt.tsv"
    path.write_text(_TSV, encoding="utf-8")
    return path


def test_read_kernel_table(tmp_path: Path) -> None:
    table = read_kernel_table(_file(tmp_path), "tensorrt", "1.24")
    assert table.ep == "TensorrtExecutionProvider"
    assert table.source == f"file:{tmp_path / 'tensorrt.tsv'}"
    assert table.match("", "Reshape", 21) is not None
    assert table.match("", "Reshape", 24) is None


def test_bad_kernel_table_file_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text("op\tstart\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 1"):
        read_kernel_table(path, "OpenVINOExecutionProvider")


def test_an_ep_with_no_table_names_both_options() -> None:
    with pytest.raises(ValueError, match="--kernel-table FILE") as info:
        resolve_table("OpenVINOExecutionProvider")
    assert "--measure" in str(info.value)
    assert resolve_table("openvino", measure=True).source == MEASURED_ONLY


def test_the_pass_uses_a_kernel_table_file(tmp_path: Path) -> None:
    graph = oh.make_graph(
        [
            oh.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
            oh.make_node("Relu", ["r"], ["y"], name="relu"),
        ],
        "g",
        [
            oh.make_tensor_value_info("x", 1, [2, 3]),
            oh.make_tensor_value_info("shape", 7, [2]),
        ],
        [oh.make_tensor_value_info("y", 1, [3, 2])],
    )
    model = ir.from_proto(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)]))
    lowering = LowerOpsetForEpPass("tensorrt", kernel_table=_file(tmp_path))
    lowering(model)
    choice = lowering.last_choice
    assert choice is not None and choice.table_source.startswith("file:")
    assert choice.chosen_opset == 22  # Reshape-21 has a kernel; ties go to the higher opset
    assert model.opset_imports[""] == 22
