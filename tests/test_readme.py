"""README.md runs as written.

Every ```python block runs in a fresh namespace, and every ```bash block under bash with
``set -e``, in order, in a directory laid out like the checkout after the README's first
command (``out/example.onnx`` built, ``.venv`` and ``examples`` linked in). Blocks that set
up the environment (``tools/setup.sh``, ``pip install``) are not run here: CI runs the
set-up, and ``tests/test_example.py`` the first command's lowering.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import checkout_like, fenced_blocks

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SETUP = ("tools/setup.sh", "pip install")

pytestmark = [
    pytest.mark.torch,
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]


def readme_blocks() -> list[tuple[str, str]]:
    """``(language, code)`` of each fenced block of the README, in order."""
    return fenced_blocks(README)


def test_readme_starts_with_the_two_commands() -> None:
    blocks = readme_blocks()
    assert blocks[0][0] == "bash" and "tools/setup.sh" in blocks[0][1]
    assert "onnxscript-ep-passes lower out/example.onnx" in blocks[0][1]
    assert blocks[1] == ("bash", "bash tools/setup.sh && .venv/bin/python -m pytest -q\n")


def test_readme_blocks_run_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    checkout_like(tmp_path)
    monkeypatch.chdir(tmp_path)
    ran = {"python": 0, "bash": 0}
    samples: list[str] = []
    printed: list[str] = []
    for language, code in readme_blocks():
        if language == "python":
            exec(compile(code, f"README.md python block {ran['python'] + 1}", "exec"), {})
        elif language == "" and code.startswith("example.onnx: "):
            samples.append(code.strip())
            continue
        elif language == "bash" and not any(s in code for s in SETUP):
            result = subprocess.run(
                ["bash", "-e", "-c", code],
                cwd=tmp_path,
                env={**os.environ, "PATH": f"{Path(sys.prefix) / 'bin'}:{os.environ['PATH']}"},
                capture_output=True,
                text=True,
                check=False,
            )
            assert result.returncode == 0, f"{code}\n{result.stdout}\n{result.stderr}"
            printed += result.stdout.splitlines()
        else:
            continue
        ran[language] += 1
    assert ran["python"] >= 4 and ran["bash"] >= 2, ran
    assert "Cannot lower model" in capsys.readouterr().out  # the DowngradeError example
    for written in ("example-23.onnx", "example-cuda.onnx", "block-cuda.onnx", "llama24.onnx"):
        assert (tmp_path / "out" / written).exists(), written
    assert not (tmp_path / "out" / "unchanged.onnx").exists()  # nothing to do
    # The sample verdict is what the README's report command printed.
    assert samples and all(sample in printed for sample in samples), (samples, printed)
