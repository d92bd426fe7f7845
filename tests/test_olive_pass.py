"""A real Olive (olive-ai 0.13) workflow runs the pass on a tiny torch export (inline
weights, and external data: the output's weights must be written beside it).

The workflow's accelerator spec names the EP (CUDA, ORT 1.24's shipped kernel table: no
GPU needed, since the workflow evaluates nothing on the target); the output model is
checked for its opset, the checker, its predicted placement on that EP and its outputs
against the input's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.ep import get_table, predict_placement
from tests.harness import run_model
from tests.torch_models import export_proto, sample_inputs

os.environ.setdefault("OLIVE_DISABLE_TELEMETRY", "1")  # before Olive is imported
olive = pytest.importorskip("olive", reason="olive-ai is needed (pip install -e .[olive])")

pytestmark = [
    pytest.mark.torch,
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]


def _workflow(model: Path, output_dir: Path, cache_dir: Path) -> dict[str, object]:
    """The workflow of docs/olive.md, pointed at ``model``."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "olive.md").read_text()
    config = json.loads(text.split("```json\n", 1)[1].split("```", 1)[0])
    config["input_model"]["model_path"] = str(model)
    config["output_dir"] = str(output_dir)
    config["cache_dir"] = str(cache_dir)
    return config


@pytest.mark.parametrize("weights", ["inline", "external"])
def test_olive_workflow_lowers_for_the_accelerator_spec_ep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, weights: str
) -> None:
    from onnxscript_ep_passes.olive_pass import run_workflow

    monkeypatch.setenv("OLIVE_DISABLE_TELEMETRY", "1")
    source = tmp_path / "model" / "cnn24.onnx"
    source.parent.mkdir()
    if weights == "external":  # docs/olive.md's workflow on model.onnx + model.onnx.data
        onnx.save(export_proto("cnn", 24), source, save_as_external_data=True, size_threshold=0)
    else:
        onnx.save(export_proto("cnn", 24), source)
    original = onnx.load(source)  # with its weights, before the workflow runs
    output_dir = tmp_path / "out"
    run_workflow(_workflow(source, output_dir, tmp_path / "cache"))

    (lowered_path,) = output_dir.rglob("*.onnx")
    if weights == "external":
        # The weights are written beside the output model: it loads and runs with the
        # input's folder gone (Olive's output once pointed at the input's data file).
        header = onnx.load(lowered_path, load_external_data=False)
        locations = {
            entry.value
            for tensor in header.graph.initializer
            for entry in tensor.external_data
            if entry.key == "location"
        }
        assert locations and all((lowered_path.parent / loc).is_file() for loc in locations)
        for path in source.parent.iterdir():
            path.unlink()
        source.parent.rmdir()
    lowered = onnx.load(lowered_path)
    assert [o.version for o in lowered.opset_import if o.domain == ""] == [21]
    onnx.checker.check_model(str(lowered_path), full_check=True)
    table = get_table("cuda", "1.24")
    before = predict_placement(ir.from_proto(original), table)
    after = predict_placement(ir.load(lowered_path), table)
    assert before.fallback_nodes and before.memcpy  # opset 24: MaxPool-22, Transpose...
    assert not after.fallback_nodes and after.memcpy == 0
    feeds = sample_inputs("cnn")
    expected, _ = run_model(original, feeds)
    actual, _ = run_model(lowered, feeds)
    np.testing.assert_allclose(actual[0], expected[0], rtol=1e-5, atol=1e-6)
    # The package config written for `olive run --package-config` names this pass's module.
    written = subprocess.run(
        [sys.executable, "-m", "onnxscript_ep_passes.olive_pass"],
        capture_output=True,
        text=True,
        check=True,
    )
    entry = json.loads(written.stdout)["passes"]["LowerOpsetForEp"]
    assert entry["module_path"] == "onnxscript_ep_passes.olive_pass.LowerOpsetForEp"
    # The verdict travels with the model in Olive's model config.
    attributes = json.loads((output_dir / "model_config.json").read_text())["config"]
    assert attributes["model_attributes"]["ep_lowering"].startswith(
        "opset 24 -> 21 on CUDA (ORT 1.24, snapshot cuda-ort-1.24): Memcpy "
    )
