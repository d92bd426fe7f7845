"""Kernel tables from a user's file, and the error for an EP with no table at all."""

from __future__ import annotations

import os
from pathlib import Path

import onnx.helper as oh
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.ep.kernel_table import TableKind
from onnxscript_ep_passes.ep.snapshots import available_snapshots, load_snapshot
from onnxscript_ep_passes.ep.table_source import (
    MAX_TABLE_BYTES,
    MEASURED_ONLY,
    read_kernel_table,
    resolve_table,
)
from onnxscript_ep_passes.errors import EXIT_BAD_INPUT
from onnxscript_ep_passes.passes import LowerOpsetForEpPass
from tests.harness import run_cli

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


_HEADER = "domain\top\tstart\tend\n"
_TYPED = "domain\top\tstart\tend\ttype_constraints\n"

# name -> (the file's contents, the words after "kernel table '<path>': ")
BAD_TABLES: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "empty file (0 bytes)"),
    "header-only": (_HEADER.encode(), "the table lists no kernels"),
    "comments-only": (b"# nothing here\n\n", "no header line"),
    "no-header": (b"ai.onnx\tRelu\t14\tinf\n", "line 1: expected the header"),
    "header-extra-column": (b"domain\top\tstart\tend\tnotes\n", "line 1: expected the header"),
    "not-utf8": (_HEADER.encode() + b"ai.onnx\tRe\xfflu\t14\tinf\n", "line 2: not UTF-8 text"),
    "binary": (b"\x00\x01\x02" * 100, "line 1: expected the header"),
    "too-few-cells": ((_HEADER + "ai.onnx\tRelu\t14\n").encode(), "line 2: 3 tab-separated"),
    "too-many-cells": ((_HEADER + "ai.onnx\tRelu\t14\tinf\tT=float\n").encode(), "line 2: 5"),
    "bad-domain": ((_HEADER + "ai..onnx\tRelu\t14\tinf\n").encode(), "line 2: domain"),
    "empty-domain": ((_HEADER + "\tRelu\t14\tinf\n").encode(), "line 2: domain ''"),
    "bad-op": ((_HEADER + "ai.onnx\tRe lu\t14\tinf\n").encode(), "line 2: op 'Re lu'"),
    "start-not-int": ((_HEADER + "ai.onnx\tRelu\tx\tinf\n").encode(), "line 2: start 'x'"),
    "start-zero": ((_HEADER + "ai.onnx\tRelu\t0\tinf\n").encode(), "line 2: start 0"),
    "start-negative": ((_HEADER + "ai.onnx\tRelu\t-3\tinf\n").encode(), "line 2: start '-3'"),
    "start-huge": ((_HEADER + "ai.onnx\tRelu\t99999999\tinf\n").encode(), "line 2: start"),
    "end-before-start": ((_HEADER + "ai.onnx\tRelu\t14\t13\n").encode(), "line 2: end 13"),
    "end-past-int-max": ((_HEADER + "ai.onnx\tRelu\t14\t9999999999\n").encode(), "end"),
    "types-not-key-value": ((_TYPED + "ai.onnx\tRelu\t14\tinf\tfloat\n").encode(), "KEY=TYPE"),
    "types-key-twice": (
        (_TYPED + "ai.onnx\tRelu\t14\tinf\tT=float;T=double\n").encode(),
        "'T' appears twice",
    ),
    "types-unknown": (
        (_TYPED + "ai.onnx\tRelu\t14\tinf\tT=tensor(floaty)\n").encode(),
        "unknown element type",
    ),
    "types-empty": ((_TYPED + "ai.onnx\tRelu\t14\tinf\tT=float||\n").encode(), "empty type"),
    "types-unbalanced": (
        (_TYPED + "ai.onnx\tRelu\t14\tinf\tT=seq(tensor(float)\n").encode(),
        "malformed type 'seq(tensor(float)'",
    ),
}


@pytest.mark.parametrize("case", list(BAD_TABLES))
def test_a_bad_kernel_table_is_one_line_naming_file_and_line(tmp_path: Path, case: str) -> None:
    contents, words = BAD_TABLES[case]
    path = tmp_path / "t.tsv"
    path.write_bytes(contents)
    with pytest.raises(ValueError) as info:
        read_kernel_table(path, "qnn", "1.24")
    message = str(info.value)
    assert message.startswith(f"kernel table '{path}': "), message
    assert words in message and "\n" not in message


def _not_a_file(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "dev-zero":
        return Path("/dev/zero")
    elif kind == "symlink-to-dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "too-large":
        with open(path, "wb") as file:
            file.truncate(MAX_TABLE_BYTES + 1)  # sparse: no disk used
    elif kind == "missing":
        pass
    return path


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("dev-zero", "not a regular file"),  # grew to 22.5 GB before
        ("symlink-to-dev-zero", "not a regular file"),
        ("fifo", "not a regular file"),  # never blocks waiting for a writer
        ("directory", "not a regular file"),
        (
            "too-large",
            f"16777217 bytes, more than a kernel table may hold ({MAX_TABLE_BYTES} bytes)",
        ),
        ("missing", "cannot read: No such file or directory"),
    ],
)
def test_a_kernel_table_is_read_only_from_a_regular_file_of_bounded_size(
    tmp_path: Path, kind: str, words: str
) -> None:
    path = _not_a_file(tmp_path, kind)
    with pytest.raises(ValueError) as info:
        read_kernel_table(path, "qnn", "1.24")
    assert str(info.value) == f"kernel table '{path}': {words}"


def test_the_shipped_tables_pass_the_row_checks() -> None:
    for info in available_snapshots():
        assert len(load_snapshot(info.name)) > 0  # parse_snapshot validates every row


def test_the_command_line_refuses_a_bad_kernel_table_before_the_model(tmp_path: Path) -> None:
    """``report --kernel-table /dev/zero`` ran out of memory; a bad row gave no file name.
    Now: exit 1, one line, in seconds, before the model is read (it does not exist here),
    and ``lower`` leaves nothing."""
    model = str(tmp_path / "absent.onnx")
    out = tmp_path / "out"
    out.mkdir()
    bad = tmp_path / "bad.tsv"
    bad.write_text(_HEADER + "ai.onnx\tRelu\t14\tinf\nai.onnx\tMatMul\t13\tlater\n")
    for table, words in (("/dev/zero", "not a regular file"), (str(bad), "line 3: end 'later'")):
        for argv in (
            ["report", model, "--ep", "qnn", "--kernel-table", table],
            ["lower", model, "-o", str(out / "o.onnx"), "--ep", "qnn", "--kernel-table", table],
        ):
            result = run_cli(*argv, timeout=60)
            assert result.returncode == EXIT_BAD_INPUT, result.stderr
            lines = result.stderr.splitlines()
            assert len(lines) == 1 and "Traceback" not in result.stderr, lines
            assert f"kernel table '{table}': {words}" in lines[0]
    assert not any(out.iterdir())


def test_an_ep_with_no_table_names_both_options() -> None:
    with pytest.raises(ValueError, match="--kernel-table FILE") as info:
        resolve_table("QNNExecutionProvider")
    assert "--measure" in str(info.value)
    assert resolve_table("qnn", measure=True).source == MEASURED_ONLY


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
    empty = type(table).from_rows(
        table.ep, table.ort_version, MEASURED_ONLY, [], kind=TableKind.NONE
    )
    model = _chain_at_25()
    lowering = LowerOpsetForEpPass("webgpu", table=empty, measure=True, dims={"batch": 2})
    choice = lowering(model).choice
    assert choice is not None and not choice.legalized_predictions
    assert set(choice.measured) == {(o, False) for o in range(18, 26)}
    fastest = min(choice.measured, key=lambda k: choice.measured[k].latency_ms)
    assert (choice.chosen_opset, False) == fastest
    assert choice.measured[(25, False)].memcpy > 0 and choice.measured[(24, False)].memcpy == 0
