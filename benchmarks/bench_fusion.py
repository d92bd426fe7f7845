"""Fused ORT kernels on WebGPU: the export, its lowering, ``optimize``, and ORT GenAI's builder.

For each tiny random-weight decoder of ``tests/torch_models.py`` (Llama, Qwen3, Gemma3,
Phi-3; 4 layers, hidden 64; dynamic sequence and ``attention_mask``; nothing downloaded),
exported by torch.onnx at each ``--opsets`` (default 24), without and with a KV cache:

* ``export``: the torch.onnx export as is;
* ``lower``: ``LowerOpsetForEpPass("webgpu")`` (``lower --ep webgpu``: the exact lowering);
* ``optimize``: ``OptimizeForEpPass("webgpu")`` (``optimize --ep webgpu``: fusions + lowering);
* ``genai``: when ``onnxruntime_genai`` (0.18.0) imports, its model builder
  (``-p fp32 -e webgpu``) run offline on a local folder holding the *same* random weights
  (``save_pretrained``) and a word-level tokenizer built here; once per model (its graph
  always has a KV cache: the prefill row feeds a past of length 0).

Inputs: prefill = 8 tokens, no past; KV cache = 1 token after 8 past ones (a decode step).
Each variant runs in one session of the real WebGPU plugin EP (lavapipe here) at ORT's
default optimization level: Memcpy nodes (counted in the optimized model ORT saves), CPU
nodes (ORT's placement record, of all nodes), the median latency of ``--runs`` runs after
``--warmup``, and the largest difference of the logits from the export's on ORT's CPU EP.
Lavapipe's "GPU" is the CPU: latency ranks variants only roughly; Memcpy and CPU-node counts
transfer to real GPUs.

Usage (repository root, the project's venv)::

    python benchmarks/bench_fusion.py                    # prints the table
    python benchmarks/bench_fusion.py --write benchmarks/results_fusion.md
    python benchmarks/run_all.py --only fusion          # the same, via the runner

``--write`` writes that Markdown file (with the commit and date) and the raw numbers as
JSON beside it (same name, ``.json``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.torch_models: the exact models the tests use

os.environ.setdefault("ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

PREFILL, PAST, STEP = 8, 8, 1
logger = logging.getLogger("bench_fusion")


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


def _feeds(model_inputs: Any, kv: bool) -> dict[str, np.ndarray]:
    from onnxscript_ep_passes.fusion.evaluate import Sizes, generate_feeds

    sizes = Sizes(1, STEP, PAST) if kv else Sizes(1, PREFILL, 0)
    return generate_feeds(model_inputs, sizes, seed=0)


def _measure(path: Path, feeds: dict[str, np.ndarray], runs: int, warmup: int) -> dict[str, Any]:
    import onnx
    import onnxruntime as ort

    from onnxscript_ep_passes.ep import make_webgpu_session_options

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    make_webgpu_session_options(session_options=options)
    with tempfile.TemporaryDirectory() as tmp:
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        session = ort.InferenceSession(str(path), options)
        saved = onnx.load(options.optimized_model_filepath, load_external_data=False)
    if "WebGpuExecutionProvider" not in session.get_providers():
        raise RuntimeError("the session has no WebGPU EP: not a measurement")
    memcpy = sum(n.op_type.startswith("Memcpy") for n in saved.graph.node)
    nodes = [
        (n.op_type, sub.ep_name)
        for sub in session.get_provider_graph_assignment_info()
        for n in sub.get_nodes()
        if not n.op_type.startswith("Memcpy")
    ]
    wanted = {i.name for i in session.get_inputs()}
    run_feeds = {k: v for k, v in feeds.items() if k in wanted}
    run_feeds.update(_genai_past(path, feeds))
    for _ in range(warmup):
        session.run(["logits"], run_feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        (logits,) = session.run(["logits"], run_feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return {
        "memcpy": memcpy,
        "cpu_nodes": sum(ep != "WebGpuExecutionProvider" for _, ep in nodes),
        "nodes": len(nodes),
        "latency_ms": statistics.median(times),
        "logits": logits,
    }


def _genai_past(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """GenAI's models share past and present buffers (``past_present_share_buffer``): the
    past inputs are ``context_length`` long, the valid part first, zeros after."""
    config_path = path.parent / "genai_config.json"
    if not config_path.exists():
        return {}
    config = json.loads(config_path.read_text())["model"]
    decoder, length = config["decoder"], config["context_length"]
    shape = (1, decoder["num_key_value_heads"], length, decoder["head_size"])
    past = {}
    for layer in range(decoder["num_hidden_layers"]):
        for kind in ("key", "value"):
            name = f"past_key_values.{layer}.{kind}"
            buffer = np.zeros(shape, np.float32)
            if name in feeds:
                buffer[:, :, : feeds[name].shape[2]] = feeds[name]
            past[name] = buffer
    return past


def _cpu_logits(proto_bytes: bytes, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(proto_bytes, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    return session.run(["logits"], {k: v for k, v in feeds.items() if k in wanted})[0]


def _genai_model(kind: str, tmp: Path) -> Path | None:
    """ORT GenAI's builder output for the same random weights, or None when unavailable."""
    try:
        import onnxruntime_genai  # noqa: F401
    except ImportError:
        return None
    import transformers
    from tests.torch_models import llm_model
    from tokenizers import Tokenizer, models, pre_tokenizers

    source = tmp / f"{kind}-hf"
    model = llm_model(kind)
    model.config.bos_token_id, model.config.eos_token_id, model.config.pad_token_id = 1, 2, 0
    model.save_pretrained(source)
    vocab = {f"t{i}": i for i in range(model.config.vocab_size)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t3"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="t3", bos_token="t1", eos_token="t2", pad_token="t0"
    ).save_pretrained(source)
    out = tmp / f"{kind}-genai"
    command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source)]
    command += ["-o", str(out), "-p", "fp32", "-e", "webgpu", "-c", str(tmp / "cache")]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        logger.warning("GenAI builder failed for %s: %s", kind, done.stderr[-2000:])
        return None
    return out / "model.onnx"


def bench(
    kinds: list[str], opsets: list[int], runs: int, warmup: int, genai: bool
) -> list[dict[str, Any]]:
    import onnx
    import onnx_ir as ir
    from tests.torch_models import llm_export

    from onnxscript_ep_passes.passes import LowerOpsetForEpPass
    from onnxscript_ep_passes.pipeline import OptimizeForEpPass

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench_fusion_") as tmp_name:
        tmp = Path(tmp_name)
        for kind in kinds:
            builder = _genai_model(kind, tmp) if genai else None
            for kv in (False, True):
                for opset in opsets:
                    proto = llm_export(kind, opset, kv_cache=kv)
                    feeds = _feeds(ir.from_proto(proto).graph.inputs, kv)
                    expected = _cpu_logits(proto.SerializeToString(), feeds)
                    variants: dict[str, Path] = {}
                    for name in ("export", "lower", "optimize"):
                        model = ir.from_proto(proto)
                        fusions: list[dict[str, Any]] = []
                        if name == "lower":
                            LowerOpsetForEpPass("webgpu")(model)
                        elif name == "optimize":
                            pipeline = OptimizeForEpPass("webgpu")
                            pipeline(model)
                            fusions = [f.to_dict() for f in pipeline.fusions if f.kept]
                        path = tmp / f"{kind}-{opset}-{kv}-{name}.onnx"
                        onnx.save(ir.to_proto(model), path)
                        variants[name] = path
                        row = _row(kind, opset, kv, name, model.opset_imports.get(""))
                        row["fusions"] = [(f["pattern"], f["count"]) for f in fusions]
                        rows.append(_finish(row, path, feeds, expected, runs, warmup))
                    if builder is not None and opset == opsets[0]:
                        row = _row(kind, None, kv, "genai", None)
                        rows.append(_finish(row, builder, feeds, expected, runs, warmup))
    return rows


def _row(kind: str, opset: int | None, kv: bool, variant: str, final: int | None) -> dict[str, Any]:
    return {
        "model": kind,
        "source_opset": opset,
        "kv_cache": kv,
        "variant": variant,
        "opset": final,
    }


def _finish(
    row: dict[str, Any],
    path: Path,
    feeds: dict[str, np.ndarray],
    expected: np.ndarray,
    runs: int,
    warmup: int,
) -> dict[str, Any]:
    try:
        measured = _measure(path, feeds, runs, warmup)
    except Exception as error:  # a variant that does not load is a result too
        row["error"] = str(error)[:300]
        logger.warning("%s: %s", row, error)
        return row
    logits = measured.pop("logits")
    row.update(measured)
    row["max_diff"] = (
        float(np.abs(logits - expected).max()) if logits.shape == expected.shape else None
    )
    logger.info("%s", row)
    return row


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "# Fusion benchmark: export vs lower vs optimize (vs ORT GenAI's builder) on WebGPU",
        "",
        f"Written by `benchmarks/bench_fusion.py` at commit {meta['commit']} on {meta['date']} "
        f"({meta['platform']}; ORT {meta['ort']}; WebGPU plugin on lavapipe; {meta['runs']} "
        f"runs after {meta['warmup']} warm-up, median). Raw numbers: `{meta['json']}`.",
        "Prefill: 8 tokens; KV cache: 1 token after 8 past. CPU nodes: of all nodes ORT "
        "placed. `diff`: max |logits - export's logits on ORT CPU|. Lavapipe runs the GPU "
        "on the CPU of a shared machine: latencies are noisy and rank variants only roughly.",
        "",
        "| model | cache | source opset | variant | opset | Memcpy | CPU nodes | median ms | diff | fusions |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cache = "KV" if r["kv_cache"] else "prefill"
        if "error" in r:
            lines.append(
                f"| {r['model']} | {cache} | {r['source_opset'] or ''} | {r['variant']} | | "
                f"error: {r['error'][:80]} | | | | |"
            )
            continue
        fusions = ", ".join(f"{p} x{n}" for p, n in r.get("fusions", []))
        diff = "" if r["max_diff"] is None else f"{r['max_diff']:.1e}"
        lines.append(
            f"| {r['model']} | {cache} | {r['source_opset'] or ''} | {r['variant']} | "
            f"{r['opset'] or ''} | {r['memcpy']} | {r['cpu_nodes']} of {r['nodes']} | "
            f"{r['latency_ms']:.2f} | {diff} | {fusions} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="llama,qwen3,gemma3,phi3")
    parser.add_argument("--opsets", default="23,24,25")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-genai", action="store_true", help="skip ORT GenAI's builder")
    parser.add_argument("--write", type=Path, help="write the Markdown here (+ .json beside)")
    parser.add_argument("--out-dir", type=Path, help="write results_fusion.md/.json here")
    args = parser.parse_args(argv)
    if args.out_dir and not args.write:
        args.write = args.out_dir / "results_fusion.md"
    commit = _git_commit()  # the code measured, before anything can change the tree
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    for name in ("onnxscript", "onnx_ir", "onnxscript_ep_passes"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    import onnxruntime as ort

    rows = bench(
        args.models.split(","),
        [int(o) for o in args.opsets.split(",")],
        args.runs,
        args.warmup,
        not args.no_genai,
    )
    json_path = args.write.with_suffix(".json") if args.write else None
    meta = {
        "commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "platform": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "ort": ort.__version__,
        "runs": args.runs,
        "warmup": args.warmup,
        "json": json_path.name if json_path else "-",
    }
    text = render(rows, meta)
    sys.stdout.write(text)
    if args.write and json_path:
        args.write.write_text(text)
        json_path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
