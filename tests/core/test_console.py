"""The command line's stderr: this package's INFO lines, the libraries' only from WARNING
unless asked for, and never the call stacks some libraries attach to INFO records."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from onnxscript_ep_passes.core.console import filter_native_line

_EMIT = textwrap.dedent(
    """
    import logging, sys
    from onnxscript_ep_passes.core.console import configure_logging
    configure_logging(int(sys.argv[1]), sys.argv[2] == "quiet")
    logging.getLogger("onnxscript_ep_passes.cli.program").info("command info")
    logging.getLogger("onnxscript_ep_passes.lowering").info("own info")
    logging.getLogger("onnxscript_ep_passes.lowering").debug("own debug")
    logging.getLogger("onnxscript_ep_passes.lowering").warning("own warning \x1b[2J")
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


_VERBOSE = ["command info", "own info", "own debug", "own warning \\x1b[2J", "library info"]


@pytest.mark.parametrize(
    ("verbose", "quiet", "expected"),
    [
        (0, False, ["command info", "own warning \\x1b[2J", "library warning"]),
        (0, True, ["own warning \\x1b[2J", "library warning"]),
        (
            1,
            False,
            [*_VERBOSE, "library warning"],
        ),
        (
            2,
            False,
            [*_VERBOSE, "library debug", "library warning"],
        ),
    ],
    ids=["default", "quiet", "-v", "-vv"],
)
def test_levels_per_source(verbose: int, quiet: bool, expected: list[str]) -> None:
    lines = _stderr(verbose, quiet)
    messages = [line.split(": ", 1)[1] for line in lines if ": " in line and line[0].isupper()]
    assert messages == expected, lines
    assert any("Stack (most recent call last)" in line for line in lines) == (verbose > 1)


_NATIVE = textwrap.dedent(
    """
    import logging, os, sys
    from onnxscript_ep_passes.core.console import configure_logging, native_output
    verbose = int(sys.argv[1])
    configure_logging(verbose, False)
    with native_output(verbose):
        # What ONNX Runtime and Dawn write to fd 2 themselves, colours included.
        os.write(2, b"\\x1b[0;93m2026-12-01 10:00:00.1 [W:onnxruntime:Default, api.cc:103] soft\\x1b[m\\n")
        os.write(2, b"Warning: maxDynamicUniformBuffersPerPipelineLayout artificially reduced\\n")
        os.write(2, b"\\x1b[1;31m2026-12-01 10:00:00.2 [E:onnxruntime:, x.cc:1] bad \\x1b]0;T\\x07\\x1b[m\\n")
        os.write(2, b"no newline at the end")
        logging.getLogger("onnxscript_ep_passes.cli.program").info("node n\\x1b[2J")
    print("result")
    """
)


@pytest.mark.parametrize("verbose", [0, 1])
def test_native_output_is_filtered_off_a_terminal(verbose: int) -> None:
    argv = [sys.executable, "-c", _NATIVE, str(verbose)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout == "result\n"
    lines = done.stderr.splitlines()
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr, lines
    # ORT's errors always; its warnings and Dawn's only with -v; colour codes removed,
    # other control characters escaped.
    error = "2026-12-01 10:00:00.2 [E:onnxruntime:, x.cc:1] bad \\x1b]0;T\\x07"
    expected = [error, "no newline at the endINFO onnxscript_ep_passes.cli.program: node n\\x1b[2J"]
    if verbose:
        expected = [
            "2026-12-01 10:00:00.1 [W:onnxruntime:Default, api.cc:103] soft",
            "Warning: maxDynamicUniformBuffersPerPipelineLayout artificially reduced",
            *expected,
        ]
    assert lines == expected, lines


def test_native_lines_on_a_terminal_keep_ort_colours_only() -> None:
    line = "\x1b[0;93m[E:onnxruntime:] name \x1b[2J\x1b[m"
    kept = filter_native_line(line, verbose=False, terminal=True)
    assert kept == "\x1b[0;93m[E:onnxruntime:] name \\x1b[2J\x1b[m"
    assert filter_native_line(line, verbose=False, terminal=False) == (
        "[E:onnxruntime:] name \\x1b[2J"
    )


_FLOOD = textwrap.dedent(
    """
    import os
    from onnxscript_ep_passes.core.console import native_output
    with native_output(1):
        for _ in range(4000):  # far more than a pipe holds
            os.write(2, b"[E:onnxruntime:] " + b"x" * 100 + b"\\n")
    print("done")
    """
)


def test_native_output_survives_a_reader_that_went_away() -> None:
    """``... 2>&1 | head``: stderr's reader closes early; the command still finishes."""
    done = subprocess.Popen(
        [sys.executable, "-c", _FLOOD], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert done.stderr is not None and done.stdout is not None
    done.stderr.close()
    out, _ = done.communicate(timeout=60)
    assert done.returncode == 0 and out == b"done\n"
