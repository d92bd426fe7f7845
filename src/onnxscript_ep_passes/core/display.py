"""How text that comes from a model is shown to people: control characters escaped.

Names, domains, op types, doc strings and metadata of a model are the model author's; a
node named ``"n\\x1b]0;PWNED\\x07\\x1b[2J"`` must not set the terminal's title or clear
the screen when a refusal, a log line or the report names it. Rules:

- :func:`shown` escapes every control character (C0 but none of the printable ASCII,
  DEL, C1) and the Unicode bidirectional overrides and isolates (which reorder what a
  terminal shows) as ``\\xNN`` / ``\\uNNNN``. Everything else, non-ASCII letters
  included, is kept. A newline in a model's string is escaped too (it could forge a line).
- Every place that prints model text uses it: the text report, log records (the
  command line's log formatter escapes each formatted record, keeping only the line
  breaks this package puts between its own lines), error messages and the lines the
  commands print. The JSON report and ``--report-json`` keep the exact strings (JSON
  escapes control characters itself).
"""

from __future__ import annotations

__all__ = ["shown", "shown_lines"]

import re

_BIDI = "\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c"
_UNSAFE = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_BIDI}]")
_UNSAFE_BUT_LINES = re.compile(f"[\\x00-\\x09\\x0b-\\x1f\\x7f-\\x9f{_BIDI}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: object) -> str:
    """``str(text)`` with every control character escaped (module docstring)."""
    return _UNSAFE.sub(_escape, str(text))


def shown_lines(text: object) -> str:
    """Like :func:`shown`, but line breaks stay: for a message of several lines this
    package composed (each model string in it already passed through :func:`shown`, or
    escaped here)."""
    return _UNSAFE_BUT_LINES.sub(_escape, str(text))
