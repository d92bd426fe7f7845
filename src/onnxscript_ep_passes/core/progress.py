"""Progress bars over long work, drawn only when stderr is a terminal.

Rules:

* :func:`track` yields the items it is given, unchanged, whatever happens to the bar.
* A bar is drawn (with ``rich``, on stderr, erased when done) only when stderr is a
  terminal (the real one while the command line filters native output); otherwise nothing is written and ``rich`` is not even imported, so logs,
  pipes and CI output stay clean.
* Nested loops (candidate opsets, then legalization trials inside one) share one live
  display: an inner loop adds a line under the outer one and removes it when done.
"""

from __future__ import annotations

__all__ = ["track"]

from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from onnxscript_ep_passes.core.console import terminal_stderr

T = TypeVar("T")

_live: Any = None  # the rich Progress being drawn, shared by nested loops


def _enabled() -> bool:
    isatty = getattr(terminal_stderr(), "isatty", None)
    return bool(isatty and isatty())


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate over ``items``; on a terminal, show a bar named ``description``."""
    global _live
    if not _enabled():
        yield from items
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    owner = _live is None
    if owner:
        _live = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(file=terminal_stderr()),
            transient=True,
        )
        _live.start()
    live = _live
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    task = live.add_task(description, total=total)
    try:
        for item in items:
            yield item
            live.advance(task)
    finally:
        live.remove_task(task)
        if owner:
            live.stop()
            _live = None
