"""The JSON report: its fields, validated against the schema shipped in the package."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.cli.program import main
from onnxscript_ep_passes.ep import KernelTable, TableKind, load_snapshot
from onnxscript_ep_passes.passes import choose_target_opset
from onnxscript_ep_passes.reports.report import (
    choice_report,
    format_report,
    placement_report,
    report_schema,
)
from tests.harness import reshape_chain

FLOAT = onnx.TensorProto.FLOAT


def _transpose_model(path: Path | None = None) -> onnx.ModelProto:
    """x[batch, 8] -> Transpose -> Relu at opset 25 (Transpose-25: no WebGPU kernel)."""
    graph = oh.make_graph(
        [
            oh.make_node("Transpose", ["x"], ["t"], name="transpose", perm=[1, 0]),
            oh.make_node("Relu", ["t"], ["y"], name="relu"),
        ],
        "chain",
        [oh.make_tensor_value_info("x", FLOAT, ["batch", 8])],
        [oh.make_tensor_value_info("y", FLOAT, [8, "batch"])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 25)])
    if path is not None:
        onnx.save(model, path)
    return model


_TABLE = KernelTable.from_rows(
    "WebGpuExecutionProvider",
    "1.32.0",
    "test",
    [("", "Transpose", 24, 24, None), ("", "Relu", 14, None, None)],
)


def test_report_fields_validate_against_the_schema() -> None:
    model = ir.from_proto(_transpose_model())
    report = placement_report(model, "webgpu", table=_TABLE, dims="batch=4", model_name="m.onnx")
    jsonschema.validate(report, report_schema())
    assert report["schema_version"] == 1 and report["model"] == "m.onnx"
    assert report["objective"]["kind"] == "estimate"
    assert report["objective"]["dims"] == {"batch": 4}
    assert {k: report["chosen"][k] for k in ("opset", "legalized")} == {
        "opset": 24,
        "legalized": False,
    }
    by_opset = {(c["opset"], c["legalized"]): c for c in report["candidates"]}
    source, lowered = by_opset[(25, False)], by_opset[(24, False)]
    # The CPU Transpose reads the graph input (the session copies feeds): one Memcpy of
    # its output, 4 x 8 floats, to the Relu on the EP.
    assert source["predicted"]["memcpy"] == 1
    assert source["predicted"]["memcpy_bytes"] == 4 * 8 * 4
    assert lowered["predicted"]["memcpy"] == lowered["predicted"]["fallback_nodes"] == 0
    assert lowered["predicted"]["cost"] < source["predicted"]["cost"]
    assert all(c["measured"] is None for c in report["candidates"])


def test_the_schema_rejects_a_missing_field() -> None:
    report = placement_report(ir.from_proto(_transpose_model()), "webgpu", table=_TABLE)
    del report["candidates"][0]["predicted"]["memcpy_bytes"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, report_schema())


def test_cli_report_json_and_lower_report_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], webgpu: None
) -> None:
    source = tmp_path / "chain.onnx"
    _transpose_model(source)
    assert main(["-q", "report", str(source), "--ep", "webgpu", "--json", "--measure"]) == 0
    report = json.loads(capsys.readouterr().out)
    jsonschema.validate(report, report_schema())
    assert report["model"] == str(source) and report["objective"]["kind"] == "measured"
    measured = {(c["opset"], c["legalized"]): c["measured"] for c in report["candidates"]}
    assert measured[(25, False)]["memcpy"] > 0 and measured[(24, False)]["memcpy"] == 0
    assert report["chosen"]["opset"] in (24, 25)

    out, written = tmp_path / "out.onnx", tmp_path / "report.json"
    args = ["-q", "lower", str(source), "-o", str(out), "--ep", "webgpu"]
    assert main([*args, "--dims", "batch=2", "--report-json", str(written)]) == 0
    lowered = json.loads(written.read_text(encoding="utf-8"))
    jsonschema.validate(lowered, report_schema())
    assert {k: lowered["chosen"][k] for k in ("opset", "legalized")} == {
        "opset": 24,
        "legalized": False,
    }
    assert lowered["objective"]["dims"] == {"batch": 2}


def test_cli_rejects_objective_options_without_an_ep(tmp_path: Path) -> None:
    source = tmp_path / "chain.onnx"
    _transpose_model(source)
    args = ["lower", str(source), "-o", str(tmp_path / "o.onnx"), "--target-opset", "24"]
    with pytest.raises(SystemExit) as usage:  # a usage error: argparse's exit status 2
        main([*args, "--measure"])
    assert usage.value.code == 2
    with pytest.raises(SystemExit) as usage:  # a bad --dims value: a usage error too
        main(["report", str(source), "--ep", "webgpu", "--dims", "batch"])
    assert usage.value.code == 2


def test_each_node_says_what_the_chosen_candidate_does_to_it() -> None:
    """Reshape-24 misses the table's Reshape [1, 23]: opset 23 wins. There the lowering
    replaces Swish-24 (new at 24, expanded through its body); the table has no Gelu at any
    version, so legalization expands it; the rest resolves at 23 (relabelled)."""
    from onnxscript_ep_passes.ep.kernel_table import KernelRange

    every = ("Sigmoid", "Mul", "Div", "Erf", "Add", "Relu", "CastLike", "Constant", "Sqrt")
    every += ("Tanh", "Pow", "Sub", "Sum", "Cast", "Identity")
    rows = {("", op): (KernelRange(1, 99, None),) for op in every}
    rows[("", "Reshape")] = (KernelRange(1, 23, None),)
    table = KernelTable("TestExecutionProvider", "0.0", "test", rows)
    shape = onnx.numpy_helper.from_array(np.array([4, 2], np.int64), "shape")
    graph = oh.make_graph(
        [
            oh.make_node("Swish", ["x"], ["s"], name="swish", alpha=1.0),
            oh.make_node("Gelu", ["s"], ["g"], name="gelu"),
            oh.make_node("Reshape", ["g", "shape"], ["r"], name="reshape"),
            oh.make_node("Relu", ["r"], ["y"], name="relu"),
        ],
        "g",
        [oh.make_tensor_value_info("x", FLOAT, [2, 4])],
        [oh.make_tensor_value_info("y", FLOAT, [4, 2])],
        [shape],
    )
    model = ir.from_proto(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)]))
    report = placement_report(model, "test", table=table)
    jsonschema.validate(report, report_schema())
    assert {k: report["chosen"][k] for k in ("opset", "legalized")} == {
        "opset": 23,
        "legalized": True,
    }, report["candidates"]
    nodes = report["before"]["nodes"]
    # Swish has no kernel even on CPU at 24: ORT inlines its body; those nodes are Swish's
    # (unnamed, as ORT names the nodes of a schema body it inlines).
    inlined = [n for n in nodes if n["name"] not in ("gelu", "reshape", "relu")]
    assert {n["op_type"] for n in inlined} <= {"Sigmoid", "Mul", "Constant", "CastLike", "Cast"}
    assert inlined and all(n["done"] == "replaced" for n in inlined), inlined
    done = {n["name"]: n["done"] for n in nodes if n not in inlined}
    assert done == {
        "gelu": "expanded_for_ep",
        "reshape": "relabelled",
        "relu": "relabelled",
    }, done
    (chosen,) = [c for c in report["candidates"] if c["opset"] == 23 and c["legalized"]]
    assert chosen["changes"] == {"relabelled": True, "nodes_replaced": 2, "expanded_for_ep": 1}
    assert all(n["done"] is None for n in report["after"]["nodes"])


def _read_back(report: dict[str, object]) -> dict[str, object]:
    """The report as a reader of its JSON gets it."""
    rebuilt: dict[str, object] = json.loads(json.dumps(report))
    jsonschema.validate(rebuilt, report_schema())
    return rebuilt


def test_a_report_read_back_from_json_keeps_the_table_kind_and_verdict() -> None:
    model = ir.from_proto(reshape_chain(24))
    choice = choose_target_opset(model, load_snapshot("cuda-ort-1.24"))
    rebuilt = _read_back(choice_report(model, choice, model_name="m.onnx"))
    assert rebuilt["table_kind"] == "snapshot"
    assert format_report(rebuilt).splitlines()[0] == choice.summary("m.onnx")
    assert "(ORT 1.24, snapshot cuda-ort-1.24)" in choice.summary()


def test_the_table_kind_is_a_value_never_read_from_the_source_text() -> None:
    """A caller's table whose source reads like a live listing is still a caller's table,
    and a live table is named so whatever its source says."""
    model = ir.from_proto(_transpose_model())
    rows = [("", "Transpose", 24, 24, None), ("", "Relu", 14, None, None)]
    ep, version = "WebGpuExecutionProvider", "1.32.0"
    caller = KernelTable.from_rows(ep, version, "live:get_all_opkernel_def", rows)
    live = KernelTable.from_rows(ep, version, "listed", rows, kind=TableKind.LIVE)
    assert caller.kind is TableKind.FILE and live.kind is TableKind.LIVE
    for table, kind, named in (
        (caller, "file", "(ORT 1.32.0, live:get_all_opkernel_def)"),
        (live, "live", "(ORT 1.32.0, live table)"),
    ):
        choice = choose_target_opset(model, table)
        assert named in choice.summary()
        rebuilt = _read_back(choice_report(model, choice))
        assert rebuilt["table_kind"] == kind
        assert format_report(rebuilt).splitlines()[0] == choice.summary("chain")


def test_the_schema_requires_the_table_kind() -> None:
    report = placement_report(ir.from_proto(_transpose_model()), "webgpu", table=_TABLE)
    assert report["table_kind"] == "file"
    for wrong in ("File", "live:get_all_opkernel_def", None):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**report, "table_kind": wrong}, report_schema())
    del report["table_kind"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, report_schema())
