"""The wheel built from this repository works outside the checkout.

The sources are copied to a temporary directory, a wheel is built there (no build
isolation: the dev extra pins setuptools), installed with ``pip --target`` into a clean
directory, and its console script runs ``report`` on a real model from a directory
outside the checkout, with the shipped kernel-table snapshots read from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import onnx

from tests.harness import reshape_chain

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src" / "onnxscript_ep_passes" / "ep" / "data"


def _build_wheel(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "src", source / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
    )
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("onnxscript_ep_passes-*.whl")
    return wheel


def test_wheel_carries_its_data_and_runs_report_outside_the_checkout(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(
            next(n for n in names if n.endswith(".dist-info/METADATA"))
        ).decode()
    shipped = {
        f"onnxscript_ep_passes/ep/data/{p.name}"
        for p in DATA.iterdir()
        if p.suffix in (".tsv", ".json")
    }
    assert shipped and shipped <= names
    assert "onnxscript_ep_passes/py.typed" in names
    assert "License-Expression: MIT" in metadata
    assert (
        "Project-URL: ORT tracking issue, https://github.com/microsoft/onnxruntime/issues/27729"
        in metadata
    )
    assert "Classifier: Typing :: Typed" in metadata

    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    model = reshape_chain(24)
    onnx.save(model, elsewhere / "model.onnx")
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run(
        [sys.executable, "-c", "import onnxscript_ep_passes as p; print(p.__file__)"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout
    script = site / "bin" / "onnxscript-ep-passes"
    args = ["report", "model.onnx", "--ep", "cuda", "--ort-version", "1.24"]
    result = subprocess.run(
        [sys.executable, str(script), *args, "--json"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["table_source"] == "snapshot:cuda-ort-1.24.tsv"
    assert (report["before"]["opset"], report["after"]["opset"]) == (24, 23)
    text = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert text.startswith("model.onnx: opset 24 -> 23 on CUDA (ORT 1.24, snapshot cuda-ort-1.24)")
