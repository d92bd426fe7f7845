"""Interrupts of the command line (Ctrl-C, ``kill``, a closed terminal) as one exception.

Rules:

* While :func:`interrupts_raised` is active (the command line's run, in the main thread),
  SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` (a ``KeyboardInterrupt``) carrying
  the signal's number. A signal that was ignored when the run began (``nohup``, a
  background job) stays ignored.
* Once one is raised, all three are ignored until the run ends, so that the clean-up the
  exception runs through (staging directories, temporary files, the weights copy) is
  never cut short by a second Ctrl-C. The previous handlers are restored at the end.
* Inside :func:`deferred` (the few renames of a commit), a signal is held and raised when
  the block ends: a commit is never left half done.
* The caller reports the exception in one line and exits ``128 + signum`` (130 for Ctrl-C).
"""

from __future__ import annotations

__all__ = ["Interrupted", "deferred", "interrupts_raised"]

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

_NAMES = ("SIGINT", "SIGTERM", "SIGHUP")
_state = threading.local()


class Interrupted(KeyboardInterrupt):
    """The run was interrupted by signal ``signum``."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


def _held() -> list[int] | None:
    return getattr(_state, "held", None)


@contextlib.contextmanager
def interrupts_raised() -> Iterator[None]:
    """Raise :class:`Interrupted` on SIGINT, SIGTERM and SIGHUP meanwhile (module rules)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set in the main thread
        return
    previous: dict[int, object] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        held = _held()
        if held is not None:  # inside deferred(): raised when it ends
            held.append(signum)
            return
        for number in previous:
            signal.signal(number, signal.SIG_IGN)
        raise Interrupted(signum)

    for name in _NAMES:
        number = getattr(signal, name, None)
        if number is None:  # pragma: no cover - SIGHUP on Windows
            continue
        current = signal.getsignal(number)
        if current == signal.SIG_IGN:
            continue
        previous[number] = current
        signal.signal(number, handler)
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)  # type: ignore[arg-type]


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold the signals of :func:`interrupts_raised` until the block ends, then raise the
    first one held (nothing changes where they are not handled so)."""
    if _held() is not None or threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    _state.held = held
    try:
        yield
    finally:
        _state.held = None
    if held:
        signal.raise_signal(held[0])  # the handler raises Interrupted now
