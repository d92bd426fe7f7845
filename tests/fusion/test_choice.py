"""``optimize --measure``: the fused and the unfused model measured on the real WebGPU EP.

One tiny export (Llama, 4 layers, opset 24; short sequences) keeps it cheap: both
candidates run in real sessions (lavapipe here), the report shows predicted vs measured
per candidate and validates against the shipped schema, and the model written is the
candidate reported as chosen.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import onnx
import pytest

from onnxscript_ep_passes.cli.optimize import report_schema
from onnxscript_ep_passes.cli.program import main
from tests.fusion import WEBGPU_EXPORT_MARKS
from tests.torch_models import llm_export

pytestmark = WEBGPU_EXPORT_MARKS


def test_measure_chooses_between_fused_and_unfused_on_webgpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a binding window: WebGPU's GroupQueryAttention is exact there (without one it is
    # wrong from 32 tokens on lavapipe and the verification drops it)
    source = tmp_path / "mistral.onnx"
    onnx.save(llm_export("mistral_w4", 24), source)
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    # -v: the lines per fusion and per candidate measured, after the verdict
    argv = ["-v", "optimize", str(source), "-o", str(out), "--ep", "webgpu", "--measure"]
    argv += ["--dims", "batch=1,sequence_length=8", "--max-length", "64"]
    argv += ["--allow-padding-differences"]  # WebGPU's GQA differs at padding positions
    assert main([*argv, "--report-json", str(report)]) == 0
    data = json.loads(report.read_text())
    jsonschema.validate(data, report_schema())
    assert data["measured"] is True
    candidates = {c["name"]: c for c in data["candidates"]}
    assert set(candidates) == {"fused", "unfused"}
    fused, unfused = candidates["fused"], candidates["unfused"]
    # fusing removes Memcpy nodes; the table predicts one for the padding bias that the
    # session does not have (3 predicted, 2 measured), so the prediction only ties
    assert fused["predicted"]["memcpy"] <= unfused["predicted"]["memcpy"]
    assert fused["measured"]["memcpy"] < unfused["measured"]["memcpy"]
    for candidate in (fused, unfused):
        assert candidate["measured"]["runs"] == 20
        assert 0 < candidate["measured"]["min_ms"] <= candidate["measured"]["median_ms"]
    chosen = data["chosen"]
    assert (
        candidates[chosen]["chosen"]
        and not candidates[({"fused", "unfused"} - {chosen}).pop()]["chosen"]
    )
    faster = min(candidates.values(), key=lambda c: c["measured"]["median_ms"])
    assert faster["name"] == chosen
    ops = {(n.domain, n.op_type) for n in onnx.load(str(out)).graph.node}
    assert (("com.microsoft", "GroupQueryAttention") in ops) == (chosen == "fused")
    shown = capsys.readouterr().out
    assert shown.startswith("mistral.onnx: opset 24 "), shown
    assert "candidate fused: predicted" in shown and "; measured" in shown
    assert "(chosen)" in shown
