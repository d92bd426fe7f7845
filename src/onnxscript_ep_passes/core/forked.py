"""Work done by a forked child process beside this one, for steps that hold the GIL and so
cannot overlap in threads: onnx's C++ checker on a large output model (issue 23,
:mod:`~onnxscript_ep_passes.model_files.split_check`).

Rules:

1. :func:`can_fork` says whether a fork may help here: only on Linux (elsewhere there is
   no ``fork``, or one system libraries do not support), only when this process may run
   on two CPUs or more, and only while :data:`FORK` is on (tests turn it off to compare).
   Callers do the work themselves otherwise, or when making the :class:`Child` raises
   OSError (the fork failed: memory, process limits).
2. The child shares this process's memory as it was at the fork (nothing is copied or
   sent to it). It turns off the cyclic collector (a collection would touch, and so copy,
   every page of the heap), takes the default action for the signals the command line
   handles (Ctrl-C ends it at once), runs its work, writes the bytes the work returns to
   a pipe and ends with ``os._exit`` (no exit handlers, no buffers flushed twice). Its
   work must touch no lock another thread may hold at the fork: only C++ code that takes
   none, and Python objects. Python 3.12 warns on a fork while other threads run (the
   weights copy runs in one), so that warning is silenced for the fork only.
3. A child is always waited for, and killed first when this process stops waiting for its
   answer (an error in the work done meanwhile, an interrupt). A child that ends without
   an answer (killed, crashed, an exception in its work) raises
   :class:`ChildFailedError`, naming how it ended.
"""

from __future__ import annotations

__all__ = ["FORK", "Child", "ChildFailedError", "can_fork"]

import contextlib
import gc
import os
import signal
import sys
import warnings
from collections.abc import Callable

FORK = True
"""Whether work may go to a forked child at all (rule 1)."""

_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP"))
_DONE = b"\x01"  # the last byte of a complete answer


class ChildFailedError(RuntimeError):
    """The child process ended without an answer (rule 3)."""


def can_fork() -> bool:
    """Rule 1."""
    if not FORK or sys.platform != "linux":
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except OSError:
        return (os.cpu_count() or 1) >= 2


class Child:
    """``work`` run in a forked child (rules 2 and 3); :meth:`answer` is what it returned.

    Used as a context manager: the child is reaped when the block ends, killed first
    unless its answer was read. Making one raises OSError when the fork fails."""

    def __init__(self, work: Callable[[], bytes]) -> None:
        read_end, write_end = os.pipe()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except BaseException:
            os.close(read_end)
            os.close(write_end)
            raise
        if pid == 0:  # the child: nothing here returns
            _run_child(work, read_end, write_end)
        os.close(write_end)
        self.pid, self._read_end, self._answered = pid, read_end, False

    def answer(self) -> bytes:
        """Wait for the child's answer; :class:`ChildFailedError` when it ended without one."""
        chunks = []
        while chunk := os.read(self._read_end, 1 << 20):
            chunks.append(chunk)
        self._answered = True
        data = b"".join(chunks)
        if not data.endswith(_DONE):
            raise ChildFailedError(f"the child process ended without an answer ({self._ended()})")
        return data[:-1]

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self._read_end)
        if not self._answered:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self._ended()

    def _ended(self) -> str:
        """Reap the child; how it ended."""
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            return "already reaped"
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            name = signal.Signals(number).name if number in set(signal.Signals) else number
            return f"killed by signal {name}"
        return f"exit status {os.WEXITSTATUS(status)}"


def _run_child(work: Callable[[], bytes], read_end: int, write_end: int) -> None:
    code = 1
    try:
        gc.disable()
        for signum in _SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        os.close(read_end)
        view = memoryview(work() + _DONE)
        while view:
            view = view[os.write(write_end, view) :]
        code = 0
    finally:
        os._exit(code)
