"""What legalization adds to the opset choice on WebGPU: Memcpy, CPU nodes, wall time.

For each tiny model of ``tests/torch_models.py`` (Llama, Qwen, Gemma with SDPA attention
exported at opset 24; the CNN at 25; random weights, nothing downloaded), three variants:

* ``original``: the export as is;
* ``opset only``: ``LowerOpsetForEpPass("webgpu", legalize=False)`` (the best opset,
  no rewriting of nodes the EP cannot run at any opset);
* ``legalized``: ``LowerOpsetForEpPass("webgpu")`` (the opset choice with legalization).

For decoders, ``eager export`` is the same model exported with eager attention (plain
MatMul/Softmax), for reference. ``llama-dynamic`` is the Llama exported with a dynamic
sequence length (its graph computes shapes at run time, in int64, which WebGPU runs on
CPU); for it, two variants the pass's cost decision turned down are measured too: the
Attention nodes expanded at opset 24 regardless of cost, and the legalized variant at
opset 21 (forced with ``target_opset=21``). Each variant runs in real sessions of the WebGPU plugin EP
(Mesa lavapipe here): Memcpy nodes (counted in the optimized model ORT saves) and
CPU-placed nodes (ORT's own placement record) at ORT's default optimization level and
with optimizations disabled, via :func:`onnxscript_ep_passes.ep.measure_placement`; then
the wall time of ``--runs`` forward passes in one session per variant at the default
level (after ``--warmup`` passes; ``--repeats`` timings taken round-robin over the
variants, median reported), and the largest absolute difference of the WebGPU output
from the original's on ORT's CPU EP.

Usage (from the repository root, in the project's venv)::

    python benchmarks/bench_legalize.py
    python benchmarks/bench_legalize.py --models llama,cnn --runs 20
    python benchmarks/bench_legalize.py --write benchmarks/results_legalize.md

Prints a Markdown table; ``--write`` replaces the text between the BEGIN/END markers of
that file (the rest is kept); ``--json`` writes the raw numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import logging
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.torch_models: the exact models the tests use

MODELS = {"llama": 24, "qwen": 24, "gemma": 24, "cnn": 25, "llama-dynamic": 24}
BEGIN, END = "<!-- BEGIN bench_legalize -->", "<!-- END bench_legalize -->"


_DYNAMIC: dict[int, Any] = {}


def _export(kind: str, opset: int, attention: str = "sdpa") -> Any:
    from tests.torch_models import export_proto

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if kind == "llama-dynamic":
            return _export_dynamic(opset)
        return export_proto(kind, opset, attention)


def _export_dynamic(opset: int) -> Any:
    """The tiny Llama with a dynamic sequence length (int64 shape math in the graph)."""
    if opset not in _DYNAMIC:
        import torch
        from tests.torch_models import SEQ, _decoder

        ids = torch.randint(0, 128, (1, SEQ))
        seq = torch.export.Dim("seq", min=2, max=64)
        program = torch.onnx.export(
            _decoder("llama", "sdpa"),
            (ids,),
            dynamo=True,
            opset_version=opset,
            input_names=["input_ids"],
            dynamic_shapes=({1: seq},),
            verbose=False,
        )
        _DYNAMIC[opset] = program.model_proto
    return _DYNAMIC[opset]


def _variants(kind: str, opset: int) -> list[tuple[str, Any, str]]:
    """``(label, ModelProto, note)`` for each variant of one model."""
    import onnx_ir as ir

    from onnxscript_ep_passes.passes import LowerOpsetForEpPass

    original = _export(kind, opset)
    out = [("original", original, f"opset {opset}")]
    for label, legalize in (("opset only", False), ("legalized", True)):
        model = ir.from_proto(original)
        choice = getattr(LowerOpsetForEpPass("webgpu", legalize=legalize)(model), "choice", None)
        assert choice is not None
        expanded = sum(1 for d in choice.decisions if d.decision == "expand")
        note = f"opset {choice.chosen_opset}"
        if choice.legalized:
            note += f", {expanded} expanded"
        out.append((label, ir.to_proto(model), note))
    if kind == "llama-dynamic":
        # What the cost decision turned down: the Attention nodes expanded anyway, at the
        # source opset and (with the lowering's expansions folded) at 21.
        from onnxscript_ep_passes.lowering.expansion import expand_node
        from onnxscript_ep_passes.passes import fold_static_shapes

        model = ir.from_proto(original)
        for node in [n for n in model.graph if n.op_type == "Attention"]:
            fold_static_shapes(expand_node(model, node, opset), opset)
        out.append(("forced expansion", ir.to_proto(model), f"opset {opset}, not chosen"))
        model = ir.from_proto(original)
        lowering = LowerOpsetForEpPass("webgpu", target_opset=21)
        lowering(model)
        out.append(("legalized at 21", ir.to_proto(model), "opset 21, not chosen"))
    elif kind != "cnn":
        out.append(("eager export", _export(kind, opset, "eager"), f"opset {opset}, reference"))
    return out


def _session(model: Any) -> Any:
    import onnxruntime as ort

    from onnxscript_ep_passes.ep import make_webgpu_session_options

    session = ort.InferenceSession(model.SerializeToString(), make_webgpu_session_options())
    assert "WebGpuExecutionProvider" in session.get_providers()
    return session


def _time(session: Any, feeds: dict[str, Any], runs: int) -> float:
    start = time.perf_counter()
    for _ in range(runs):
        session.run(None, feeds)
    return time.perf_counter() - start


def measure(kind: str, opset: int, runs: int, warmup: int, repeats: int) -> list[dict[str, Any]]:
    import numpy as np
    import onnxruntime as ort
    from tests.harness import run_model
    from tests.torch_models import sample_inputs

    from onnxscript_ep_passes.ep import measure_placement

    feeds = sample_inputs(kind.split("-")[0])
    expected = run_model(_export(kind, opset), feeds)[0][0]
    rows: list[dict[str, Any]] = []
    sessions = []
    for label, model, note in _variants(kind, opset):
        row: dict[str, Any] = {"model": kind, "variant": label, "note": note}
        for level_name, level in (
            ("default", ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
            ("disabled", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
        ):
            measured = measure_placement(model, "webgpu", graph_optimization_level=level)
            row[f"memcpy_{level_name}"] = measured.memcpy
            row[f"cpu_{level_name}"] = len(measured.cpu_nodes)
        session = _session(model)
        for _ in range(warmup):
            output = session.run(None, feeds)[0]
        row["max_abs_diff"] = float(np.max(np.abs(output - expected)))
        row["seconds_all"] = []
        rows.append(row)
        sessions.append(session)
    for _ in range(repeats):  # round robin: drift on a shared machine hits all variants
        for row, session in zip(rows, sessions):
            row["seconds_all"].append(_time(session, feeds, runs))
    for row in rows:
        row["seconds"] = statistics.median(row["seconds_all"])
        print(f"{kind} {row['variant']}: {row}", file=sys.stderr)
    return rows


def table(rows: list[dict[str, Any]], runs: int) -> str:
    lines = [
        "| model | variant | opset | Memcpy (default) | CPU nodes (default) "
        f"| Memcpy (disabled) | CPU nodes (disabled) | {runs} runs (s, median) | max abs diff |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['variant']} | {r['note']} | {r['memcpy_default']} "
            f"| {r['cpu_default']} | {r['memcpy_disabled']} | {r['cpu_disabled']} "
            f"| {r['seconds']:.3f} | {r['max_abs_diff']:.1e} |"
        )
    return "\n".join(lines)


def _environment() -> str:
    import onnxruntime as ort
    import torch

    from onnxscript_ep_passes.ep.webgpu import plugin_version

    return (
        f"{datetime.date.today().isoformat()}, Python {platform.python_version()}, "
        f"onnxruntime {ort.__version__}, onnxruntime-ep-webgpu {plugin_version()}, "
        f"torch {torch.__version__}, {platform.machine()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated kinds")
    parser.add_argument("--runs", type=int, default=100, help="timed forward passes")
    parser.add_argument("--warmup", type=int, default=5, help="untimed passes first")
    parser.add_argument("--repeats", type=int, default=7, help="timings (median reported)")
    parser.add_argument("--write", type=Path, help="Markdown file to update between markers")
    parser.add_argument("--json", type=Path, help="write the raw numbers here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("onnxscript_ep_passes").setLevel(logging.ERROR)

    from onnxscript_ep_passes.ep import webgpu_available

    ok, reason = webgpu_available()
    if not ok:
        print(f"WebGPU EP unavailable: {reason}", file=sys.stderr)
        return 1
    rows: list[dict[str, Any]] = []
    for kind in args.models.split(","):
        rows.extend(measure(kind, MODELS[kind], args.runs, args.warmup, args.repeats))
    text = f"{table(rows, args.runs)}\n\nEnvironment: {_environment()}."
    print(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.write:
        old = args.write.read_text() if args.write.exists() else f"{BEGIN}\n{END}\n"
        head, _, rest = old.partition(BEGIN)
        _, _, tail = rest.partition(END)
        args.write.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
