"""The README's first command: build the example model, lower it with the CLI, prove it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

from tests.harness import run_model

ROOT = Path(__file__).resolve().parents[1]


def test_example_model_lowers_exactly(tmp_path: Path) -> None:
    src = tmp_path / "example.onnx"
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "make_example_model.py"), str(src)], check=True
    )
    out = tmp_path / "example-opset23.onnx"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "onnxscript_ep_passes",
            "lower",
            str(src),
            "-o",
            str(out),
            "--target-opset",
            "23",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "example-opset23.onnx.data").exists()
    onnx.checker.check_model(str(out), full_check=True)
    lowered = onnx.load(out)
    assert [o.version for o in lowered.opset_import if o.domain == ""] == [23]
    assert not {"Swish"} & {n.op_type for n in lowered.graph.node}
    rng = np.random.default_rng(0)
    feeds = {
        "x": rng.standard_normal((2, 8, 64)).astype(np.float32),
        "seqlens": np.array([8, 5], dtype=np.int64),
    }
    # ORT rejects the original's Cast round_mode, so it runs on onnx.reference.
    expected, how = run_model(onnx.load(src), feeds, strict=False)
    actual, _ = run_model(lowered, feeds)
    np.testing.assert_allclose(
        actual[0].astype(np.float32),
        expected[0].astype(np.float32),
        rtol=2e-3,
        atol=2e-3,
        err_msg=how,
    )
