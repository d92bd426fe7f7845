"""Sizes of a model's symbolic dimensions, as the cost estimate and measured runs assume them.

A dynamic-shape export names its dimensions (``batch``, ``sequence_length``,
``past_sequence_length`` ...), and derived ones are written as expressions of those
(torch writes ``past_sequence_length + sequence_length``). Estimating what a Memcpy moves
or what a node computes needs numbers. Rules:

1. A name bound by the user (``--dims batch=4,sequence_length=512``, :func:`parse_dims`)
   has that size.
2. Otherwise the size follows from the name (case-insensitive), first match wins:
   contains ``total`` -> past + sequence (the past and sequence defaults: 256);
   contains ``past`` or ``cache`` -> ``DEFAULT_PAST`` (128); contains ``batch`` ->
   ``DEFAULT_BATCH`` (1); anything else (``sequence_length``, ``s0``, ``height``...) ->
   ``DEFAULT_SEQUENCE`` (128).
3. An expression of names (``+ - * // % /``, parentheses, integers, ``max``/``min``) is
   evaluated with the names' sizes (rules 1-2); ``/`` is integer division. A name bound
   by the user is used as given even when it looks like an expression.
4. A dimension with neither a value nor a name (unknown) counts as ``DEFAULT_SEQUENCE``;
   in a shape, only the first unknown dimension does, the others count 1 (a rank-4 mask
   of unknown dimensions is not 128**4 elements). A name ONNX shape inference made up for
   an unknown dimension (``unk__<n>``) is unknown too, not a name: a rank-4 value of
   such dims once priced an Identity at 7 ms and made the estimate pick a copy that
   kept another candidate's model.

The same :class:`DimSizes` generates the inputs of measured runs
(:mod:`~onnxscript_ep_passes.ep.measure`), so prediction and measurement assume the same
shapes; with the defaults, past keys/values hold 128 positions and the mask covers 256.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_PAST",
    "DEFAULT_SEQUENCE",
    "DimSizes",
    "DimsSpec",
    "parse_dims",
]

import ast
import dataclasses
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeAlias

DEFAULT_BATCH = 1
DEFAULT_SEQUENCE = 128
DEFAULT_PAST = 128

_NAME = re.compile(r"^[A-Za-z_][\w.:/-]*$")
_INFERRED = re.compile(r"^unk__\d+$")  # onnx shape inference's name for an unknown dim
_BINARY: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.floordiv,
    ast.Mod: operator.mod,
}


def parse_dims(text: str | None) -> dict[str, int]:
    """Parse ``"batch=4,sequence_length=512"`` into ``{"batch": 4, ...}``.

    Raises:
        ValueError: an entry is not ``name=positive integer``; the message names it.
    """
    out: dict[str, int] = {}
    if not text:
        return out
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, sep, value = entry.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value.isdigit() or int(value) < 1:
            raise ValueError(
                f"--dims entry {entry!r}: expected name=size with a positive integer size "
                "(e.g. --dims batch=1,sequence_length=128)"
            )
        out[name] = int(value)
    return out


@dataclasses.dataclass(frozen=True)
class DimSizes:
    """Sizes for symbolic dimensions: the user's bindings, then the defaults (module doc)."""

    bindings: Mapping[str, int] = dataclasses.field(default_factory=dict)
    # Sizes of the names met so far (a name's size depends only on ``bindings``).
    _named: dict[str, int] = dataclasses.field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    @classmethod
    def of(cls, dims: DimsSpec) -> DimSizes:
        """Accept a :class:`DimSizes`, a mapping, a ``--dims`` string or None."""
        if isinstance(dims, DimSizes):
            return dims
        if isinstance(dims, str):
            return cls(parse_dims(dims))
        return cls(dict(dims or {}))

    def named(self, name: str) -> int:
        """The size of the dimension called ``name`` (rules 1-3)."""
        size = self._named.get(name)
        if size is None:
            size = self._named[name] = self._size_of_name(name)
        return size

    def _size_of_name(self, name: str) -> int:
        if name in self.bindings:
            return self.bindings[name]
        if _NAME.match(name):
            return self._default(name)
        try:
            return max(1, self._evaluate(ast.parse(name, mode="eval").body))
        except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
            return DEFAULT_SEQUENCE

    def size(self, dim: Any) -> int:
        """The size of one dimension: an int, an ``onnx_ir`` dim, a name, or None."""
        if isinstance(dim, int):
            return max(dim, 0)
        value = getattr(dim, "value", dim)
        if isinstance(value, int):
            return max(value, 0)
        if isinstance(value, str) and value and not _INFERRED.match(value):
            return self.named(value)
        return DEFAULT_SEQUENCE

    def elements(self, dims: Iterable[Any]) -> int:
        """The number of elements of a shape (the product of :meth:`size`, rule 4)."""
        total = 1
        unknown = False
        for dim in dims:  # :meth:`size` inlined (a hot loop), plus rule 4
            value = dim if type(dim) is int else getattr(dim, "value", dim)
            if isinstance(value, int):
                total *= max(value, 0)
            elif isinstance(value, str) and value and not _INFERRED.match(value):
                total *= self.named(value)
            else:
                total *= 1 if unknown else DEFAULT_SEQUENCE
                unknown = True
        return total

    def _default(self, name: str) -> int:
        lowered = name.lower()
        if "total" in lowered:
            return self._past() + self._sequence()
        if "past" in lowered or "cache" in lowered:
            return self._past()
        if "batch" in lowered:
            return DEFAULT_BATCH
        return DEFAULT_SEQUENCE

    def _past(self) -> int:
        bound = [v for k, v in self.bindings.items() if "past" in k.lower()]
        return bound[0] if bound else DEFAULT_PAST

    def _sequence(self) -> int:
        bound = [
            v
            for k, v in self.bindings.items()
            if "seq" in k.lower() and "past" not in k.lower() and "total" not in k.lower()
        ]
        return bound[0] if bound else DEFAULT_SEQUENCE

    def _evaluate(self, node: ast.expr) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            return self.named(node.id)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](self._evaluate(node.left), self._evaluate(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -self._evaluate(node.operand)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id.lower() in ("max", "min")
            and node.args
            and not node.keywords
        ):
            pick = max if node.func.id.lower() == "max" else min
            return pick(self._evaluate(a) for a in node.args)
        raise ValueError(f"unsupported dimension expression {ast.dump(node)}")


DimsSpec: TypeAlias = DimSizes | Mapping[str, int] | str | None
"""What the APIs accept for ``dims``: a :class:`DimSizes`, a mapping, a ``--dims`` string
(``name=size,...``) or None (the defaults)."""
