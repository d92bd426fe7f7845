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

    python benchmarks/bench_effect.py                       # all; writes results_effect.*
    python benchmarks/bench_effect.py --models cnn --opsets 24,25 --out-dir /tmp/effect

Writes ``results_effect.md`` (the tables, cells that failed show ``error`` and their
messages are listed under the tables) and ``results_effect.json`` (the raw numbers)
through ``benchlib.write_results``, with the commit and date.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from benchlib import write_results

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "benchmarks"
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


def render(results: list[dict[str, Any]], env: dict[str, Any]) -> str:
    lines = [
        f"onnxruntime-ep-webgpu {env['webgpu_plugin']} on {env['adapter']}, torch "
        f"{env['torch']}, transformers {env['transformers']}.",
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
    parser.add_argument("--out-dir", type=Path, default=HERE, help="where results_effect.* go")
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
    used = " ".join(["python benchmarks/bench_effect.py", *(argv or sys.argv[1:])]).strip()
    write_results(
        "effect",
        "benchmarks/bench_effect.py",
        used,
        f"{INTRO.strip()}\n\n{text}\n\n## Reading the numbers\n\n{NOTES.strip()}",
        {"env": env, "results": results},
        title="Effect of EP-aware lowering on real exports",
        out_dir=args.out_dir,
    )
    return 0


INTRO = """\
What `LowerOpsetForEpPass` changes for tiny random-initialised Llama, Qwen and Gemma decoders
(transformers configs, SDPA attention) and a small CNN, exported by
`torch.onnx.export(..., dynamo=True)` at each opset 21..25 (the models of
`tests/torch_models.py`; no weights downloaded).

- **WebGPU** rows are *measured*: real sessions of the WebGPU plugin EP on Mesa lavapipe, at
  ORT's default optimization level; Memcpy nodes are counted in the optimized model ORT
  saves, CPU-placed nodes come from ORT's placement record. The last column is the
  package's prediction for the same models (graph as written) for comparison.
- **CUDA / DirectML** rows are *predicted* from the shipped kernel-table snapshots (no GPU
  here). "CPU nodes" counts fallback nodes plus the small shape computations ORT puts on CPU
  on purpose for these EPs. `benchmarks/cuda_check.py` measures the CUDA rows on a GPU
  machine.
"""

# Written with the script from the results at commit 638d70c; the tables are authoritative.
NOTES = """\
- **WebGPU, measured.** After lowering, no export at 23..25 keeps a node on CPU or a Memcpy
  node, and the CNN is wholly on WebGPU from every source opset (MaxPool-22 has no WebGPU
  kernel, Transpose-25 neither: lowered to 21). At 25 the decoders are the worst case:
  ORT has no kernel for Attention-25 on *any* EP, CPU included, so it inlines Attention's
  function body and places its 30-odd nodes one by one; Shape-25, Transpose-25, Concat ...
  fall back, 58 nodes and 46 Memcpy. Lowered to 24 (where the pass also rewrites Attention
  for WebGPU, which has no ai.onnx Attention kernel) everything runs on WebGPU.
- **What stays on CPU.** At source opsets 21 and 22 the exporter decomposes SDPA itself,
  and its `IsNaN` (2 nodes, 4 Memcpy) has no WebGPU kernel at any version: no opset helps.
  `tests/e2e/test_exports_webgpu.py` checks every remaining CPU node of every lowered
  export this way against the live table.
- **Prediction vs measurement.** The predicted Memcpy column matches the measurement
  everywhere except the unlowered decoders at 25 (20 predicted, 46 measured): the
  prediction places Attention-25 as one CPU node, while ORT inlines its function body
  (see above). After lowering, prediction and measurement agree.
- **CUDA / DirectML, predicted.** On ORT 1.24's CUDA EP the decoders exported at 24/25 lose
  24-26 CPU nodes and 24-28 Memcpy nodes when lowered to 23 (the shape and cast ops at 24);
  on September 2026 main only opset 25 still needs lowering. DirectML 1.24 wants 22 for the
  decoders and 21 for the CNN.
"""


if __name__ == "__main__":
    sys.exit(main())
