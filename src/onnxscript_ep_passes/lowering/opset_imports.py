"""The model's opset bookkeeping: its ai.onnx opset, and relabelling it after a lowering.

Rules:

* The ai.onnx opset is the one imported under "" or "ai.onnx".
* After a lowering, the default-domain imports of the model and of each function above
  the target are set to the target; per-node version overrides of default-domain nodes
  are cleared; ``ir_version`` is lowered to the highest IR version of the ONNX releases
  whose opset is at most the target (``onnx.helper.VERSION_TABLE``), but not below what
  the model's other imported domains need. Other domains are left as they are.
"""

from __future__ import annotations

__all__ = [
    "NoOnnxOpsetError",
    "default_opset",
    "lowered_ir_version",
    "max_ir_version_for_opset",
    "relabel",
    "require_default_opset",
]

import functools
from collections.abc import Mapping

import onnx
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import walk
from onnxscript_ep_passes.lowering import schemas


@functools.cache
def max_ir_version_for_opset(opset: int) -> int:
    """The highest IR version of the ONNX releases whose ai.onnx opset is at most ``opset``."""
    versions = [ir_v for _, ir_v, op, *_ in onnx.helper.VERSION_TABLE if op <= opset]
    if not versions:
        raise ValueError(f"opset {opset} is older than every ONNX release known to onnx")
    return max(versions)


class NoOnnxOpsetError(ir.passes.PreconditionError, ValueError):
    """The model imports no ai.onnx opset: nothing to lower, place or fuse.

    Raised by the passes' ``requires`` hook (onnx-ir passes it through unwrapped, being a
    ``PreconditionError``) and by the functions that read the opset
    (:func:`~onnxscript_ep_passes.lowering.opset_imports.require_default_opset`)."""

    def __init__(self) -> None:
        super().__init__("the model imports no ai.onnx opset")


def default_opset(opsets: Mapping[str, int]) -> int | None:
    for domain in schemas.DEFAULT_DOMAINS:
        if domain in opsets:
            return opsets[domain]
    return None


def require_default_opset(model: ir.Model) -> int:
    """The model's ai.onnx opset; the precondition of every pass that lowers, places or
    fuses (their ``requires`` hook).

    Raises:
        NoOnnxOpsetError: the model imports none.
    """
    opset = default_opset(model.opset_imports)
    if opset is None:
        raise NoOnnxOpsetError
    return opset


def _set_default_opset(opsets: dict[str, int], version: int) -> None:
    for domain in schemas.DEFAULT_DOMAINS:
        if domain in opsets:
            opsets[domain] = version


def relabel(model: ir.Model, target: int, *, versions_in_main: bool = True) -> None:
    """Relabel ``model`` for ``target`` (module docstring).

    ``versions_in_main=False``: the caller knows no node of the main graph (subgraphs
    included) carries a per-node version, so the main graph is not walked.
    """
    graphs: list[ir.Graph | ir.Function] = [model.graph, *model.functions.values()]
    for graph in graphs:
        opset = default_opset(graph.opset_imports)
        if opset is not None and opset > target:
            _set_default_opset(graph.opset_imports, target)
        if graph is model.graph and not versions_in_main:
            continue
        for node in walk(graph)[0]:
            if node.version is not None and schemas.is_default_domain(node.domain):
                node.version = None
    model.ir_version = lowered_ir_version(model.opset_imports, model.ir_version)


def lowered_ir_version(opset_imports: Mapping[str, int], ir_version: int) -> int:
    """``ir_version`` capped at the highest IR version the ai.onnx opset allows, but not
    below what the other imported domains (ai.onnx.ml ...) need."""
    main = default_opset(opset_imports)
    if main is None:
        return ir_version
    others = [
        onnx.helper.make_opsetid(domain, version)
        for domain, version in opset_imports.items()
        if not schemas.is_default_domain(domain)
    ]
    floor = onnx.helper.find_min_ir_version_for(others, ignore_unknown=True) if others else 0
    return min(ir_version, max(max_ir_version_for_opset(main), floor))
