"""progress.track: the items unchanged; a bar only on a terminal, nested loops sharing it."""

from __future__ import annotations

import io
import sys

import pytest

from onnxscript_ep_passes.core import progress
from onnxscript_ep_passes.core.progress import track


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_terminal_no_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(track(range(5), "work")) == [0, 1, 2, 3, 4]
    assert capsys.readouterr().err == ""


def test_terminal_draws_nested_bars(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    seen = []
    for outer in track(range(3), "candidate opsets"):
        # An inner loop left early still removes its line.
        for inner in track(["a", "b", "c"], "legalization trials"):
            seen.append((outer, inner))
            if inner == "b":
                break
    assert seen == [(o, i) for o in range(3) for i in "ab"]
    assert "candidate opsets" in terminal.getvalue()
    assert progress._live is None  # the display is gone once the outer loop ends
