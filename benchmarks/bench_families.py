"""Decoder families on WebGPU: the export against ``optimize --ep webgpu``, counted and timed.

For each tiny random-weight model of ``tests/torch_models.py`` -- GPT-2 and StableLM
(``family_export``) and, for reference, Llama, Qwen3 and Gemma3 (``llm_export``, no KV
cache); 4 layers, hidden 64, dynamic batch and sequence, nothing downloaded -- exported by
torch.onnx at ``--opset``:

* ``export``: the torch.onnx export as is;
* ``optimize``: ``OptimizeForEpPass("webgpu")`` (fusions, verified, + lowering).

Rules:

1. Memcpy and CPU nodes are counted in one real WebGPU session (lavapipe here) at ORT's
   default optimization level (``tests/e2e/helpers.run_on_webgpu``: Memcpy in the model ORT
   saves, CPU nodes in ORT's placement record).
2. Latency: batch 2 x ``--tokens`` tokens, the second row right-padded by a quarter;
   each variant's session runs ``--warmup`` times, then ``--runs`` rounds in which both
   variants run once in turn; the median and the minimum in ms.
3. ``diff``: the largest difference, at every position, of each variant's output on
   WebGPU from the torch model's (the same seeded weights; ORT's CPU EP refuses some
   opset-23 exports at batch 2, their RotaryEmbedding's caches having batch 1). (The export itself differs on lavapipe at 40 tokens: its attention path.)

Lavapipe's "GPU" is the CPU: latency ranks variants only roughly; the counts are exact.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.torch_models: the exact models the tests use

from benchlib import write_results  # noqa: E402

logger = logging.getLogger(__name__)

FAMILIES = ("gpt2", "stablelm")
REFERENCE = ("llama", "qwen3", "gemma3")


def _export(kind: str, opset: int) -> Any:
    from tests.torch_models import family_export, llm_export

    return family_export(kind, opset) if kind in FAMILIES else llm_export(kind, opset)


def _feeds(tokens: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    mask = np.ones((2, tokens), np.int64)
    mask[1, tokens - tokens // 4 :] = 0
    return {"input_ids": rng.integers(0, 128, (2, tokens)).astype(np.int64), "attention_mask": mask}


def _reference(kind: str, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import torch
    from tests.torch_models import family_outputs, llm_model

    if kind in FAMILIES:
        return family_outputs(kind, feeds)
    ids, mask = (torch.from_numpy(feeds[n]) for n in ("input_ids", "attention_mask"))
    with torch.no_grad():
        out = llm_model(kind).eval()(input_ids=ids, attention_mask=mask, use_cache=False)
    return out.logits.numpy()


def _session(proto: Any) -> Any:
    import onnxruntime as ort

    from onnxscript_ep_passes.ep import make_webgpu_session_options

    options = ort.SessionOptions()
    options.log_severity_level = 3
    make_webgpu_session_options(session_options=options)
    return ort.InferenceSession(proto.SerializeToString(), options)


def measure(kind: str, opset: int, tokens: int, runs: int, warmup: int) -> dict[str, Any]:
    """One model's row: counts and latency of the export and the optimized model."""
    import onnx_ir as ir
    from tests.e2e.helpers import run_on_webgpu

    from onnxscript_ep_passes.pipeline import OptimizeForEpPass

    proto = _export(kind, opset)
    model = ir.from_proto(proto)
    result = OptimizeForEpPass("webgpu")(model)
    variants = {"export": proto, "optimize": ir.to_proto(model)}
    feeds = _feeds(tokens)
    row: dict[str, Any] = {"model": kind, "opset": opset, "tokens": tokens}
    row["fusions"] = [f"{f.pattern} x{f.count}" for f in result.fusions if f.kept]  # type: ignore[attr-defined]
    outputs = {}
    for name, variant in variants.items():
        run = run_on_webgpu(variant, feeds)
        row[f"{name}_memcpy"], row[f"{name}_cpu"] = run.memcpy, len(run.cpu_nodes)
        row[f"{name}_cpu_ops"] = run.cpu_summary()
        outputs[name] = run.outputs[0]
    reference = _reference(kind, feeds)
    for name, output in outputs.items():
        row[f"{name}_diff"] = float(np.abs(output - reference).max())
    sessions = {name: _session(variant) for name, variant in variants.items()}
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for session in sessions.values():
        for _ in range(warmup):
            session.run(None, feeds)
    for _ in range(runs):
        for name, session in sessions.items():
            start = time.perf_counter()
            session.run(None, feeds)
            times[name].append((time.perf_counter() - start) * 1e3)
    for name, samples in times.items():
        row[f"{name}_ms_median"] = statistics.median(samples)
        row[f"{name}_ms_min"] = min(samples)
    return row


def _markdown(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"Batch 2 x {args.tokens} tokens (second row right-padded), opset {args.opset}, "
        f"{args.runs} interleaved rounds after {args.warmup} warm-up runs; WebGPU on lavapipe.",
        "",
        "| model | export Memcpy / CPU | optimize Memcpy / CPU | export ms (median, min) "
        "| optimize ms (median, min) | diff export / optimize | optimize's CPU nodes |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['export_memcpy']} / {r['export_cpu']} "
            f"| {r['optimize_memcpy']} / {r['optimize_cpu']} "
            f"| {r['export_ms_median']:.1f}, {r['export_ms_min']:.1f} "
            f"| {r['optimize_ms_median']:.1f}, {r['optimize_ms_min']:.1f} "
            f"| {r['export_diff']:.2g} / {r['optimize_diff']:.2g} | {r['optimize_cpu_ops']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", default=",".join(FAMILIES + REFERENCE))
    parser.add_argument("--opset", type=int, default=23)
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--name", default="families")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    rows = [
        measure(kind, args.opset, args.tokens, args.runs, args.warmup)
        for kind in args.models.split(",")
    ]
    command = "python benchmarks/bench_families.py " + " ".join(argv or sys.argv[1:])
    write_results(
        args.name,
        "benchmarks/bench_families.py",
        command,
        _markdown(rows, args),
        rows,
        title="Decoder families on WebGPU: export against optimize",
        out_dir=args.out_dir,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
