"""Interrupts as one exception (``_signals``): real signals sent to this process."""

from __future__ import annotations

import os
import signal

import pytest

from onnxscript_ep_passes.core.signals import Interrupted, deferred, interrupts_raised


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_raises_interrupted_and_the_handlers_are_restored(name: str) -> None:
    number = getattr(signal, name)
    before = signal.getsignal(number)
    with pytest.raises(Interrupted) as info, interrupts_raised():
        os.kill(os.getpid(), number)  # the handler runs before the next bytecode
        raise AssertionError("not interrupted")
    assert info.value.signum == number and str(info.value) == f"interrupted by {name}"
    assert isinstance(info.value, KeyboardInterrupt)
    assert signal.getsignal(number) == before


def test_the_clean_up_is_not_cut_short_by_a_second_signal() -> None:
    cleaned = []
    with pytest.raises(Interrupted) as info, interrupts_raised():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            raise AssertionError("not interrupted")
        finally:  # a second Ctrl-C during the clean-up is ignored
            os.kill(os.getpid(), signal.SIGINT)
            cleaned.append(True)
    assert info.value.signum == signal.SIGTERM and cleaned == [True]


def test_a_signal_inside_deferred_is_raised_when_it_ends() -> None:
    steps = []
    with pytest.raises(Interrupted) as info, interrupts_raised():
        with deferred():
            os.kill(os.getpid(), signal.SIGHUP)
            steps.append("renamed the data file")
            steps.append("renamed the graph")
        steps.append("after the commit")
    assert steps == ["renamed the data file", "renamed the graph"]
    assert info.value.signum == signal.SIGHUP


def test_an_ignored_signal_stays_ignored() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with interrupts_raised():
            os.kill(os.getpid(), signal.SIGHUP)  # as under nohup: nothing happens
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
