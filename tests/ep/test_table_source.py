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
    choice = lowering(model).choice
    assert choice is not None and choice.table_source.startswith("file:")
    assert choice.chosen_opset == 22  # Reshape-21 has a kernel; ties go to the higher opset
    assert model.opset_imports[""] == 22


def _chain_at_25() -> ir.Model:
    graph = oh.make_graph(
        [
            oh.make_node("Transpose", ["x"], ["t"], name="transpose", perm=[1, 0]),
            oh.make_node("Relu", ["t"], ["y"], name="relu"),
        ],
        "chain",
        [oh.make_tensor_value_info("x", 1, ["batch", 8])],
        [oh.make_tensor_value_info("y", 1, [8, "batch"])],
    )
    return ir.from_proto(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 25)]))


def test_measuring_an_ep_that_cannot_load_here_is_a_clear_error() -> None:
    model = _chain_at_25()
    with pytest.raises(ValueError, match="--measure needs a session on OpenVINOExecutionProvider"):
        LowerOpsetForEpPass("openvino", measure=True)(model)
    assert model.opset_imports[""] == 25  # untouched


def test_without_a_table_measuring_runs_every_reachable_opset(webgpu: None) -> None:
    table = resolve_table("webgpu", kernel_table=None, measure=True)
    assert table.source != MEASURED_ONLY  # WebGPU lists its kernels here: use an empty one
    empty = type(table).from_rows(table.ep, table.ort_version, MEASURED_ONLY, [])
    model = _chain_at_25()
    lowering = LowerOpsetForEpPass("webgpu", table=empty, measure=True, dims={"batch": 2})
    choice = lowering(model).choice
    assert choice is not None and not choice.legalized_predictions
    assert set(choice.measured) == {(o, False) for o in range(18, 26)}
    fastest = min(choice.measured, key=lambda k: choice.measured[k].latency_ms)
    assert (choice.chosen_opset, False) == fastest
    assert choice.measured[(25, False)].memcpy > 0 and choice.measured[(24, False)].memcpy == 0
