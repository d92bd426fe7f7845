"""Errors: a model that cannot be lowered exactly, or a file that is not a usable model.

- :class:`DowngradeError` (with one :class:`Refusal` per node): the model is valid but some
  nodes cannot be expressed at the target opset.
- :class:`InvalidModelError`: the input is not a model the tool will read (not ONNX,
  malformed, unsafe external data, ...); its message is one line naming the problem.
- :class:`UsageError`: the command line's options cannot work together (exit 2).

(:class:`~onnxscript_ep_passes.lowering.opset_imports.NoOnnxOpsetError`, a pass's failed
precondition, lives beside the onnx-ir code it extends: this module imports no onnx-ir, so
the command line can defer onnx-ir's sympy import.)
"""

from __future__ import annotations

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_USAGE",
    "DowngradeError",
    "InvalidModelError",
    "Refusal",
    "UsageError",
    "built_node_reason",
    "one_line",
]

import dataclasses
from collections.abc import Sequence

from onnxscript_ep_passes.core.display import shown

EXIT_OK = 0  # the command line's exit status: success
EXIT_BAD_INPUT = 1  # the input is not a usable model, or reading/writing failed
EXIT_USAGE = 2  # wrong arguments (argparse's own status)
EXIT_REFUSED = 3  # a valid model that cannot be lowered exactly


@dataclasses.dataclass(frozen=True)
class Refusal:
    """One node that cannot be expressed at the target opset, and why.

    Attributes:
        node_name: The node's name as in the model ("" when it has none).
        op_type: The node's operator.
        domain: The node's domain ("" for ai.onnx).
        since_version: The since_version of the node's schema in the model.
        step: The schema version whose change could not be undone.
        target_opset: The opset the model was being lowered to.
        reason: What blocks the node, in words.
        scope: Where the node lives: "graph 'main'", "function 'pkg::f'", ...
    """

    node_name: str
    op_type: str
    domain: str
    since_version: int
    step: int
    target_opset: int
    reason: str
    scope: str = ""

    def __str__(self) -> str:
        """One line; the model's strings with control characters escaped."""
        name = f"'{shown(self.node_name)}'" if self.node_name else "<unnamed>"
        where = f", in {shown(self.scope)}" if self.scope else ""
        op = shown(f"{self.domain}::{self.op_type}" if self.domain else self.op_type)
        step = ""
        if self.step != self.since_version:
            step = f"at step {shown(self.op_type)}-{self.step}: "
        return f"node {name} ({op}-{self.since_version}{where}): {step}{shown(self.reason)}"


def built_node_reason(op_type: str, name: str | None, since: int, step: int, reason: str) -> str:
    """The reason for refusing a model's node because a node its lowering built was refused.

    The refusal then names the model's node (never a name the lowering made up) and says
    what was built from it and why that could not go lower.
    """
    built = f"{op_type}-{since}" + (f" '{name}'" if name else "")
    if step != since:
        built += f" (at step {op_type}-{step})"
    return f"its lowering built {built}, which cannot reach the target: {reason}"


class DowngradeError(ValueError):
    """Some nodes cannot be expressed at the target opset; nothing was changed.

    ``refusals`` lists every offending node, not only the first one.
    """

    def __init__(
        self,
        refusals: Sequence[Refusal],
        *,
        source_opset: int | None = None,
        target_opset: int | None = None,
        model_name: str | None = None,
    ) -> None:
        self.refusals = tuple(refusals)
        self.source_opset = source_opset
        self.target_opset = target_opset
        self.model_name = model_name
        super().__init__(self._format())

    def _format(self) -> str:
        what = f"model '{shown(self.model_name)}'" if self.model_name else "the model"
        span = ""
        if self.source_opset is not None and self.target_opset is not None:
            span = f" from opset {self.source_opset} to {self.target_opset}"
        count = len(self.refusals)
        lines = [
            f"Cannot lower {what}{span}: {count} node{'s' if count != 1 else ''} "
            "cannot be expressed exactly at the target opset (the model was left unchanged):"
        ]
        lines.extend(f"  - {r}" for r in self.refusals)
        return "\n".join(lines)


class InvalidModelError(ValueError):
    """The input is not a model the tool will read; nothing was lowered or written.

    The message is one line: the file, then the problem (naming the node, attribute,
    tensor or location where there is one).
    """


class UsageError(Exception):
    """A missing or contradictory option: reported with the subcommand's usage, exit 2."""


def one_line(error: BaseException, where: str) -> str:
    """A failure other than a refusal, as the command line reports it: one line, control
    characters escaped (the message may quote the model's names)."""
    text = shown(" ".join(str(error).split()) or type(error).__name__)
    where = shown(where)
    if isinstance(error, (InvalidModelError, OSError, ValueError)):
        return text
    if isinstance(error, (MemoryError, RecursionError)):
        return f"{where}: the model is too large or too deeply nested to process"
    # A bug, or a model the checks let through; -v logs the traceback.
    return f"{where}: internal error ({type(error).__name__}: {text}); rerun with -v"
