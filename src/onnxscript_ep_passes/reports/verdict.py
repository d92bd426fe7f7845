"""One-line verdicts: what an EP-aware lowering does to a model, in words.

Rules:

- One line, leading with what the user pays: the Memcpy nodes and the bytes they move per
  run, then the compute left on the CPU, then the nodes on CPU by kind::

      opset 24 -> 21 (4 nodes expanded) on WebGPU (ORT 1.32.0, live table): Memcpy 23 -> 3
      (582.3 kB -> 17.0 kB per run), CPU compute 18.1 MFLOP -> 18.4 kFLOP; fall back 7 -> 1,
      shape math on CPU 26 -> 42

  (one line, wrapped here: the tiny dynamic-shape Llama of ``tests/torch_models.py`` as
  torch 2.13 exports it at opset 24). "fall back" counts the nodes on CPU because the EP has no
  kernel for them and that compute on real data; "shape math on CPU" counts the nodes that
  only handle integer or bool tensors (the int64 ``Shape -> Gather -> Concat`` arithmetic
  of dynamic shapes, masks): ORT keeps them on CPU on purpose (CUDA's CPU preference), or
  the EP lacks only their integer type (WebGPU has no int64 kernels). They cost next to
  nothing and more of them after a lowering is not a regression. Bytes assume the
  symbolic dimensions' sizes of the estimate (``--dims``; see :mod:`.ep.dims`).
- A part that is zero on both sides says so once (``Memcpy 0``, ``CPU compute 0``); the
  shape-math part is left out when there is none on either side.
- The kernel table is always named: ``live table`` (listed from the installed ORT) or the
  shipped snapshot; an ORT release the caller did not ask for is marked ``assumed``, so a
  prediction made from a default is never mistaken for one about the user's ORT; a
  snapshot not taken from an ORT release says so (``(not from a release)``).
- Nothing changed reads as such (``opset 24 kept``), never as ``opset 24 -> 24``.
- The EP is named as people say it, by its profile's display name (``CUDA``,
  ``DirectML``, ``WebGPU``), not as ORT's class name.

This module imports only the EP profiles and the kernel table's kind at run time, so the pass, the report and the
command line can all share it.
"""

from __future__ import annotations

__all__ = ["Figures", "ep_display_name", "quantity", "table_label", "verdict"]

import dataclasses
from typing import TYPE_CHECKING

from onnxscript_ep_passes.ep.kernel_table import TableKind
from onnxscript_ep_passes.ep.profiles import profile_for

if TYPE_CHECKING:
    from onnxscript_ep_passes.ep.cost import PlacementCost
    from onnxscript_ep_passes.ep.placement import PlacementPrediction


def ep_display_name(ep: str) -> str:
    """The display name of ``ep``'s profile (``"CUDAExecutionProvider"`` -> ``"CUDA"``); an
    EP without a profile loses the ``ExecutionProvider`` suffix only."""
    return profile_for(ep).display_name


def table_label(
    ort_version: str, table_kind: TableKind, table_source: str, *, assumed: bool = False
) -> str:
    """``"ORT 1.32, live table"``, ``"ORT 1.24, snapshot cuda-ort-1.24"``; with
    ``assumed``: ``"ORT main-2026-09 assumed, snapshot ..."``; a snapshot that names no
    release keeps the mark its source carries: ``"snapshot dml-ort-1.24 (not from a
    release)"``. A caller's table, or none, is named by its source (``"file:<path>"``,
    ``"none: measured"``). The kind is given, never read from the source."""
    if table_kind is TableKind.LIVE:
        named = "live table"
    elif table_kind is TableKind.SNAPSHOT:  # "<name>.tsv", then its marks
        named = "snapshot " + table_kind.detail(table_source).replace(".tsv", "", 1)
    else:
        named = table_source
    return f"ORT {ort_version}{' assumed' if assumed else ''}, {named}"


def quantity(value: float, unit: str) -> str:
    """``quantity(582272, "B")`` -> ``"582.3 kB"``; 0 is ``"0"``; decimal prefixes."""
    if value <= 0:
        return "0"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


@dataclasses.dataclass(frozen=True)
class Figures:
    """What one predicted placement costs the user, as the verdict states it.

    Attributes:
        memcpy: Predicted Memcpy nodes.
        memcpy_bytes: The bytes they move per run.
        cpu_flops: Operations left on the CPU per run.
        falls_back: Nodes on CPU for lack of an EP kernel, computing on real data.
        shape_math: Nodes on CPU that only handle integer or bool tensors (module docstring).
    """

    memcpy: int
    memcpy_bytes: int = 0
    cpu_flops: float = 0.0
    falls_back: int = 0
    shape_math: int = 0

    @classmethod
    def of(cls, prediction: PlacementPrediction, cost: PlacementCost) -> Figures:
        """The figures of ``prediction`` priced as ``cost``."""
        shape_math = sum(1 for n in prediction.nodes if n.is_shape_math)
        return cls(
            memcpy=prediction.memcpy,
            memcpy_bytes=cost.memcpy_bytes,
            cpu_flops=cost.cpu_flops,
            falls_back=len(prediction.cpu_nodes) - shape_math,
            shape_math=shape_math,
        )


def _change(before: str | int, after: str | int) -> str:
    return f"{before} -> {after}" if before != after else f"{after}"


def _figures(before: Figures, after: Figures) -> str:
    memcpy = f"Memcpy {_change(before.memcpy, after.memcpy)}"
    if before.memcpy_bytes or after.memcpy_bytes:
        moved = _change(quantity(before.memcpy_bytes, "B"), quantity(after.memcpy_bytes, "B"))
        memcpy += f" ({moved} per run)"
    compute = _change(quantity(before.cpu_flops, "FLOP"), quantity(after.cpu_flops, "FLOP"))
    nodes = f"fall back {_change(before.falls_back, after.falls_back)}"
    if before.shape_math or after.shape_math:
        nodes += f", shape math on CPU {_change(before.shape_math, after.shape_math)}"
    return f"{memcpy}, CPU compute {compute}; {nodes}"


def verdict(
    *,
    ep: str,
    ort_version: str,
    table_kind: TableKind,
    table_source: str,
    source_opset: int,
    chosen_opset: int,
    before: Figures,
    after: Figures,
    expanded: int = 0,
    assumed: bool = False,
    model: str | None = None,
    done: str | None = None,
) -> str:
    """The verdict line (see the module docstring).

    Args:
        table_kind, table_source: Where the kernel table came from and its text
            (:func:`table_label`).
        before, after: The predicted figures of the model as given and as lowered.
        expanded: Nodes legalization expanded (0 when not legalized).
        model: Prefix the line with the model's name (its file name, say).
        done: What else was done, after the opset (``"21 nodes fused"``).
    """
    if chosen_opset < source_opset:
        opset = f"opset {source_opset} -> {chosen_opset}"
    else:
        opset = f"opset {source_opset} kept"
    if expanded:
        opset += f" ({expanded} node{'s' if expanded != 1 else ''} expanded)"
    if done:
        opset += f", {done}"
    table = table_label(ort_version, table_kind, table_source, assumed=assumed)
    where = f"{ep_display_name(ep)} ({table})"
    line = f"{opset} on {where}: {_figures(before, after)}"
    return f"{model}: {line}" if model else line
