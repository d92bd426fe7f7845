"""What lowering buys on real exports: Memcpy and CPU-placed nodes, before and after.

For each tiny model of ``tests/torch_models.py`` (Llama, Qwen, Gemma with SDPA attention;
a CNN) exported by ``torch.onnx.export(..., dynamo=True)`` at each source opset 21..25:

* **WebGPU, measured**: a real session on the WebGPU plugin EP (Mesa lavapipe here) at
  ORT's default optimization level (``ORT_ENABLE_ALL``), before and after
  ``LowerOpsetForEpPass("webgpu")`` with the plugin's live kernel table. Memcpy nodes are
  counted in the optimized model ORT saves (``SessionOptions.optimized_model_filepath``);
  CPU-placed nodes come from ORT's own record (``session.record_ep_graph_assignment_info``).
  Both via :func:`onnxscript_ep_passes.ep.measure_placement`.
* **CUDA (ORT 1.24 and main 2026-09) and DirectML (ORT 1.24), predicted**: from the shipped
  kernel-table snapshots, before and after ``LowerOpsetForEpPass`` for that EP.
  ``CPU`` counts every node predicted on CPU: fallback (no kernel) plus the small shape
  computations ORT moves to CPU on purpose for CUDA/DirectML (shown as ``fallback`` too).

Usage (from the repository root, in the project's venv)::

    python benchmarks/bench_effect.py                       # all models, opsets 21..25
    python benchmarks/bench_effect.py --models cnn --opsets 24,25
    python benchmarks/bench_effect.py --write benchmarks/results_effect.md

Writes the raw numbers as JSON (``--json``) and prints the Markdown tables, also written to
``--write`` between its BEGIN/END markers (the text around them is kept). Cells that
failed show ``error``; the messages are listed under the tables.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import logging
import os
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.torch_models: the exact models the tests use

MODELS = ("llama", "qwen", "gemma", "cnn")
OPSETS = (21, 22, 23, 24, 25)
PREDICTED = (
    ("cuda", "1.24", "CUDA 1.24"),
    ("cuda", "main-2026-09", "CUDA main-2026-09"),
    ("dml", "1.24", "DirectML 1.24"),
)


def _quiet_export(kind: str, opset: int) -> Any:
    from tests.torch_models import export_proto

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return export_proto(kind, opset)


def _opset(proto: Any) -> int:
    (version,) = [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    return int(version)


def _measure_webgpu(proto: Any) -> dict[str, Any]:
    import onnxruntime as ort

    from onnxscript_ep_passes.ep import measure_placement

    m = measure_placement(
        proto, "webgpu", graph_optimization_level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    )
    cpu_ops: dict[str, int] = {}
    for n in m.cpu_nodes:
        cpu_ops[n.op_type] = cpu_ops.get(n.op_type, 0) + 1
    return {
        "memcpy": m.memcpy,
        "memcpy_from_host": m.memcpy_from_host,
        "memcpy_to_host": m.memcpy_to_host,
        "cpu": len(m.cpu_nodes),
        "nodes": len(m.nodes),
        "cpu_ops": dict(sorted(cpu_ops.items())),
    }


def _prediction(p: Any) -> dict[str, Any]:
    return {
        "memcpy": p.memcpy,
        "cpu": len(p.fallback_nodes) + len(p.shape_computation_nodes),
        "fallback": len(p.fallback_nodes),
        "nodes": len(p.nodes),
    }


def _lower(proto: Any, ep: str, ort_version: str | None, table: Any = None) -> tuple[Any, Any]:
    import onnx_ir as ir

    from onnxscript_ep_passes.passes import LowerOpsetForEpPass

    model = ir.serde.deserialize_model(proto)
    result = LowerOpsetForEpPass(ep, ort_version, table=table)(model)
    return ir.serde.serialize_model(model), getattr(result, "choice", None)


def run_case(kind: str, opset: int, webgpu_table: Any) -> dict[str, Any]:
    proto = _quiet_export(kind, opset)
    if _opset(proto) != opset:
        raise RuntimeError(f"the exporter produced opset {_opset(proto)}, not {opset}")
    result: dict[str, Any] = {"model": kind, "source_opset": opset}
    try:
        start = time.perf_counter()
        lowered, choice = _lower(proto, "webgpu", None, webgpu_table)
        lower_s = time.perf_counter() - start
        result["webgpu"] = {
            "chosen_opset": choice.chosen_opset,
            "lower_s": round(lower_s, 3),
            "before": _measure_webgpu(proto),
            "after": _measure_webgpu(lowered),
            "predicted_before": _prediction(choice.before),
            "predicted_after": _prediction(choice.after),
        }
    except Exception as e:
        result["webgpu"] = {"error": f"{type(e).__name__}: {e}"}
    for ep, version, label in PREDICTED:
        try:
            _, choice = _lower(proto, ep, version)
            result[label] = {
                "chosen_opset": choice.chosen_opset,
                "table": choice.table_source,
                "before": _prediction(choice.before),
                "after": _prediction(choice.after),
            }
        except Exception as e:
            result[label] = {"error": f"{type(e).__name__}: {e}"}
    return result


def _arrow(a: Any, b: Any) -> str:
    return f"{a} → {b}" if a != b else f"{a}"


def _table(results: list[dict[str, Any]], key: str, title: str, measured: bool) -> list[str]:
    lines = [f"### {title}", ""]
    if measured:
        lines += [
            "| model | opset → chosen | Memcpy | CPU nodes | CPU ops after | predicted Memcpy |",
            "|---|---|---|---|---|---|",
        ]
    else:
        lines += [
            "| model | opset → chosen | Memcpy | CPU nodes | of which fallback |",
            "|---|---|---|---|---|",
        ]
    for r in results:
        cell = r[key]
        head = f"| {r['model']} | "
        if "error" in cell:
            lines.append(head + f"{r['source_opset']} → error | | | |" + (" |" if measured else ""))
            continue
        b, a = cell["before"], cell["after"]
        opsets = _arrow(r["source_opset"], cell["chosen_opset"])
        row = (
            head + f"{opsets} | {_arrow(b['memcpy'], a['memcpy'])} | {_arrow(b['cpu'], a['cpu'])} |"
        )
        if measured:
            ops = ", ".join(f"{op} {n}" for op, n in a["cpu_ops"].items()) or "none"
            pb, pa = cell["predicted_before"], cell["predicted_after"]
            row += f" {ops} | {_arrow(pb['memcpy'], pa['memcpy'])} |"
        else:
            row += f" {_arrow(b['fallback'], a['fallback'])} |"
        lines.append(row)
    return [*lines, ""]


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except Exception:
        return "?"


def render(results: list[dict[str, Any]], env: dict[str, Any]) -> str:
    lines = [
        f"Generated by `benchmarks/bench_effect.py` on {env['date']} "
        f"(commit {env['commit']}{', uncommitted changes in the tree' if env['dirty'] else ''}); "
        f"onnxruntime {env['onnxruntime']}, onnxruntime-ep-webgpu {env['webgpu_plugin']} on "
        f"{env['adapter']}, torch {env['torch']}, transformers {env['transformers']}, "
        f"onnx {env['onnx']}.",
        "",
        "Each cell is *before → after* lowering (one number when unchanged).",
        "",
    ]
    lines += _table(
        results,
        "webgpu",
        "WebGPU, measured (real sessions, ORT default optimization level, Memcpy counted "
        "in ORT's saved optimized model)",
        measured=True,
    )
    for _, _, label in PREDICTED:
        lines += _table(results, label, f"{label}, predicted from the shipped snapshot", False)
    errors = [
        (r["model"], r["source_opset"], key, cell["error"])
        for r in results
        for key, cell in r.items()
        if isinstance(cell, dict) and "error" in cell
    ]
    if errors:
        lines += ["### Errors", ""]
        lines += [f"- {m}-{o} {k}: `{e.splitlines()[0][:300]}`" for m, o, k, e in errors]
        lines.append("")
    return "\n".join(lines)


BEGIN = "<!-- generated by benchmarks/bench_effect.py: begin -->"
END = "<!-- generated by benchmarks/bench_effect.py: end -->"


def write_between_markers(path: Path, text: str) -> None:
    """Replace the generated part of ``path`` (between BEGIN and END), keeping the rest."""
    block = f"{BEGIN}\n{text}\n{END}"
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        new = head + block + tail
    else:
        new = old + ("\n" if old and not old.endswith("\n") else "") + block + "\n"
    path.write_text(new, encoding="utf-8")


def environment() -> dict[str, Any]:
    from importlib.metadata import version

    import onnx
    import onnxruntime as ort

    def ver(name: str) -> str:
        try:
            return version(name)
        except Exception:
            return "not installed"

    return {
        "date": datetime.date.today().isoformat(),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--", "src")),
        "onnxruntime": ort.__version__,
        "webgpu_plugin": ver("onnxruntime-ep-webgpu"),
        "adapter": "Mesa lavapipe (software Vulkan)" if platform.system() == "Linux" else "?",
        "torch": ver("torch"),
        "transformers": ver("transformers"),
        "onnx": onnx.__version__,
        "python": platform.python_version(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--opsets", default=",".join(map(str, OPSETS)))
    parser.add_argument("--json", type=Path, help="write the raw results here")
    parser.add_argument("--write", type=Path, help="write the Markdown tables here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    os.environ.setdefault("ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER", "1")

    import onnxruntime as ort

    from onnxscript_ep_passes.ep import get_table, webgpu_available

    ort.set_default_logger_severity(3)

    ok, reason = webgpu_available()
    if not ok:
        print(f"WebGPU EP unavailable: {reason}", file=sys.stderr)
        return 2
    table = get_table("webgpu")
    results = []
    for kind in args.models.split(","):
        for opset in (int(o) for o in args.opsets.split(",")):
            start = time.perf_counter()
            results.append(run_case(kind, opset, table))
            print(f"{kind}-{opset}: {time.perf_counter() - start:.1f}s", file=sys.stderr)
    env = environment()
    text = render(results, env)
    print(text)
    if args.write:
        write_between_markers(args.write, text)
    if args.json:
        args.json.write_text(json.dumps({"env": env, "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
