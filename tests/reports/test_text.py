"""The text report's rendering: colour only on a terminal, plain text otherwise."""

from __future__ import annotations

import io
import os
from pathlib import Path

import onnx_ir as ir
import pytest

from onnxscript_ep_passes.reports.report import format_report, placement_report, print_report
from tests.harness import reshape_chain


@pytest.fixture(scope="module")
def report() -> dict[str, object]:
    proto = reshape_chain(24)
    return placement_report(ir.from_proto(proto), "cuda", ort_version="1.24", model_name="m.onnx")


def _through_a_terminal(report: dict[str, object]) -> str:
    main, secondary = os.openpty()
    with open(secondary, "w", closefd=True) as terminal:
        assert terminal.isatty()
        print_report(report, file=terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the other end is closed: all read
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    return b"".join(chunks).decode()


def test_colour_only_on_a_terminal(
    report: dict[str, object], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    green = "\x1b[32m"  # the "lower" decision
    assert green in _through_a_terminal(report)
    monkeypatch.setenv("NO_COLOR", "1")  # honoured even on a terminal (bold stays)
    assert green not in _through_a_terminal(report)
    monkeypatch.delenv("NO_COLOR")
    with open(tmp_path / "report.txt", "w") as file:
        print_report(report, file=file)
    assert "\x1b[" not in (tmp_path / "report.txt").read_text()


def test_plain_text_form(report: dict[str, object]) -> None:
    text = format_report(report)
    assert text.startswith("m.onnx: opset 24 -> 23 on CUDA (ORT 1.24, snapshot cuda-ort-1.24)")
    assert "\x1b[" not in text
    assert not any(line != line.rstrip() for line in text.splitlines())  # no padding
    buffer = io.StringIO()
    print_report(report, file=buffer)
    assert buffer.getvalue().splitlines()[0] == text.splitlines()[0]
