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

    python benchmarks/bench_legalize.py                # writes results_legalize.*
    python benchmarks/bench_legalize.py --models llama,cnn --runs 20 --out-dir /tmp/leg

Writes ``results_legalize.md`` (the table) and ``results_legalize.json`` (the raw
numbers) through ``benchlib.write_results``, with the commit and date.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import logging
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from benchlib import HERE, write_results

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.torch_models: the exact models the tests use

MODELS = {"llama": 24, "qwen": 24, "gemma": 24, "cnn": 25, "llama-dynamic": 24}


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

    from onnxscript_ep_passes.ep.profiles.webgpu import plugin_version

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
    parser.add_argument("--out-dir", type=Path, default=HERE, help="where results_legalize.* go")
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
    used = " ".join(["python benchmarks/bench_legalize.py", *(argv or sys.argv[1:])]).strip()
    write_results(
        "legalize",
        "benchmarks/bench_legalize.py",
        used,
        f"{INTRO.strip()}\n\n{text}\n\n## Reading the table\n\n{NOTES.strip()}",
        rows,
        title="Legalization on WebGPU: Memcpy, CPU nodes and wall time",
        out_dir=args.out_dir,
    )
    return 0


INTRO = """\
What legalization (rewriting, at the model's opset, the nodes the EP has no kernel for at
any version) adds to the plain opset choice of `LowerOpsetForEpPass`, on the tiny random
Llama, Qwen and Gemma decoders of `tests/torch_models.py` exported with SDPA attention at
opset 24 (ai.onnx `Attention`, which the WebGPU EP has no kernel for), the CNN exported at
25 (MaxPool-22 has no WebGPU kernel, Transpose-25 neither), and the Llama exported with a
dynamic sequence length.

Variants: `original` (the export), `opset only` (`LowerOpsetForEpPass("webgpu",
legalize=False)`), `legalized` (`LowerOpsetForEpPass("webgpu")`, the default), `eager
export` (the same decoder exported with eager attention, the bar the issue sets), and for
the dynamic Llama two variants the cost decision turned down. All numbers are measured in
real sessions of the WebGPU plugin EP on Mesa lavapipe (a CPU Vulkan driver): Memcpy nodes
counted in the optimized model ORT saves, CPU-placed nodes from ORT's placement record, at
ORT's default optimization level and with optimizations disabled; the time is the median
of 7 rounds of 100 forward passes (one session per variant, default level, rounds taken
round-robin over the variants); the last column is the largest absolute difference of the
WebGPU logits from the original's on ORT's CPU EP.
"""

# Written with the script from the results at commit 638d70c; the table is authoritative.
NOTES = """\
- **Placement.** Legalization takes the SDPA decoders from 8 Memcpy / 2 CPU nodes to 0 /
  0, the same as the eager-attention export, at both optimization levels; the opset choice
  alone cannot (no opset has a WebGPU Attention kernel). The two Attention nodes are
  expanded through Attention-24's ONNX function body, whose shape math (static here) is
  folded to constants. The CNN needs no rewrite: the opset choice alone reaches 0 at opset
  21 (MaxPool-12's kernel), and no legalized variant can beat that.
- **Wall time on lavapipe.** The legalized decoders are *slower* than the originals here
  (by 10 to 30% over several runs), and about as fast as the eager exports. The machine is
  shared (2 cores): absolute times vary by up to 2x between runs, the ordering does not.
  On lavapipe the "device" is host memory, so a Memcpy is a cheap host copy, while the
  expanded attention runs as some twenty small nodes (shader dispatches) where ORT's CPU
  Attention kernel is one fused call. These timings do not carry over to a real GPU, where
  each Memcpy is a transfer and a synchronisation; no GPU was available to measure that.
  The pass optimises the placement (fallback nodes, then Memcpy), which is what the issue
  asks for; the time column is here so nobody reads "0 Memcpy" as "faster on lavapipe".
- **When expansion does not pay (dynamic shapes).** With a dynamic sequence length the
  export computes shapes at run time in int64, which WebGPU does not support, so 42 nodes
  are on CPU anyway. Attention's body then keeps its own int64 shape math (`Shape`,
  `Concat`, `Div`/`Mod` of dynamic sizes cannot be folded): expanding both Attention nodes
  predicts 50 fallback nodes instead of 43, so the pass keeps them on CPU (decision `cpu`,
  "expanding it would not help"). Measured, the forced expansion has fewer Memcpy (14) but
  more CPU nodes (51) and is 25 to 35% slower; the legalized variant at opset 21 (Cos/Sin
  back on the EP, the lowering's expansions folded) has 6 Memcpy and is also slower on
  lavapipe. The pass's key puts fallback nodes before Memcpy, so it picks the original
  here, which is the fastest on lavapipe; on a GPU the 6-Memcpy variant may well win: the
  key is a policy, not a measurement.
"""


if __name__ == "__main__":
    raise SystemExit(main())
