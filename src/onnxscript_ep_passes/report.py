"""What a model looks like on an EP before and after the EP-aware lowering.

:func:`placement_report` returns a plain dict, the ``report --json`` (and ``lower
--report-json FILE``) format. Its JSON Schema ships in the package
(``onnxscript_ep_passes/report.schema.json``, :func:`report_schema`); the fields::

    {"schema_version": 1,
     "model": the path given (or the graph's name),
     "ep", "ort_version", "ort_version_assumed", "ort_version_requested", "table_source",
     "objective": {"kind": "estimate" | "measured", "dims": {name: size},
                   "rates": {...}},
     "candidates": [{"opset", "legalized",
                     "predicted": {"memcpy", "memcpy_bytes", "fallback_nodes", "cost"},
                     "measured": {"memcpy", "cpu_nodes", "latency_ms"} | null}],
     "chosen": {"opset", "legalized"},
     "blocked": why no lower opset was reachable, or null,
     "lowest_opset": the lowest opset the search was allowed to weigh (18, or the bound
                     the caller set with ``--lowest-opset``),
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
the source or at the chosen opset: what the pass does about it and why. ``model`` is the
name the caller gives (the file name, from the command line) or the graph's name;
``ort_version_assumed`` is true when the table is a shipped snapshot of another release
than the one named (``ort_version_requested``; null when none was named): the prediction
is for a release the user may not run.

The text form (:func:`format_report`, :func:`print_report`, rendered with rich) reads
top-down:

1. the verdict line (:mod:`~onnxscript_ep_passes.verdict`), a note when the ORT
   release is assumed, and one when ORT's own default-domain ops (which ONNX does not
   define, e.g. SimplifiedLayerNormalization) are carried through unchanged;
2. the candidates table: each opset reached, with its predicted cost, the chosen one
   marked;
3. why no lower opset was reachable, when one was not (the first offending nodes), or
   that the caller's ``lowest_opset`` bounded the search;
4. the per-op table, before and after, of the ops whose placement changes (every op with
   ``show_all``);
5. the decisions about nodes the EP cannot run, grouped by (op, decision, reason) with a
   count and a few node names.

Colour is used only when the output is a terminal (rich's detection; ``NO_COLOR`` is
honoured).
"""

from __future__ import annotations

__all__ = [
    "SCHEMA_VERSION",
    "choice_report",
    "format_report",
    "package_schema",
    "placement_report",
    "print_report",
    "render_report",
    "report_schema",
]

import collections
import dataclasses
import functools
import importlib.resources
import io
import json
import os
import sys
from typing import IO, Any

import onnx_ir as ir
from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from onnxscript_ep_passes.ep import cost
from onnxscript_ep_passes.ep.dims import DimSizes, DimsSpec
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.placement import PlacementPrediction
from onnxscript_ep_passes.ep.table_choice import release_assumed
from onnxscript_ep_passes.ep.table_source import resolve_table
from onnxscript_ep_passes.lowering.lower_opset import MIN_TARGET_OPSET
from onnxscript_ep_passes.lowering.ort_kernels import ort_only
from onnxscript_ep_passes.passes.lower_for_ep import EpLoweringChoice, choose_target_opset
from onnxscript_ep_passes.verdict import ep_display_name, verdict

SCHEMA_VERSION = 1


@functools.cache
def package_schema(filename: str) -> dict[str, Any]:
    """A JSON Schema shipped in the package (``report.schema.json``, ...)."""
    text = (
        importlib.resources.files("onnxscript_ep_passes")
        .joinpath(filename)
        .read_text(encoding="utf-8")
    )
    schema: dict[str, Any] = json.loads(text)
    return schema


def report_schema() -> dict[str, Any]:
    """The JSON Schema of :func:`placement_report`'s output (shipped in the package)."""
    return package_schema("report.schema.json")


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


def _candidate_rows(choice: EpLoweringChoice) -> list[dict[str, Any]]:
    rows = []
    for opset in sorted(set(choice.predictions) | set(choice.legalized_predictions), reverse=True):
        for legalized, costs in ((False, choice.costs), (True, choice.legalized_costs)):
            if opset not in costs:
                continue
            estimate = costs[opset]
            measured = choice.measured.get((opset, legalized))
            rows.append(
                {
                    "opset": opset,
                    "legalized": legalized,
                    "predicted": {
                        "memcpy": estimate.memcpy,
                        "memcpy_bytes": estimate.memcpy_bytes,
                        "fallback_nodes": estimate.fallback_nodes,
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
        "objective": {
            "kind": "measured" if choice.measured else "estimate",
            "dims": _input_dims(model, choice.dims),
            "rates": cost.rates(choice.ep),
        },
        "candidates": _candidate_rows(choice),
        "chosen": {"opset": choice.chosen_opset, "legalized": choice.legalized},
        "blocked": None if choice.blocked is None else str(choice.blocked),
        "lowest_opset": choice.lowest_opset,
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
    dims: DimsSpec = None,
    measure: bool = False,
    kernel_table: str | os.PathLike[str] | None = None,
    model_name: str | None = None,
    lowest_opset: int | None = None,
) -> dict[str, Any]:
    """Predicted placement before and after lowering for ``ep`` (the model is not changed).

    ``legalize``, ``dims``, ``measure``, ``kernel_table`` and ``lowest_opset`` as for
    :class:`~onnxscript_ep_passes.passes.LowerOpsetForEpPass`; ``model_name`` is the
    report's ``model`` (the path given; default: the graph's name).
    """
    given = table is not None or kernel_table is not None
    if table is None:
        table = resolve_table(ep, ort_version, kernel_table=kernel_table, measure=measure)
    choice = choose_target_opset(
        model,
        table,
        target_opset=target_opset,
        lowest_opset=lowest_opset,
        legalize=legalize,
        dims=dims,
        measure=measure,
    )
    choice = dataclasses.replace(
        choice,
        ort_version_assumed=not given and release_assumed(table, ort_version),
        ort_version_requested=ort_version,
    )
    return choice_report(model, choice, model_name=model_name or model.graph.name)


# -- text ----------------------------------------------------------------------------------

_MAX_BLOCKED_LINES = 5
_FIGURE_NAMES = {"fallback": "CPU nodes", "memcpy": "Memcpy"}
_MAX_NODE_NAMES = 3


def _verdict(report: dict[str, Any], model_name: str | None) -> str:
    before, after = report["before"], report["after"]
    expanded = 0
    if report["chosen"]["legalized"]:
        expanded = sum(1 for d in report.get("decisions") or () if d["decision"] == "expand")
    return verdict(
        ep=report["ep"],
        ort_version=report["ort_version"],
        table_source=report["table_source"],
        source_opset=before["opset"],
        chosen_opset=after["opset"],
        memcpy=(before["memcpy"], after["memcpy"]),
        cpu_nodes=(before["fallback"], after["fallback"]),
        expanded=expanded,
        assumed=bool(report.get("ort_version_assumed")),
        model=model_name or os.path.basename(report.get("model") or "") or None,
    )


def _candidates(report: dict[str, Any]) -> Table:
    table = Table(title="candidates", title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("opset", "CPU nodes", "Memcpy", "bytes moved", "est. us"):
        table.add_column(name, justify="right")
    measured = any(c["measured"] for c in report["candidates"])
    if measured:
        for name in ("measured Memcpy", "measured ms"):
            table.add_column(name, justify="right")
    table.add_column("")
    chosen = report["chosen"]
    for c in report["candidates"]:
        p, m = c["predicted"], c["measured"]
        row = [
            f"{c['opset']}{' legalized' if c['legalized'] else ''}",
            str(p["fallback_nodes"]),
            str(p["memcpy"]),
            str(p["memcpy_bytes"]),
            f"{p['cost']:.1f}",
        ]
        if measured:
            row += ["", ""] if m is None else [str(m["memcpy"]), f"{m['latency_ms']:.2f}"]
        is_chosen = c["opset"] == chosen["opset"] and c["legalized"] == chosen["legalized"]
        mark = "chosen (legalized)" if c["legalized"] else "chosen"
        row.append(mark if is_chosen else "")
        table.add_row(*row, style="bold" if is_chosen else None)
    return table


def _op_key(node: dict[str, Any]) -> str:
    return f"{node['domain']}::{node['op_type']}" if node["domain"] else node["op_type"]


def _placement_counts(side: dict[str, Any]) -> dict[str, collections.Counter[str]]:
    counts: dict[str, collections.Counter[str]] = {}
    for node in side["nodes"]:
        label = "shape" if node.get("shape_computation") else node["placement"]
        counts.setdefault(_op_key(node), collections.Counter())[label] += 1
    return counts


def _op_table(report: dict[str, Any], show_all: bool) -> Table | Text:
    before = _placement_counts(report["before"])
    after = _placement_counts(report["after"])
    empty: collections.Counter[str] = collections.Counter()
    labels = ("ep", "cpu", "shape")
    rows = []
    for op in sorted({*before, *after}):
        b, a = before.get(op, empty), after.get(op, empty)
        if show_all or any(b[label] != a[label] for label in labels):
            rows.append((op, b, a))
    if not rows:
        return Text("placement per op: unchanged (--all lists every op)")
    title = "placement per op" + ("" if show_all else ", ops that change (--all lists every op)")
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("op")
    for side in ("before", "after"):
        opset = report[side]["opset"]
        table.add_column(f"{side} (opset {opset}): EP", justify="right")
        table.add_column("CPU", justify="right")
        table.add_column("shape", justify="right")
    for op, b, a in rows:
        cells = [str(b[label] or "") for label in labels] + [
            str(a[label] or "") for label in labels
        ]
        table.add_row(op, *cells, style="red" if a["cpu"] else None)
    return table


def _decisions(report: dict[str, Any]) -> Table | None:
    decisions = report.get("decisions") or []
    if not decisions:
        return None
    groups: dict[tuple[str, str, str], list[str]] = {}
    for d in decisions:
        op = _op_key(d) + (f"-{d['since_version']}" if d["since_version"] is not None else "")
        groups.setdefault((op, d["decision"], d["reason"]), []).append(d["node"] or "<unnamed>")
    table = Table(
        title="decisions about the nodes the EP cannot run",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for name, justify in (("nodes", "right"), ("op", "left"), ("decision", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_column("e.g.")
    table.add_column("why")
    style = {"cpu": "red", "lower": "green", "expand": "cyan", "ep_equivalent": "green"}
    for (op, decision, reason), nodes in sorted(groups.items(), key=lambda g: -len(g[1])):
        shown = ", ".join(nodes[:_MAX_NODE_NAMES]) + (
            ", ..." if len(nodes) > _MAX_NODE_NAMES else ""
        )
        table.add_row(
            str(len(nodes)), op, Text(decision, style=style.get(decision, "")), shown, reason
        )
    return table


def render_report(
    report: dict[str, Any], *, model_name: str | None = None, show_all: bool = False
) -> RenderableType:
    """The text report of :func:`placement_report`'s dict, as one rich renderable."""
    parts: list[RenderableType] = [Text(_verdict(report, model_name), style="bold")]
    if report.get("ort_version_assumed"):
        ep_name, requested = ep_display_name(report["ep"]), report.get("ort_version_requested")
        if requested:
            note = (
                f"note: no {ep_name} table of ORT {requested} is shipped, so ORT "
                f"{report['ort_version']} is assumed (the nearest shipped release at or below "
                "it, or the oldest); the prediction can differ for yours"
            )
        else:
            note = (
                f"note: no ORT release given, so ORT {report['ort_version']} is assumed for "
                f"{ep_name} (its shipped table); the prediction can differ for yours: pass "
                "--ort-version"
            )
        parts.append(Text(note, style="yellow"))
    ops_in_model = collections.Counter(
        (n["op_type"], n["domain"]) for n in report["before"]["nodes"]
    )
    carried = {op: count for (op, domain), count in ops_in_model.items() if ort_only(op, domain)}
    if carried:
        ops = ", ".join(f"{op} x{count}" for op, count in sorted(carried.items()))
        parts.append(
            Text(
                f"note: carried unchanged, placed by the kernel table: {ops} "
                "(ONNX Runtime's own ops in the ONNX domain; ONNX does not define them)"
            )
        )
    parts.append(_candidates(report))
    if report.get("blocked"):
        lines = str(report["blocked"]).splitlines()
        parts.append(Text(f"lower opsets are out of reach: {lines[0]}"))
        for line in lines[1 : 1 + _MAX_BLOCKED_LINES]:
            parts.append(Text(f"  {line.strip()}", no_wrap=True, overflow="ellipsis"))
        if len(lines) - 1 > _MAX_BLOCKED_LINES:
            parts.append(Text(f"  ... and {len(lines) - 1 - _MAX_BLOCKED_LINES} more"))
    lowest = report.get("lowest_opset", MIN_TARGET_OPSET)
    if lowest > MIN_TARGET_OPSET and min(c["opset"] for c in report["candidates"]) == lowest:
        parts.append(Text(f"opsets below {lowest} were not weighed (--lowest-opset {lowest})"))
    parts.append(_op_table(report, show_all))
    decisions = _decisions(report)
    if decisions is not None:
        parts.append(decisions)
    return Group(*parts)


def print_report(
    report: dict[str, Any],
    *,
    model_name: str | None = None,
    show_all: bool = False,
    file: IO[str] | None = None,
) -> None:
    """Print the text report to ``file`` (stdout), in colour when it is a terminal."""
    out = file or sys.stdout
    terminal = out.isatty()
    console = Console(file=out, width=None if terminal else 160, highlight=False)
    console.print(render_report(report, model_name=model_name, show_all=show_all))


def format_report(
    report: dict[str, Any], *, model_name: str | None = None, show_all: bool = False
) -> str:
    """The text report as plain text (no colour)."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=160, color_system=None, highlight=False)
    console.print(render_report(report, model_name=model_name, show_all=show_all))
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()).strip("\n")
