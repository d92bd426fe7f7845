"""Undo what ai.onnx opset 28 changed (28 -> 27).

Type-only changes of this step are derived from ``onnx.defs`` by the registry; the
adapters here cover the rest.
"""

from __future__ import annotations

__all__: list[str] = []
