"""What a model looks like on an EP before and after the EP-aware lowering.

:func:`placement_report` returns a plain dict, the ``report --json`` (and ``lower
--report-json FILE``) format. Its JSON Schema ships in the package
(``onnxscript_ep_passes/reports/report.schema.json``, :func:`report_schema`); the fields::

    {"schema_version": 1,
     "model": the path given (or the graph's name),
     "ep", "ort_version", "ort_version_assumed", "ort_version_requested", "table_source",
     "table_kind": where the kernel table came from, "live" | "snapshot" | "file" | "none"
                   (:class:`~onnxscript_ep_passes.ep.kernel_table.TableKind`),
     "objective": {"kind": "estimate" | "measured", "dims": {name: size},
                   "rates": {...}},
     "candidates": [{"opset", "legalized",
                     "changes": {"relabelled", "nodes_replaced", "expanded_for_ep"},
                     "predicted": {"memcpy", "memcpy_bytes", "cpu_flops", "fallback_nodes",
                                   "cost"},
                     "measured": {"memcpy", "cpu_nodes", "latency_ms"} | null}],
     "chosen": {"opset", "legalized", "rule", "reason", "dominated": [{"opset", "legalized",
                "by": {"opset", "legalized"}}]} (why: :mod:`~onnxscript_ep_passes.passes.choice_reason`),
     "blocked": why no lower opset was reachable, or null,
     "lowest_opset": the lowest opset the search was allowed to weigh (18, or the bound
                     the caller set with ``--lowest-opset``),
     "decisions": [{"node", "op_type", "domain", "since_version", "opset",
                    "decision": "lower" | "ep_equivalent" | "expand" | "cpu", "reason"}],
     "before": {"opset", "memcpy", "memcpy_sources": {host ops: count}, "memcpy_bytes", "cpu_flops", "fallback", "falls_back",
                "shape_math", "nodes": [{"name", "op_type", "domain", "since_version",
                "placement": "ep" | "cpu", "reason", "shape_computation", "shape_math",
                "inserted_by_ort", "done"}]},
     "after": {same keys},
     "runs": null, or whether the model as given runs in a real session and, when it
             does not, which candidates do (:mod:`~onnxscript_ep_passes.reports.run_check`)}

``candidates`` lists every candidate evaluated, plain lowerings and legalized variants,
highest opset first, plain before legalized; ``changes`` says what each does to the model
(its opset import lowered, the model's nodes it replaces, those legalization expands). In
``before`` each node's ``done`` says what the chosen candidate does to it
(:func:`done_to`; null in
``after``). ``falls_back`` and ``shape_math`` split the nodes on CPU as the verdict does
(:mod:`~onnxscript_ep_passes.reports.verdict`). ``predicted.cost`` is the EP objective's
estimate in microseconds (:mod:`~onnxscript_ep_passes.ep.cost`), ``memcpy_bytes``
what the predicted Memcpy nodes move per run with the symbolic dimensions sized as
``objective.dims`` says; ``measured`` is null unless the candidate was measured in a real
session (``--measure``). ``objective.kind`` says how the choice was made.
Node names are as in the model (inlined function nodes as ORT names them). Nodes that ORT
keeps on CPU on purpose (small shape computations) carry ``"shape_computation": true``
and are not counted as fallback. ``decisions`` has one entry per node that falls back at
the source or at the chosen opset: what the pass does about it and why. ``model`` is the
name the caller gives (the file name, from the command line) or the graph's name;
``ort_version_assumed`` is true when the table is a shipped snapshot of another release
than the one named (``ort_version_requested``; null when none was named): the prediction
is for a release the user may not run.

The text form is :mod:`~onnxscript_ep_passes.reports.text`'s (:func:`format_report`,
:func:`print_report`, :func:`render_report`, re-exported here).
"""

from __future__ import annotations

__all__ = [
    "SCHEMA_VERSION",
    "WIDTH",
    "choice_report",
    "done_to",
    "format_report",
    "package_schema",
    "placement_report",
    "print_report",
    "render_report",
    "report_schema",
]

import functools
import importlib.resources
import json
import os
from typing import TYPE_CHECKING, Any

import onnx_ir as ir

from onnxscript_ep_passes.ep import cost
from onnxscript_ep_passes.ep.cost import PlacementCost
from onnxscript_ep_passes.ep.dims import DimSizes
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.placement import NodePlacement, PlacementPrediction
from onnxscript_ep_passes.ep.profiles import EpProfile
from onnxscript_ep_passes.ep.target import EpTarget, target_of
from onnxscript_ep_passes.passes.lower_for_ep import EpLoweringChoice, choose_for_target
from onnxscript_ep_passes.passes.options import SearchOptions, search_options
from onnxscript_ep_passes.reports.text import WIDTH, format_report, print_report, render_report
from onnxscript_ep_passes.reports.verdict import Figures

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from onnxscript_ep_passes.passes.options import SearchKeywords

SCHEMA_VERSION = 1


@functools.cache
def package_schema(filename: str) -> dict[str, Any]:
    """A JSON Schema shipped in the package (``report.schema.json``, ...)."""
    text = (
        importlib.resources.files("onnxscript_ep_passes.reports")
        .joinpath(filename)
        .read_text(encoding="utf-8")
    )
    schema: dict[str, Any] = json.loads(text)
    return schema


def report_schema() -> dict[str, Any]:
    """The JSON Schema of :func:`placement_report`'s output (shipped in the package)."""
    return package_schema("report.schema.json")


def done_to(choice: EpLoweringChoice, node: ir.Node) -> str:
    """What ``choice``'s chosen candidate does to the model's ``node``: ``"expanded_for_ep"``
    (legalization), ``"replaced"`` (rewritten or expanded by the lowering's adapters),
    ``"relabelled"`` (a default-domain node that resolves at the lower opset, its
    attributes possibly edited) or ``"kept"``."""
    if node in choice.expanded_nodes:
        return "expanded_for_ep"
    if node in choice.replaced_nodes:
        return "replaced"
    if choice.chosen_opset < choice.source_opset and node.domain in ("", "ai.onnx"):
        return "relabelled"
    return "kept"


def _side(
    opset: int,
    prediction: PlacementPrediction,
    cost: PlacementCost,
    choice: EpLoweringChoice | None = None,
) -> dict[str, Any]:
    """One side of the report; with ``choice`` (the model as given), each node says what
    the chosen candidate does to it (``done``)."""
    figures = Figures.of(prediction, cost)

    def done(n: NodePlacement) -> str | None:
        if choice is None or n.node is None or n.inserted_by_ort:
            return None
        return done_to(choice, n.node)

    return {
        "opset": opset,
        "memcpy": prediction.memcpy,
        "memcpy_sources": prediction.memcpy_sources(),
        "memcpy_bytes": figures.memcpy_bytes,
        "cpu_flops": figures.cpu_flops,
        "fallback": len(prediction.fallback_nodes),
        "falls_back": figures.falls_back,
        "shape_math": figures.shape_math,
        "nodes": [
            {
                "name": n.name,
                "op_type": n.op_type,
                "domain": n.domain,
                "since_version": n.since_version,
                "placement": n.placement,
                "reason": n.reason,
                "shape_computation": n.is_shape_computation,
                "shape_math": n.is_shape_math,
                "inserted_by_ort": n.inserted_by_ort,
                "done": done(n),
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


def _candidate_rows(choice: EpLoweringChoice) -> list[dict[str, Any]]:
    rows = []
    for opset in sorted({o for o, _ in choice.candidates}, reverse=True):
        for legalized in (False, True):
            candidate = choice.candidates.get((opset, legalized))
            if candidate is None:
                continue
            estimate = candidate.cost
            measured = candidate.measurement
            expanded = len(candidate.expanded)
            figures = Figures.of(candidate.prediction, estimate)
            rows.append(
                {
                    "opset": opset,
                    "legalized": legalized,
                    "changes": {
                        "relabelled": opset < choice.source_opset,
                        "nodes_replaced": candidate.replaced,
                        "expanded_for_ep": expanded,
                    },
                    "predicted": {
                        "memcpy": estimate.memcpy,
                        "memcpy_bytes": estimate.memcpy_bytes,
                        "cpu_flops": estimate.cpu_flops,
                        "fallback_nodes": estimate.fallback_nodes,
                        "falls_back": figures.falls_back,
                        "shape_math": figures.shape_math,
                        "cost": estimate.cost,
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
        "ort_version_assumed": choice.ort_version_assumed,
        "ort_version_requested": choice.ort_version_requested,
        "table_source": choice.table_source,
        "table_kind": choice.table_kind.value,
        "objective": {
            "kind": "measured"
            if any(c.measurement for c in choice.candidates.values())
            else "estimate",
            "dims": _input_dims(model, choice.dims),
            "rates": cost.rates(choice.ep),
        },
        "candidates": _candidate_rows(choice),
        "chosen": {
            "opset": choice.chosen_opset,
            "legalized": choice.legalized,
            **choice.reason.to_dict(),
        },
        "blocked": None if choice.blocked is None else str(choice.blocked),
        "lowest_opset": choice.lowest_opset,
        "decisions": [d.to_dict() for d in choice.decisions],
        "before": _side(choice.source_opset, choice.before, choice.source.cost, choice),
        "after": _side(choice.chosen_opset, choice.after, choice.after_cost),
        "runs": None,
    }


def placement_report(
    model: ir.Model,
    ep: str | EpProfile | EpTarget,
    *,
    ort_version: str | None = None,
    table: KernelTable | None = None,
    kernel_table: str | os.PathLike[str] | None = None,
    model_name: str | None = None,
    check_runs: bool = False,
    options: SearchOptions | None = None,
    **search: Unpack[SearchKeywords],
) -> dict[str, Any]:
    """Predicted placement before and after lowering for ``ep`` (the model is not changed).

    ``ep``, ``ort_version``, ``table``, ``kernel_table``, ``options`` and its keywords
    ``search`` (``target_opset``, ``legalize``, ``dims``, ``measure``, ``lowest_opset``) as for
    :class:`~onnxscript_ep_passes.passes.LowerOpsetForEpPass`; ``model_name`` is the
    report's ``model`` (the path given; default: the graph's name). ``check_runs`` (the
    ``report`` command's default) runs the model, and when it fails the candidates, in
    real ORT sessions and fills ``runs`` (:func:`~onnxscript_ep_passes.reports.run_check.run_check`).
    """
    asked = search_options(options, **search)
    target = target_of(
        ep, ort_version, table=table, kernel_table=kernel_table, measure=asked.measure
    )
    choice, _ = choose_for_target(model, target, asked)
    report = choice_report(model, choice, model_name=model_name or model.graph.name)
    if check_runs:
        from onnxscript_ep_passes.reports.run_check import run_check

        report["runs"] = run_check(model, report, target.table)
    return report
