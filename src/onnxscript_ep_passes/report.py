"""What a model looks like on an EP before and after the EP-aware lowering.

:func:`placement_report` returns a plain dict (the ``report --json`` format)::

    {"ep", "ort_version", "table_source", "chosen_opset", "blocked",
     "candidates": {opset: {"fallback", "memcpy"}},
     "legalized": bool,
     "legalized_candidates": {opset: {"fallback", "memcpy", "expanded"}},
     "decisions": [{"node", "op_type", "domain", "since_version", "opset",
                    "decision": "lower" | "ep_equivalent" | "expand" | "cpu", "reason"}],
     "before": {"opset", "memcpy", "nodes": [{"name", "op_type", "domain",
                "since_version", "placement": "ep" | "cpu", "reason"}]},
     "after": {same keys}}

Node names are as in the model (inlined function nodes as ORT names them). Nodes that ORT
keeps on CPU on purpose (small shape computations) carry ``"shape_computation": true``
and are not counted as fallback. ``candidates`` are the plain opset lowerings;
``legalized_candidates`` the legalized variants that differ from them (see
:mod:`~onnxscript_ep_passes.passes.legalize`), with the number of nodes each expands;
``legalized`` tells whether the chosen one (``after``) is legalized. ``decisions`` has one
entry per node that falls back at the source or at the chosen opset: what the pass does
about it and why.
"""

from __future__ import annotations

__all__ = ["format_report", "placement_report"]

import collections
from typing import Any

import onnx_ir as ir

from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.names import canonical_ep_name
from onnxscript_ep_passes.ep.placement import PlacementPrediction
from onnxscript_ep_passes.ep.table_choice import get_table
from onnxscript_ep_passes.passes.lower_for_ep import choose_target_opset


def _side(opset: int, prediction: PlacementPrediction) -> dict[str, Any]:
    return {
        "opset": opset,
        "memcpy": prediction.memcpy,
        "fallback": len(prediction.fallback_nodes),
        "nodes": [
            {
                "name": n.name,
                "op_type": n.op_type,
                "domain": n.domain,
                "since_version": n.since_version,
                "placement": n.placement,
                "reason": n.reason,
                "shape_computation": n.is_shape_computation,
                "inserted_by_ort": n.inserted_by_ort,
            }
            for n in prediction.nodes
        ],
    }


def placement_report(
    model: ir.Model,
    ep: str,
    *,
    ort_version: str | None = None,
    target_opset: int | None = None,
    table: KernelTable | None = None,
    legalize: bool = True,
) -> dict[str, Any]:
    """Predicted placement before and after lowering for ``ep`` (the model is not changed).

    ``legalize`` as for :class:`~onnxscript_ep_passes.passes.LowerOpsetForEpPass`.
    """
    table = table or get_table(canonical_ep_name(ep), ort_version)
    choice = choose_target_opset(model, table, target_opset=target_opset, legalize=legalize)
    return {
        "ep": table.ep,
        "ort_version": table.ort_version,
        "table_source": table.source,
        "chosen_opset": choice.chosen_opset,
        "blocked": None if choice.blocked is None else str(choice.blocked),
        "candidates": {
            str(opset): {"fallback": len(p.fallback_nodes), "memcpy": p.memcpy}
            for opset, p in sorted(choice.predictions.items(), reverse=True)
        },
        "legalized": choice.legalized,
        "legalized_candidates": {
            str(opset): {
                "fallback": len(p.fallback_nodes),
                "memcpy": p.memcpy,
                "expanded": len(choice.plan.get(opset, ())),
            }
            for opset, p in sorted(choice.legalized_predictions.items(), reverse=True)
        },
        "decisions": [d.to_dict() for d in choice.decisions],
        "before": _side(choice.source_opset, choice.before),
        "after": _side(choice.chosen_opset, choice.after),
    }


def _op_table(side: dict[str, Any]) -> list[str]:
    counts: dict[str, collections.Counter[str]] = {}
    reasons: dict[str, set[str]] = {}
    for node in side["nodes"]:
        key = f"{node['domain'] + '::' if node['domain'] else ''}{node['op_type']}"
        label = "shape" if node["shape_computation"] else node["placement"]
        counts.setdefault(key, collections.Counter())[label] += 1
        if node["placement"] == "cpu" and not node["shape_computation"]:
            reasons.setdefault(key, set()).add(node["reason"])
    width = max((len(k) for k in counts), default=2)
    lines = [f"    {'op'.ljust(width)}  {'EP':>5} {'CPU':>5} {'shape':>5}  why on CPU"]
    for key in sorted(counts):
        c = counts[key]
        why = "; ".join(sorted(reasons.get(key, ())))
        lines.append(f"    {key.ljust(width)}  {c['ep']:>5} {c['cpu']:>5} {c['shape']:>5}  {why}")
    return lines


def format_report(report: dict[str, Any]) -> str:
    """The human-readable form of :func:`placement_report`'s dict."""
    lines = [
        f"EP {report['ep']} (ORT {report['ort_version']}, table {report['table_source']})",
        "candidates (opset: fallback nodes, Memcpy): "
        + ", ".join(
            f"{o}: {c['fallback']}, {c['memcpy']}" for o, c in report["candidates"].items()
        ),
    ]
    legalized = report.get("legalized_candidates") or {}
    if legalized:
        lines.append(
            "legalized candidates (opset: fallback nodes, Memcpy, nodes expanded): "
            + ", ".join(
                f"{o}: {c['fallback']}, {c['memcpy']}, {c['expanded']}"
                for o, c in legalized.items()
            )
        )
    if report["blocked"]:
        lines.append("lowest reachable opset is limited by:")
        lines.extend(f"    {line}" for line in report["blocked"].splitlines()[1:])
    for title in ("before", "after"):
        side = report[title]
        legal = " (legalized)" if title == "after" and report.get("legalized") else ""
        lines.append(
            f"{title}: opset {side['opset']}{legal}, {side['fallback']} fallback nodes, "
            f"~{side['memcpy']} Memcpy nodes"
        )
        lines.extend(_op_table(side))
    decisions = report.get("decisions") or []
    if decisions:
        lines.append("decisions for the nodes the EP cannot run (node (op): decision: why):")
        lines.extend(_decision_lines(decisions))
    return "\n".join(lines)


def _decision_lines(decisions: list[dict[str, Any]]) -> list[str]:
    lines = []
    for d in decisions:
        op = f"{d['domain']}::{d['op_type']}" if d["domain"] else d["op_type"]
        version = f"-{d['since_version']}" if d["since_version"] is not None else ""
        lines.append(
            f"    {d['node'] or '<unnamed>'} ({op}{version}): {d['decision']}: {d['reason']}"
        )
    return lines
