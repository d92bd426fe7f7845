"""``report`` says when the model as given does not run, and which candidate repairs it,
from real ORT sessions (issue 25, item 6)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jsonschema
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.model_files.io import load_model
from onnxscript_ep_passes.reports.report import format_report, placement_report, report_schema
from tests.harness import reshape_chain

pytestmark = [
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


def test_a_model_that_runs_is_run_once() -> None:
    model = ir.from_proto(reshape_chain(24, 2))
    report = placement_report(model, "cuda", ort_version="1.24", check_runs=True)
    jsonschema.validate(report, report_schema())
    runs = report["runs"]
    assert runs["input"] == {"ok": True, "error": None} and runs["candidates"] == []
    assert runs["skipped"] is None
    assert "runs on ORT's CPU EP as given" in format_report(report)
    unchecked = placement_report(model, "cuda", ort_version="1.24")
    assert unchecked["runs"] is None


def test_weights_in_an_external_data_file_are_read(tmp_path: Path) -> None:
    path = tmp_path / "example.onnx"
    script = Path(__file__).resolve().parents[2] / "examples" / "make_example_model.py"
    subprocess.run([sys.executable, str(script), str(path)], check=True, capture_output=True)
    model = load_model(path)  # as the command line reads it: weights stay in example.onnx.data
    report = placement_report(model, "cuda", ort_version="1.24", check_runs=True)
    assert report["runs"]["input"] == {"ok": True, "error": None}, report["runs"]
    initializer = model.graph.initializers["wq"].const_value
    assert isinstance(initializer, ir.ExternalTensor)  # the caller's model is not loaded


@pytest.mark.torch
def test_opset23_rotary_export_fails_as_given_and_its_lowering_runs() -> None:
    from tests.torch_models import llm_export

    proto = llm_export("llama", 23)  # torch 2.13: RotaryEmbedding-23, dynamic batch
    assert any(n.op_type == "RotaryEmbedding" for n in proto.graph.node)
    model = ir.from_proto(proto)
    report = placement_report(
        model, "cuda", ort_version="1.24", check_runs=True, model_name="llama23.onnx"
    )
    jsonschema.validate(report, report_schema())
    runs = report["runs"]
    assert runs["dims"]["batch"] == 2
    assert not runs["input"]["ok"]
    assert (
        "'cos_cache' and 'sin_cache' are expected to have the same shape" in runs["input"]["error"]
    )
    by_opset = {(c["opset"], c["legalized"]): c for c in runs["candidates"]}
    # Opset 22 and below expand RotaryEmbedding through its ONNX function body: they run.
    assert by_opset[(21, False)]["ok"] and by_opset[(22, False)]["ok"], by_opset
    chosen = report["chosen"]
    assert by_opset[(chosen["opset"], chosen["legalized"])]["ok"]
    text = format_report(report)
    assert "the model as given does not run on ORT's CPU EP (batch=2" in text
    repaired = text.split("these candidates run", 1)[1].split("candidates (predicted")[0]
    assert "(chosen)" in repaired, text


def test_a_model_with_large_weights_is_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxscript_ep_passes.reports import run_check

    monkeypatch.setattr(run_check, "MAX_WEIGHT_BYTES", 8)  # the chain's shape is 16 bytes
    model = ir.from_proto(reshape_chain(24, 2))
    report = placement_report(model, "cuda", ort_version="1.24", check_runs=True)
    jsonschema.validate(report, report_schema())
    runs = report["runs"]
    assert runs["input"] == {"ok": None, "error": None} and runs["candidates"] == []
    assert runs["skipped"] == "not run: the weights are 16 B (over 8 B; --no-run skips this check)"
    assert runs["skipped"] in format_report(report)
