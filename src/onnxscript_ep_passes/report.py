"""What a model looks like on an EP before and after the EP-aware lowering.

:func:`placement_report` returns a plain dict, the ``report --json`` (and ``lower
--report-json FILE``) format. Its JSON Schema ships in the package
(``onnxscript_ep_passes/report.schema.json``, :func:`report_schema`); the fields::

    {"schema_version": 1,
     "model": the path given (or the graph's name),
     "ep", "ort_version", "table_source",
     "objective": {"kind": "estimate" | "measured", "dims": {name: size},
                   "rates": {...}},
     "candidates": [{"opset", "legalized",
                     "predicted": {"memcpy", "memcpy_bytes", "fallback_nodes", "cost"},
                     "measured": {"memcpy", "cpu_nodes", "latency_ms"} | null}],
     "chosen": {"opset", "legalized"},
     "blocked": why no lower opset was reachable, or null,
     "decisions": [{"node", "op_type", "domain", "since_version", "opset",
                    "decision": "lower" | "ep_equivalent" | "expand" | "cpu", "reason"}],
     "before": {"opset", "memcpy", "fallback", "nodes": [{"name", "op_type", "domain",
                "since_version", "placement": "ep" | "cpu", "reason",
                "shape_computation", "inserted_by_ort"}]},
     "after": {same keys}}

``candidates`` lists every candidate evaluated, plain lowerings and legalized variants,
highest opset first, plain before legalized. ``predicted.cost`` is the EP objective's
estimate in microseconds (:mod:`~onnxscript_ep_passes.ep.cost`), ``memcpy_bytes``
what the predicted Memcpy nodes move per run with the symbolic dimensions sized as
``objective.dims`` says; ``measured`` is null unless the candidate was measured in a real
session (``--measure``). ``objective.kind`` says how the choice was made.
Node names are as in the model (inlined function nodes as ORT names them). Nodes that ORT
keeps on CPU on purpose (small shape computations) carry ``"shape_computation": true``
and are not counted as fallback. ``decisions`` has one entry per node that falls back at
the source or at the chosen opset: what the pass does about it and why.
"""

from __future__ import annotations

__all__ = ["SCHEMA_VERSION", "choice_report", "format_report", "placement_report", "report_schema"]

import collections
import functools
import importlib.resources
import json
import os
from collections.abc import Mapping
from typing import Any

import onnx_ir as ir

from onnxscript_ep_passes.ep import cost
from onnxscript_ep_passes.ep.dims import DimSizes
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.placement import PlacementPrediction
from onnxscript_ep_passes.ep.table_source import resolve_table
from onnxscript_ep_passes.passes.lower_for_ep import EpLoweringChoice, choose_target_opset

SCHEMA_VERSION = 1


@functools.cache
def report_schema() -> dict[str, Any]:
    """The JSON Schema of :func:`placement_report`'s output (shipped in the package)."""
    text = (
        importlib.resources.files("onnxscript_ep_passes")
        .joinpath("report.schema.json")
        .read_text(encoding="utf-8")
    )
    schema: dict[str, Any] = json.loads(text)
    return schema


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


def _input_dims(model: ir.Model, sizes: DimSizes) -> dict[str, int]:
    """The size the objective gives each symbolic dimension of the model's inputs."""
    dims: dict[str, int] = dict(sizes.bindings)
    for value in model.graph.inputs:
        for dim in value.shape or ():
            name = getattr(dim, "value", None)
            if isinstance(name, str) and name:
                dims.setdefault(name, sizes.named(name))
    return dims


def _candidates(choice: EpLoweringChoice) -> list[dict[str, Any]]:
    rows = []
    for opset in sorted(set(choice.predictions) | set(choice.legalized_predictions), reverse=True):
        for legalized, predictions, costs in (
            (False, choice.predictions, choice.costs),
            (True, choice.legalized_predictions, choice.legalized_costs),
        ):
            if opset not in predictions:
                continue
            cost = costs[opset]
            measured = choice.measured.get((opset, legalized))
            rows.append(
                {
                    "opset": opset,
                    "legalized": legalized,
                    "predicted": {
                        "memcpy": cost.memcpy,
                        "memcpy_bytes": cost.memcpy_bytes,
                        "fallback_nodes": cost.fallback_nodes,
                        "cost": cost.cost,
                    },
                    "measured": None if measured is None else measured.to_dict(),
                }
            )
    return rows


def choice_report(
    model: ir.Model, choice: EpLoweringChoice, *, model_name: str | None = None
) -> dict[str, Any]:
    """The report (module docstring) of a choice already made for ``model``."""
    return {
        "schema_version": SCHEMA_VERSION,
        "model": model_name if model_name is not None else (model.graph.name or ""),
        "ep": choice.ep,
        "ort_version": choice.ort_version,
        "table_source": choice.table_source,
        "objective": {
            "kind": "measured" if choice.measured else "estimate",
            "dims": _input_dims(model, choice.dims),
            "rates": cost.rates(),
        },
        "candidates": _candidates(choice),
        "chosen": {"opset": choice.chosen_opset, "legalized": choice.legalized},
        "blocked": None if choice.blocked is None else str(choice.blocked),
        "decisions": [d.to_dict() for d in choice.decisions],
        "before": _side(choice.source_opset, choice.before),
        "after": _side(choice.chosen_opset, choice.after),
    }


def placement_report(
    model: ir.Model,
    ep: str,
    *,
    ort_version: str | None = None,
    target_opset: int | None = None,
    table: KernelTable | None = None,
    legalize: bool = True,
    dims: DimSizes | Mapping[str, int] | str | None = None,
    measure: bool = False,
    kernel_table: str | os.PathLike[str] | None = None,
    model_name: str | None = None,
) -> dict[str, Any]:
    """Predicted placement before and after lowering for ``ep`` (the model is not changed).

    ``legalize``, ``dims``, ``measure`` and ``kernel_table`` as for
    :class:`~onnxscript_ep_passes.passes.LowerOpsetForEpPass`; ``model_name`` is the
    report's ``model`` (the path given; default: the graph's name).
    """
    table = (
        table
        if table is not None
        else resolve_table(ep, ort_version, kernel_table=kernel_table, measure=measure)
    )
    choice = choose_target_opset(
        model, table, target_opset=target_opset, legalize=legalize, dims=dims, measure=measure
    )
    return choice_report(model, choice, model_name=model_name)


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
        "candidates (opset[L: legalized]: fallback nodes, Memcpy, estimated us"
        "[, measured Memcpy, ms]): " + ", ".join(_candidate_text(c) for c in report["candidates"]),
    ]
    if report["blocked"]:
        lines.append("lowest reachable opset is limited by:")
        lines.extend(f"    {line}" for line in report["blocked"].splitlines()[1:])
    for title in ("before", "after"):
        side = report[title]
        legal = " (legalized)" if title == "after" and report["chosen"]["legalized"] else ""
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


def _candidate_text(candidate: dict[str, Any]) -> str:
    predicted, measured = candidate["predicted"], candidate["measured"]
    text = (
        f"{candidate['opset']}{'L' if candidate['legalized'] else ''}: "
        f"{predicted['fallback_nodes']}, {predicted['memcpy']}, {predicted['cost']:.0f}"
    )
    if measured is not None:
        text += f", measured {measured['memcpy']}, {measured['latency_ms']:.2f} ms"
    return text


def _decision_lines(decisions: list[dict[str, Any]]) -> list[str]:
    lines = []
    for d in decisions:
        op = f"{d['domain']}::{d['op_type']}" if d["domain"] else d["op_type"]
        version = f"-{d['since_version']}" if d["since_version"] is not None else ""
        lines.append(
            f"    {d['node'] or '<unnamed>'} ({op}{version}): {d['decision']}: {d['reason']}"
        )
    return lines
