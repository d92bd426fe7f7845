"""Where the command line's log records go, and which.

Rules:

* One handler on stderr (stdout holds results only). Nothing is installed when the root
  logger already has handlers (an application or pytest configured logging first).
* This package's records pass from INFO (WARNING with ``-q``, DEBUG with ``-v``); the
  libraries' (onnxscript, onnx-ir, ...) only from WARNING, from INFO with ``-v`` and all
  with ``-vv``. Call stacks and tracebacks that libraries attach to log records (onnx-ir
  logs a caught exception's traceback with its warning) are shown only with ``-vv``: no
  traceback-like text reaches a user who did not ask for it.
"""

from __future__ import annotations

__all__ = ["configure_logging"]

import logging

_PACKAGE = "onnxscript_ep_passes"


class _StderrPolicy(logging.Filter):
    """This package's records from its chosen level; the libraries' (onnxscript, onnx-ir,
    ...) only from WARNING, INFO with ``-v``, everything with ``-vv``."""

    def __init__(self, own: int, others: int) -> None:
        super().__init__()
        self.own, self.others = own, others

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= (self.own if _mine(record.name) else self.others)


def _mine(name: str) -> bool:
    return name == _PACKAGE or name.startswith(_PACKAGE + ".")


class _NoStacks(logging.Formatter):
    """Log lines without the call stacks some libraries attach to INFO records, nor the
    tracebacks they attach to warnings (this package's ``-v`` traceback stays)."""

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info and not _mine(record.name):
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        return super().format(record)

    def formatStack(self, stack_info: str) -> str:  # noqa: N802 (logging.Formatter API)
        return ""


def configure_logging(verbose: int, quiet: bool) -> None:
    """Install the stderr handler for ``-v`` given ``verbose`` times, or ``-q``."""
    if quiet:
        own = others = logging.WARNING
    else:
        own = logging.DEBUG if verbose else logging.INFO
        others = logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING
    handler = logging.StreamHandler()
    handler.addFilter(_StderrPolicy(own, others))
    formatter = logging.Formatter if verbose > 1 else _NoStacks
    handler.setFormatter(formatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=min(own, others), handlers=[handler])
