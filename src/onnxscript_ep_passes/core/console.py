"""Where the command line's log records and the native libraries' messages go, and which.

Rules:

* One handler on stderr (stdout holds results only). Nothing is installed when the root
  logger already has handlers (an application or pytest configured logging first).
* One summary per command: the command prints its result on stdout, so by default stderr
  gets this package's warnings and errors and the INFO lines of the command itself
  (logger ``onnxscript_ep_passes.cli.program``), not the passes' own INFO summaries of what they
  did (the command's line says it) nor their intermediate states. ``-v`` shows every
  INFO and DEBUG line of this package and the libraries' (onnxscript, onnx-ir, ...) INFO;
  ``-vv`` everything. ``-q``: warnings and errors only. The libraries' records pass from
  WARNING by default.
* Call stacks and tracebacks that libraries attach to log records (onnx-ir logs a caught
  exception's traceback with its warning) are shown only with ``-vv``: no
  traceback-like text reaches a user who did not ask for it.
* Every record is shown with control characters escaped
  (:func:`~onnxscript_ep_passes.core.display.shown_lines`): model names in messages cannot
  drive the terminal.
* :func:`native_output` filters what native code (ONNX Runtime, the WebGPU plugin's Dawn)
  writes to the process's stderr while a command runs: ORT's verbose, info and warning
  lines and Dawn's ``Warning:`` lines are shown only with ``-v``; ORT's errors always.
  ORT colours its lines with ANSI codes whatever stderr is: they are removed when stderr
  is not a terminal; any other control character is escaped.
"""

from __future__ import annotations

__all__ = ["configure_logging", "filter_native_line", "native_output", "terminal_stderr"]

import contextlib
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator
from typing import IO

from onnxscript_ep_passes.core.display import shown_lines

_PACKAGE = "onnxscript_ep_passes"
_COMMAND = "onnxscript_ep_passes.cli.program"

_terminal: IO[str] | None = None  # the real stderr while native_output() filters fd 2


class _StderrPolicy(logging.Filter):
    """This package's records from its chosen level (the command's own from ``command``);
    the libraries' (onnxscript, onnx-ir, ...) from ``others``."""

    def __init__(self, own: int, others: int, command: int) -> None:
        super().__init__()
        self.own, self.others, self.command = own, others, command

    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        if name == _COMMAND or name.startswith(_COMMAND + "."):
            return record.levelno >= self.command
        return record.levelno >= (self.own if _mine(name) else self.others)


class _Escaping(logging.Formatter):
    """Log lines with control characters escaped and, unless ``stacks``, without the call
    stacks some libraries attach to INFO records nor the tracebacks of exceptions they
    caught (onnx-ir's shape inference warning)."""

    def __init__(self, fmt: str, *, stacks: bool) -> None:
        super().__init__(fmt)
        self.stacks = stacks

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info and not self.stacks and not _mine(record.name):
            # a library's caught exception (this package's -v traceback stays)
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        return shown_lines(super().format(record))

    def formatStack(self, stack_info: str) -> str:  # noqa: N802 (logging.Formatter API)
        return super().formatStack(stack_info) if self.stacks else ""


def _mine(name: str) -> bool:
    return name == _PACKAGE or name.startswith(_PACKAGE + ".")


def configure_logging(verbose: int, quiet: bool) -> None:
    """Install the stderr handler for ``-v`` given ``verbose`` times, or ``-q``."""
    if quiet:
        own = others = command = logging.WARNING
    else:
        own = logging.DEBUG if verbose else logging.WARNING
        command = logging.DEBUG if verbose else logging.INFO
        others = logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING
    handler = logging.StreamHandler()
    handler.addFilter(_StderrPolicy(own, others, command))
    handler.setFormatter(_Escaping("%(levelname)s %(name)s: %(message)s", stacks=verbose > 1))
    logging.basicConfig(level=min(own, others, command), handlers=[handler])


# -- native output -------------------------------------------------------------------------

_SGR = re.compile(r"\x1b\[[0-9;]*m")
_ORT_LINE = re.compile(r"\[([VIWEF]):onnxruntime:")
_DAWN_WARNING = "Warning: "
_DRAIN_SECONDS = 10.0


def filter_native_line(line: str, *, verbose: bool, terminal: bool) -> str | None:
    """One line native code wrote to stderr as it is shown, or None when it is dropped
    (module docstring)."""
    plain = _SGR.sub("", line)
    if not verbose:
        ort = _ORT_LINE.search(plain)
        if ort is not None and ort.group(1) in "VIW":
            return None
        if plain.startswith(_DAWN_WARNING):
            return None
    if not terminal:
        return shown_lines(plain)
    # On a terminal ORT's colours stay; everything else is escaped.
    parts = _SGR.split(line)
    codes = _SGR.findall(line)
    out = [shown_lines(parts[0])]
    for code, part in zip(codes, parts[1:], strict=True):
        out += [code, shown_lines(part)]
    return "".join(out)


def terminal_stderr() -> IO[str]:
    """Where to draw on the terminal (progress bars): the real stderr while
    :func:`native_output` filters fd 2, else ``sys.stderr``."""
    return _terminal if _terminal is not None else sys.stderr


@contextlib.contextmanager
def native_output(verbose: int) -> Iterator[None]:
    """Filter what is written to fd 2 meanwhile (module docstring), line by line, on a
    thread that forwards to the real stderr. Python's own writes to ``sys.stderr`` go the
    same way (log lines are already escaped; nothing of them is dropped)."""
    global _terminal
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (AttributeError, OSError, ValueError):  # no stderr, no fd 2 (embedded)
        yield
        return
    terminal = os.isatty(saved)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def forward() -> None:
        pending = b""
        with open(read_end, "rb", buffering=0) as source:
            while chunk := source.read(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    emit(raw.decode("utf-8", "replace"), end="\n")
        if pending:
            emit(pending.decode("utf-8", "replace"), end="")

    broken = False

    def emit(line: str, end: str) -> None:
        nonlocal broken
        kept = filter_native_line(line, verbose=verbose > 0, terminal=terminal)
        if kept is not None and not broken:
            try:
                os.write(saved, (kept + end).encode("utf-8", "replace"))
            except OSError:  # the reader went away (``2>&1 | head``): keep draining the pipe
                broken = True

    thread = threading.Thread(target=forward, name="native-stderr", daemon=True)
    thread.start()
    real = open(saved, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    previous, _terminal = _terminal, real
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last write end closes: the thread sees its end
        thread.join(timeout=_DRAIN_SECONDS)  # a child still holding the pipe cannot hang us
        _terminal = previous
        real.close()
        os.close(saved)
