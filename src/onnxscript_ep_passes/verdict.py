"""One-line verdicts: what an EP-aware lowering does to a model, in words.

Rules:

- One line, numbers first-class: ``opset 25 -> 24 on WebGPU (ORT 1.32, live table):
  Memcpy 376 -> 4, CPU nodes 493 -> 59``. "CPU nodes" are the nodes that fall back to
  CPU for lack of an EP kernel; shape computations ORT keeps on CPU on purpose are not
  counted.
- The kernel table is always named: ``live table`` (listed from the installed ORT) or the
  shipped snapshot; an ORT release the caller did not ask for is marked ``assumed``, so a
  prediction made from a default is never mistaken for one about the user's ORT; a
  snapshot not taken from an ORT release says so (``(not from a release)``).
- Nothing changed reads as such (``opset 24 kept``), never as ``opset 24 -> 24``.
- The EP is named as people say it, by its profile's display name (``CUDA``,
  ``DirectML``, ``WebGPU``), not as ORT's class name.

This module imports only the EP profiles, so the pass, the report and the command line can
all share it.
"""

from __future__ import annotations

__all__ = ["ep_display_name", "table_label", "verdict"]

from onnxscript_ep_passes.ep.profiles import profile_for


def ep_display_name(ep: str) -> str:
    """The display name of ``ep``'s profile (``"CUDAExecutionProvider"`` -> ``"CUDA"``); an
    EP without a profile loses the ``ExecutionProvider`` suffix only."""
    return profile_for(ep).display_name


def table_label(ort_version: str, source: str, *, assumed: bool = False) -> str:
    """``"ORT 1.32, live table"``, ``"ORT 1.24, snapshot cuda-ort-1.24"``; with
    ``assumed``: ``"ORT main-2026-09 assumed, snapshot ..."``; a snapshot that names no
    release keeps the mark its source carries: ``"snapshot dml-ort-1.24 (not from a
    release)"``."""
    if source.startswith("live:"):
        kind = "live table"
    elif source.startswith("snapshot:"):
        # "snapshot:<name>.tsv", with " (not from a release)" after it when it is not
        kind = "snapshot " + source.removeprefix("snapshot:").replace(".tsv", "", 1)
    else:
        kind = source
    return f"ORT {ort_version}{' assumed' if assumed else ''}, {kind}"


def _change(before: int, after: int) -> str:
    return f"{before} -> {after}" if before != after else f"{after}"


def verdict(
    *,
    ep: str,
    ort_version: str,
    table_source: str,
    source_opset: int,
    chosen_opset: int,
    memcpy: tuple[int, int],
    cpu_nodes: tuple[int, int],
    expanded: int = 0,
    assumed: bool = False,
    model: str | None = None,
) -> str:
    """The verdict line (see the module docstring).

    Args:
        memcpy, cpu_nodes: Predicted (before, after) counts.
        expanded: Nodes legalization expanded (0 when not legalized).
        model: Prefix the line with the model's name (its file name, say).
    """
    if chosen_opset < source_opset:
        opset = f"opset {source_opset} -> {chosen_opset}"
    else:
        opset = f"opset {source_opset} kept"
    if expanded:
        opset += f" ({expanded} node{'s' if expanded != 1 else ''} expanded)"
    where = f"{ep_display_name(ep)} ({table_label(ort_version, table_source, assumed=assumed)})"
    line = f"{opset} on {where}: Memcpy {_change(*memcpy)}, CPU nodes {_change(*cpu_nodes)}"
    return f"{model}: {line}" if model else line
