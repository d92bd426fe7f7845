"""The command line's stderr: this package's INFO lines, the libraries' only from WARNING
unless asked for, and never the call stacks some libraries attach to INFO records."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_EMIT = textwrap.dedent(
    """
    import logging, sys
    from onnxscript_ep_passes._cli_logging import configure_logging
    configure_logging(int(sys.argv[1]), sys.argv[2] == "quiet")
    logging.getLogger("onnxscript_ep_passes.lowering").info("own info")
    logging.getLogger("onnxscript_ep_passes.lowering").debug("own debug")
    logging.getLogger("onnx_ir.passes").info("library info", stack_info=True)
    logging.getLogger("onnxscript.optimizer").debug("library debug")
    logging.getLogger("onnxscript.optimizer").warning("library warning")
    print("result")
    """
)


def _stderr(verbose: int, quiet: bool = False) -> list[str]:
    argv = [sys.executable, "-c", _EMIT, str(verbose), "quiet" if quiet else "normal"]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout == "result\n"  # logs never go to stdout
    return done.stderr.splitlines()


@pytest.mark.parametrize(
    ("verbose", "quiet", "expected"),
    [
        (0, False, ["own info", "library warning"]),
        (0, True, ["library warning"]),
        (1, False, ["own info", "own debug", "library info", "library warning"]),
        (2, False, ["own info", "own debug", "library info", "library debug", "library warning"]),
    ],
    ids=["default", "quiet", "-v", "-vv"],
)
def test_levels_per_source(verbose: int, quiet: bool, expected: list[str]) -> None:
    lines = _stderr(verbose, quiet)
    messages = [line.split(": ", 1)[1] for line in lines if ": " in line and line[0].isupper()]
    assert messages == expected, lines
    assert any("Stack (most recent call last)" in line for line in lines) == (verbose > 1)
