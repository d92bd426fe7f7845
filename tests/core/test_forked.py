"""Work in a forked child process (core/forked.py): its answer, how it ended, and no
child left behind."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from onnxscript_ep_passes.core.forked import Child, ChildFailedError

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="fork is used on Linux only")


def _gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_a_child_that_dies_fails_the_check_naming_how() -> None:
    child = Child(lambda: (os.kill(os.getpid(), signal.SIGKILL), b"")[1])
    with child, pytest.raises(ChildFailedError, match="SIGKILL"):
        child.answer()
    assert _gone(child.pid)


def test_a_child_whose_answer_is_not_read_is_killed_and_reaped() -> None:
    start = time.monotonic()
    child = Child(lambda: (time.sleep(60), b"")[1])
    with pytest.raises(RuntimeError, match="structural"), child:
        raise RuntimeError("the structural checks failed first")
    assert _gone(child.pid)
    assert time.monotonic() - start < 30  # killed, not waited for


def test_a_child_answers_a_long_message_whole() -> None:
    data = bytes(range(256)) * 40_000  # 10 MB: far more than a pipe holds at once
    with Child(lambda: data) as child:
        assert child.answer() == data
    assert _gone(child.pid)


def test_an_exception_in_the_work_is_no_answer() -> None:
    def work() -> bytes:
        raise ValueError("no")

    child = Child(work)
    with child, pytest.raises(ChildFailedError, match="exit status 1"):
        child.answer()
    assert _gone(child.pid)


def test_the_child_sees_this_process_memory_as_it_was_at_the_fork() -> None:
    shared = {"value": b"before"}
    child = Child(lambda: shared["value"])
    shared["value"] = b"after"
    with child:
        assert child.answer() == b"before"
