"""Every code block of docs/*.md runs as written (README.md's: tests/test_readme.py).

Rules, as for the README:

- each ```python block runs in a fresh namespace and each ```bash block under ``bash -e``,
  in the page's order, in a fresh directory laid out like the checkout after the README's
  first command (``out/example.onnx`` built; ``model.onnx``, the model a page's commands
  name, is the tiny Llama export for docs/ep.md and the example model for docs/olive.md);
- blocks that set up the environment (``pip install``, ``tools/setup.sh``) are not run;
- a ```json block is data: docs/olive.md's is written to ``workflow.json``, the file the
  page's commands read; docs/ep.md's sample report uses only fields report.schema.json
  defines, at the places it defines them;
- a page may hold no indented code block (it would escape this test).

The examples' scripts answer ``--help`` before any heavy import and write nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import onnx
import pytest

from onnxscript_ep_passes.reports.report import report_schema
from tests.harness import checkout_like, fenced_blocks

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SETUP = ("tools/setup.sh", "pip install")

pytestmark = [
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]


def _indented_blocks(path: Path) -> list[str]:
    """Indented code blocks: 4-space lines after a blank line, outside fences and lists."""
    found, fenced, previous = [], False, ""
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("    ") and not previous.strip() and line.strip():
            found.append(line)
        previous = line
    return found


def _schema_paths(sample: Any, schema: dict[str, Any], root: dict[str, Any], where: str) -> None:
    """Every key of ``sample`` is a property ``schema`` defines (recursively)."""
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        schema = target
    for option in schema.get("oneOf", ()):
        if isinstance(sample, dict) and option.get("type") == "object":
            schema = option
    if isinstance(sample, dict) and "properties" in schema:
        for key, value in sample.items():
            if key == "...":
                continue
            assert key in schema["properties"], f"{where}.{key} is not in report.schema.json"
            _schema_paths(value, schema["properties"][key], root, f"{where}.{key}")
    elif isinstance(sample, list) and "items" in schema:
        for item in sample:
            if item != "...":
                _schema_paths(item, schema["items"], root, f"{where}[]")


def _run_page(page: Path, cwd: Path) -> dict[str, int]:
    env = {**os.environ, "PATH": f"{Path(sys.prefix) / 'bin'}:{os.environ['PATH']}"}
    env["OLIVE_DISABLE_TELEMETRY"] = "1"
    ran = {"python": 0, "bash": 0, "json": 0}
    here = os.getcwd()
    os.chdir(cwd)
    try:
        for language, code in fenced_blocks(page):
            if any(s in code for s in SETUP):
                continue
            if language == "python":
                exec(compile(code, f"{page.name} python block {ran['python'] + 1}", "exec"), {})
            elif language == "bash":
                result = subprocess.run(
                    ["bash", "-e", "-c", code], env=env, capture_output=True, text=True
                )
                assert result.returncode == 0, f"{code}\n{result.stdout}\n{result.stderr}"
            elif language == "json" and page.name == "olive.md":
                (cwd / "workflow.json").write_text(code)
            elif language == "json":
                schema = report_schema()
                _schema_paths(json.loads(code), schema, schema, "report")
            else:
                raise AssertionError(f"{page.name}: a ```{language} block this test cannot run")
            ran[language] += 1
    finally:
        os.chdir(here)
    return ran


def test_every_page_is_covered_and_has_no_indented_code() -> None:
    pages = {p.name for p in DOCS.glob("*.md")}
    tested = {"lowering.md", "ep.md", "olive.md"}
    without_code = {p for p in pages if not fenced_blocks(DOCS / p)}
    assert pages == tested | without_code, pages
    for page in sorted(pages):
        assert not _indented_blocks(DOCS / page), (page, _indented_blocks(DOCS / page))


def test_lowering_md_runs(tmp_path: Path) -> None:
    ran = _run_page(DOCS / "lowering.md", checkout_like(tmp_path))
    assert ran["python"] == 1, ran


@pytest.mark.torch
def test_ep_md_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch", reason="docs/ep.md exports with torch")
    from tests.torch_models import llm_export

    cwd = checkout_like(tmp_path)
    onnx.save(llm_export("llama", 24), cwd / "model.onnx")
    ran = _run_page(DOCS / "ep.md", cwd)
    assert ran == {"python": 1, "bash": 1, "json": 1}, ran
    assert "opset 24 " in capsys.readouterr().out  # the torch snippet's verdict
    assert (cwd / "gate-cuda.onnx").exists() and (cwd / "model.webgpu.onnx").exists()
    assert json.loads((cwd / "fusions.json").read_text())["ep"] == "WebGpuExecutionProvider"


def test_olive_md_runs(tmp_path: Path) -> None:
    pytest.importorskip("olive", reason="docs/olive.md needs olive-ai (the olive extra)")
    cwd = checkout_like(tmp_path)
    for name in ("example.onnx", "example.onnx.data"):
        shutil.copy(cwd / "out" / name, cwd / name.replace("example", "model"))
    model = onnx.load(cwd / "model.onnx", load_external_data=False)
    for tensor in model.graph.initializer:  # the copy's data file has the copy's name
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "model.onnx.data"
    onnx.save(model, cwd / "model.onnx")
    ran = _run_page(DOCS / "olive.md", cwd)
    assert ran == {"python": 1, "bash": 1, "json": 1}, ran
    assert list((cwd / "olive-out").rglob("*.onnx"))


@pytest.mark.parametrize("script", ["export_tiny_llama.py", "make_example_model.py"])
def test_example_scripts_answer_help_without_heavy_imports(tmp_path: Path, script: str) -> None:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", str(ROOT / "examples" / script), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0 and result.stdout.startswith("usage: "), result
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()}
    assert not imported & {"torch", "transformers", "onnx", "numpy"}, sorted(imported)
    assert not list(tmp_path.iterdir())  # nothing written
