"""The text report: :func:`~onnxscript_ep_passes.reports.report.placement_report`'s dict for people.

The text form (:func:`format_report`, :func:`print_report`, rendered with rich) reads
top-down:

1. the verdict line (:mod:`~onnxscript_ep_passes.reports.verdict`; one line, never wrapped), a
   note when the ORT release is assumed, whether the model runs as given (and which
   candidates do when it does not), and a note when ORT's own default-domain ops (which
   ONNX does not define, e.g. SimplifiedLayerNormalization) are carried through unchanged;
2. the candidates table: each opset reached, with its predicted Memcpy, bytes, CPU work,
   fallbacks and cost, what it does to the model, the chosen one marked ``*``;
3. why no lower opset was reachable, when one was not (the first offending nodes), or
   that the caller's ``lowest_opset`` bounded the search;
4. the per-op table, before and after, of the ops whose placement changes (every op with
   ``show_all``);
5. the decisions about nodes the EP cannot run, grouped by (op, decision, reason) with a
   count and a few node names, the reason wrapped below with no parenthesised kernel list
   broken.

The text is :data:`WIDTH` (100) columns wide (a narrower terminal's width wins); counts
are written as numbers, 0 included; the model's strings are shown with control characters
escaped (:func:`~onnxscript_ep_passes.core.display.shown`). Colour is used only when the output
is a terminal (rich's detection; ``NO_COLOR`` is honoured).
"""

from __future__ import annotations

__all__ = ["WIDTH", "format_report", "print_report", "render_report"]

import collections
import io
import os
import sys
import textwrap
from typing import IO, Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from onnxscript_ep_passes.core.display import shown, shown_lines
from onnxscript_ep_passes.ep.kernel_table import TableKind
from onnxscript_ep_passes.lowering.lower_opset import MIN_TARGET_OPSET
from onnxscript_ep_passes.lowering.ort_kernels import ort_only
from onnxscript_ep_passes.reports.verdict import Figures, ep_display_name, quantity, verdict

WIDTH = 100
"""The text report's width: it reads well at 100 columns (a narrower terminal's width
wins)."""

_MAX_BLOCKED_LINES = 5
_MAX_NODE_NAMES = 3
_NBSP = "\u00a0"  # holds a kernel range list together while a reason is wrapped


def _figures(side: dict[str, Any]) -> Figures:
    return Figures(
        memcpy=side["memcpy"],
        memcpy_bytes=side.get("memcpy_bytes", 0),
        cpu_flops=side.get("cpu_flops", 0.0),
        falls_back=side.get("falls_back", side["fallback"]),
        shape_math=side.get("shape_math", 0),
    )


def _verdict(report: dict[str, Any], model_name: str | None) -> str:
    before, after = report["before"], report["after"]
    expanded = 0
    if report["chosen"]["legalized"]:
        expanded = sum(1 for d in report.get("decisions") or () if d["decision"] == "expand")
    return verdict(
        ep=report["ep"],
        ort_version=report["ort_version"],
        table_kind=TableKind(report["table_kind"]),
        table_source=report["table_source"],
        source_opset=before["opset"],
        chosen_opset=after["opset"],
        before=_figures(before),
        after=_figures(after),
        expanded=expanded,
        assumed=bool(report.get("ort_version_assumed")),
        model=model_name or os.path.basename(report.get("model") or "") or None,
    )


def _changes(c: dict[str, Any]) -> str:
    """What the candidate does to the model, in words (``relabelled, 2 replaced``)."""
    changes = c.get("changes") or {}
    words = []
    if changes.get("relabelled"):
        words.append("relabelled")
    replaced = changes.get("nodes_replaced", 0)
    expanded = changes.get("expanded_for_ep", 0)
    if replaced - expanded > 0:
        words.append(f"{replaced - expanded} replaced")
    if expanded:
        words.append(f"{expanded} expanded")
    return ", ".join(words) or "as given"


def _candidates(report: dict[str, Any]) -> Table:
    table = Table(
        title="candidates (predicted; bytes moved and CPU work per run)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
    )
    table.add_column("opset", justify="right")
    for name in ("Memcpy", "moved", "CPU work", "fall\nback", "shape\nmath", "est. us"):
        table.add_column(name, justify="right")
    measured = any(c["measured"] for c in report["candidates"])
    if measured:
        for name in ("measured\nMemcpy", "measured\nms"):
            table.add_column(name, justify="right")
    table.add_column("changes (* chosen)", no_wrap=True)
    chosen = report["chosen"]
    for c in report["candidates"]:
        p, m = c["predicted"], c["measured"]
        is_chosen = c["opset"] == chosen["opset"] and c["legalized"] == chosen["legalized"]
        row = [
            f"{'* ' if is_chosen else ''}{c['opset']}{' legalized' if c['legalized'] else ''}",
            str(p["memcpy"]),
            quantity(p["memcpy_bytes"], "B"),
            quantity(p.get("cpu_flops", 0.0), "FLOP"),
            str(p.get("falls_back", p["fallback_nodes"])),
            str(p.get("shape_math", 0)),
            f"{p['cost']:.1f}",
        ]
        if measured:
            row += ["-", "-"] if m is None else [str(m["memcpy"]), f"{m['latency_ms']:.2f}"]
        row.append(_changes(c))
        table.add_row(*row, style="bold" if is_chosen else None)
    return table


def _op_key(node: dict[str, Any]) -> str:
    return shown(f"{node['domain']}::{node['op_type']}" if node["domain"] else node["op_type"])


_LABELS = ("ep", "cpu", "shape")


def _label(node: dict[str, Any]) -> str:
    if node["placement"] == "ep":
        return "ep"
    math = node.get("shape_math", node.get("shape_computation"))
    return "shape" if math else "cpu"


def _placement_counts(side: dict[str, Any]) -> dict[str, collections.Counter[str]]:
    counts: dict[str, collections.Counter[str]] = {}
    for node in side["nodes"]:
        counts.setdefault(_op_key(node), collections.Counter())[_label(node)] += 1
    return counts


def _op_table(report: dict[str, Any], show_all: bool) -> RenderableType:
    before = _placement_counts(report["before"])
    after = _placement_counts(report["after"])
    empty: collections.Counter[str] = collections.Counter()
    rows = []
    for op in sorted({*before, *after}):
        b, a = before.get(op, empty), after.get(op, empty)
        if show_all or any(b[label] != a[label] for label in _LABELS):
            rows.append((op, b, a))
    if not rows:
        return Text("placement per op: unchanged (--all lists every op)")
    opsets = f"opset {report['before']['opset']} -> {report['after']['opset']}"
    which = "every op" if show_all else "ops that change (--all lists every op)"
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    table.add_column("op")
    for side in ("before", "after"):
        for label in ("EP", "CPU", "shape"):
            table.add_column(f"{side}\n{label}", justify="right")
    for op, b, a in rows:
        cells = [str(b[label]) for label in _LABELS] + [str(a[label]) for label in _LABELS]
        table.add_row(op, *cells, style="red" if a["cpu"] else None)
    title = Text(f"placement per op, {opsets}: {which}", style="italic")
    legend = Text("EP: on the EP; CPU: falls back (no EP kernel); shape: shape math on CPU")
    return Group(title, table, legend)


def _unbroken_lists(reason: str) -> str:
    """A reason whose parenthesised kernel lists (``(registered: [1, 4], 23+)``) cannot be
    broken when wrapped."""
    out, depth = [], 0
    for char in reason:
        depth += char == "("
        depth -= char == ")"
        out.append(_NBSP if char == " " and depth > 0 else char)
    return "".join(out)


def _decisions(report: dict[str, Any], width: int) -> Text | None:
    decisions = report.get("decisions") or []
    if not decisions:
        return None
    groups: dict[tuple[str, str, str], list[str]] = {}
    for d in decisions:
        op = _op_key(d) + (f"-{d['since_version']}" if d["since_version"] is not None else "")
        name = shown(d["node"]) if d["node"] else "<unnamed>"
        groups.setdefault((op, d["decision"], shown(d["reason"])), []).append(name)
    style = {"cpu": "red", "lower": "green", "expand": "cyan", "ep_equivalent": "green"}
    text = Text()
    text.append("decisions about the nodes the EP cannot run", style="italic")
    for (op, decision, reason), nodes in sorted(groups.items(), key=lambda g: -len(g[1])):
        shown_nodes = ", ".join(nodes[:_MAX_NODE_NAMES]) + (
            ", ..." if len(nodes) > _MAX_NODE_NAMES else ""
        )
        head = f"{len(nodes)} x {op}: {decision}"
        text.append(f"\n  {len(nodes)} x {op}: ")
        text.append(decision, style=style.get(decision, ""))
        example = textwrap.wrap(
            f"{head} (e.g. {shown_nodes})",
            width=max(width - 2, 40),
            subsequent_indent="    ",
            break_long_words=False,
            break_on_hyphens=False,
        )
        text.append(example[0][len(head) :])
        for line in example[1:]:
            text.append("\n  " + line)
        wrapped = textwrap.wrap(
            _unbroken_lists(reason),
            width=max(width - 6, 40),
            break_long_words=False,
            break_on_hyphens=False,
        )
        for line in wrapped:
            text.append("\n      " + line.replace(_NBSP, " "))
    return text


def _runs(report: dict[str, Any]) -> list[Text]:
    runs = report.get("runs")
    if not runs:
        return []
    dims = ", ".join(f"{k}={v}" for k, v in sorted(runs["dims"].items()))
    at = f" ({dims})" if dims else ""
    given = runs["input"]
    if runs.get("skipped"):
        return [Text(shown(runs["skipped"]))]
    if given["ok"]:
        return [Text(f"runs on ORT's CPU EP as given{at}: yes")]
    lines = [
        Text(
            f"the model as given does not run on ORT's CPU EP{at}: {shown(given['error'])}",
            style="red",
        )
    ]
    repaired = [c for c in runs["candidates"] if c["ok"]]
    failed = [c for c in runs["candidates"] if not c["ok"]]
    chosen = report["chosen"]

    def name(c: dict[str, Any]) -> str:
        mark = (
            " (chosen)"
            if (c["opset"], c["legalized"]) == (chosen["opset"], chosen["legalized"])
            else ""
        )
        return f"opset {c['opset']}{' legalized' if c['legalized'] else ''}{mark}"

    if repaired:
        lines.append(
            Text(
                "these candidates run (the lowering repairs it): "
                + ", ".join(name(c) for c in repaired),
                style="green",
            )
        )
    if failed:
        lines.append(Text("these fail too: " + ", ".join(name(c) for c in failed)))
    return lines


def _sources(side: dict[str, Any]) -> str:
    sources = side.get("memcpy_sources") or {}
    return ", ".join(f"{shown(op)} {count}" for op, count in sources.items()) or "none"


def _why(report: dict[str, Any]) -> list[Text]:
    """Which rule chose the candidate, and where each side's Memcpy come from (the host
    side of each copy: a CPU node, or an EP node's input kept on CPU)."""
    lines = []
    reason = report["chosen"].get("reason")
    if reason:
        lines.append(Text(f"chosen: {reason}"))
    before, after, chosen = report["before"], report["after"], report["chosen"]
    if before.get("memcpy"):
        lines.append(Text(f"Memcpy as given (opset {before['opset']}): {_sources(before)}"))
    changed = (chosen["opset"], chosen["legalized"]) != (before["opset"], False)
    if changed and after.get("memcpy"):
        lines.append(Text(f"Memcpy chosen (opset {after['opset']}): {_sources(after)}"))
    return lines


def render_report(
    report: dict[str, Any],
    *,
    model_name: str | None = None,
    show_all: bool = False,
    width: int = WIDTH,
) -> RenderableType:
    """The text report of :func:`placement_report`'s dict, as one rich renderable."""
    # The verdict stays one line (scripts and people grep it), whatever the width.
    verdict_line = Text(
        shown(_verdict(report, model_name)), style="bold", no_wrap=True, overflow="ignore"
    )
    parts: list[RenderableType] = [verdict_line]
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
    parts += _runs(report)
    ops_in_model = collections.Counter(
        (n["op_type"], n["domain"]) for n in report["before"]["nodes"]
    )
    carried = {op: count for (op, domain), count in ops_in_model.items() if ort_only(op, domain)}
    if carried:
        ops = ", ".join(f"{shown(op)} x{count}" for op, count in sorted(carried.items()))
        parts.append(
            Text(
                f"note: carried unchanged, placed by the kernel table: {ops} "
                "(ONNX Runtime's own ops in the ONNX domain; ONNX does not define them)"
            )
        )
    parts.append(_candidates(report))
    parts += _why(report)
    if report.get("blocked"):
        lines = shown_lines(report["blocked"]).splitlines()
        parts.append(Text(f"lower opsets are out of reach: {lines[0]}"))
        for line in lines[1 : 1 + _MAX_BLOCKED_LINES]:
            parts.append(Text(f"  {line.strip()}", no_wrap=True, overflow="ellipsis"))
        if len(lines) - 1 > _MAX_BLOCKED_LINES:
            parts.append(Text(f"  ... and {len(lines) - 1 - _MAX_BLOCKED_LINES} more"))
    lowest = report.get("lowest_opset", MIN_TARGET_OPSET)
    if lowest > MIN_TARGET_OPSET and min(c["opset"] for c in report["candidates"]) == lowest:
        parts.append(Text(f"opsets below {lowest} were not weighed (--lowest-opset {lowest})"))
    parts.append(_op_table(report, show_all))
    decisions = _decisions(report, width)
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
    """Print the text report to ``file`` (stdout), in colour when it is a terminal, at
    :data:`WIDTH` columns (or the terminal's, when narrower)."""
    out = file or sys.stdout
    console = Console(file=out, highlight=False)
    width = min(console.width, WIDTH) if out.isatty() else WIDTH
    console = Console(file=out, width=width, highlight=False)
    rendered = render_report(report, model_name=model_name, show_all=show_all, width=width)
    console.print(rendered, crop=False)


def format_report(
    report: dict[str, Any], *, model_name: str | None = None, show_all: bool = False
) -> str:
    """The text report as plain text (no colour), :data:`WIDTH` columns wide."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=WIDTH, color_system=None, highlight=False)
    console.print(render_report(report, model_name=model_name, show_all=show_all), crop=False)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()).strip("\n")
