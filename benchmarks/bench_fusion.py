"""Fused ORT kernels on WebGPU: the export, its lowering, ``optimize``, and ORT GenAI's builder.

For each tiny random-weight decoder of ``tests/torch_models.py`` (``llm_export``: Llama,
Qwen3, Gemma3 (64-token sliding window), Gemma3 with a 4096-token window
(``gemma3_wide``), Phi-3; 4 layers, hidden 64; dynamic batch/sequence and
``attention_mask``; nothing downloaded), exported by torch.onnx at each ``--opsets``
(default 24), without and with a KV cache:

* ``export``: the torch.onnx export as is;
* ``lower``: ``LowerOpsetForEpPass("webgpu")`` (``lower --ep webgpu``: the exact lowering);
* ``optimize``: ``OptimizeForEpPass("webgpu")`` (``optimize --ep webgpu``: fusions + lowering);
* ``genai``: when ``onnxruntime_genai`` (0.18.0) imports, its model builder
  (``-p fp32 -e webgpu``) run offline on a local folder holding the *same* random weights
  (``save_pretrained``) and a word-level tokenizer built here; once per model (its graph
  always has a KV cache: the prefill row feeds a past of length 0).

Inputs: prefill = 8 tokens, no past; KV cache = 1 token after 8 past ones (a decode step);
batch 1. Rules for a shared machine:

1. Every variant of one (model, cache) group gets one session of the real WebGPU plugin
   EP (lavapipe here) at ORT's default optimization level; Memcpy nodes are counted in
   the optimized model ORT saves, CPU nodes in ORT's placement record.
2. The variants are timed interleaved: ``--warmup`` runs each, then ``--runs`` rounds in
   which every variant runs once in turn (export, lower, optimize, genai, export, ...), so
   load from elsewhere hits all of them alike. Each gets the minimum and the median.
3. The 1-minute load average is recorded before each group's rounds (and in the
   environment at the end); ``diff`` is the largest difference of the logits from the
   export's on ORT's CPU EP.

Lavapipe's "GPU" is the CPU: latency ranks variants only roughly; Memcpy and CPU-node
counts transfer to real GPUs.

Usage (repository root, the project's venv)::

    python benchmarks/bench_fusion.py                 # writes benchmarks/results_fusion.*
    python benchmarks/run_all.py --only fusion       # the same, via the runner
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from benchlib import HERE, write_results

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.torch_models: the exact models the tests use

os.environ.setdefault("ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

PREFILL, PAST, STEP = 8, 8, 1
MODELS = "llama,qwen3,gemma3,gemma3_wide,phi3"
WEBGPU = "WebGpuExecutionProvider"
logger = logging.getLogger("bench_fusion")


def _feeds(model_inputs: Any, kv: bool) -> dict[str, np.ndarray]:
    from onnxscript_ep_passes.fusion.evaluate import Sizes, generate_feeds

    sizes = Sizes(1, STEP, PAST) if kv else Sizes(1, PREFILL, 0)
    return generate_feeds(model_inputs, sizes, seed=0)


class _Variant:
    """One model in one real WebGPU session (rule 1), its feeds and its timings."""

    def __init__(self, row: dict[str, Any], path: Path, feeds: dict[str, np.ndarray]) -> None:
        import onnx
        import onnxruntime as ort

        from onnxscript_ep_passes.ep import make_webgpu_session_options

        self.row, self.times = row, []
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        make_webgpu_session_options(session_options=options)
        with tempfile.TemporaryDirectory() as tmp:
            options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
            self.session = ort.InferenceSession(str(path), options)
            saved = onnx.load(options.optimized_model_filepath, load_external_data=False)
        if WEBGPU not in self.session.get_providers():
            raise RuntimeError("the session has no WebGPU EP: not a measurement")
        nodes = [
            sub.ep_name
            for sub in self.session.get_provider_graph_assignment_info()
            for n in sub.get_nodes()
            if not n.op_type.startswith("Memcpy")
        ]
        row["memcpy"] = sum(n.op_type.startswith("Memcpy") for n in saved.graph.node)
        row["cpu_nodes"] = sum(ep != WEBGPU for ep in nodes)
        row["nodes"] = len(nodes)
        wanted = {i.name for i in self.session.get_inputs()}
        self.feeds = {k: v for k, v in feeds.items() if k in wanted}
        self.feeds.update(_genai_past(path, feeds))

    def run(self, timed: bool) -> np.ndarray:
        start = time.perf_counter()
        (logits,) = self.session.run(["logits"], self.feeds)
        if timed:
            self.times.append((time.perf_counter() - start) * 1e3)
        return np.asarray(logits)


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
    return np.asarray(session.run(["logits"], {k: v for k, v in feeds.items() if k in wanted})[0])


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
        lines = [x for x in done.stderr.splitlines() if x.strip()]
        logger.warning("GenAI builder failed for %s: %s", kind, lines[-1] if lines else "?")
        return None
    return out / "model.onnx"


def _build(kind: str, opset: int, kv: bool, tmp: Path) -> list[tuple[dict[str, Any], Path]]:
    """The export, lower and optimize variants of one model, saved under ``tmp``."""
    import onnx
    import onnx_ir as ir
    from tests.torch_models import llm_export

    from onnxscript_ep_passes.passes import LowerOpsetForEpPass
    from onnxscript_ep_passes.pipeline import OptimizeForEpPass

    proto = llm_export(kind, opset, kv_cache=kv)
    built = []
    for name in ("export", "lower", "optimize"):
        model = ir.from_proto(proto)
        row: dict[str, Any] = {"variant": name, "fusions": [], "refused": {}}
        if name == "lower":
            LowerOpsetForEpPass("webgpu")(model)
        elif name == "optimize":
            pipeline = OptimizeForEpPass("webgpu")
            pipeline(model)
            row["fusions"] = [(f.pattern, f.count) for f in pipeline.fusions if f.kept]
            for f in pipeline.fusions:
                row["refused"].update(f.refused)
        row["opset"] = model.opset_imports.get("")
        path = tmp / f"{kind}-{opset}-{'kv' if kv else 'prefill'}-{name}.onnx"
        onnx.save(ir.to_proto(model), path)
        built.append((row, path))
    return built


def _group(
    kind: str, opset: int, kv: bool, tmp: Path, builder: Path | None, runs: int, warmup: int
) -> list[dict[str, Any]]:
    """Measure one (model, cache) group's variants interleaved (rules 2 and 3)."""
    import onnx_ir as ir
    from tests.torch_models import llm_export

    proto = llm_export(kind, opset, kv_cache=kv)
    feeds = _feeds(ir.from_proto(proto).graph.inputs, kv)
    expected = _cpu_logits(proto.SerializeToString(), feeds)
    built = _build(kind, opset, kv, tmp)
    if builder is not None:
        built.append(({"variant": "genai", "opset": None, "fusions": [], "refused": {}}, builder))
    variants: list[_Variant] = []
    rows = []
    for row, path in built:
        row.update(model=kind, source_opset=opset, kv_cache=kv)
        rows.append(row)
        try:
            variants.append(_Variant(row, path, feeds))
        except Exception as error:  # a variant that does not load is a result too
            row["error"] = str(error)[:300]
            logger.warning("%s %s: %s", kind, row["variant"], error)
    for variant in variants:
        logits = variant.run(timed=False)
        same = logits.shape == expected.shape
        variant.row["max_diff"] = float(np.abs(logits - expected).max()) if same else None
        for _ in range(warmup - 1):
            variant.run(timed=False)
    load = os.getloadavg()[0]
    for _ in range(runs):
        for variant in variants:
            variant.run(timed=True)
    for variant in variants:
        variant.row.update(
            min_ms=min(variant.times),
            median_ms=statistics.median(variant.times),
            runs=len(variant.times),
            loadavg_1m=load,
        )
        logger.info("%s", {k: v for k, v in variant.row.items() if k != "refused"})
    return rows


def bench(
    kinds: list[str], opsets: list[int], runs: int, warmup: int, genai: bool
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench_fusion_") as tmp_name:
        tmp = Path(tmp_name)
        for kind in kinds:
            builder = _genai_model(kind, tmp) if genai else None
            for kv in (False, True):
                for opset in opsets:
                    with_builder = builder if opset == opsets[0] else None
                    rows += _group(kind, opset, kv, tmp, with_builder, runs, max(1, warmup))
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| model | cache | source opset | variant | opset | Memcpy | CPU nodes | min ms "
        "| median ms | median vs export | diff | load | fusions |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    export: dict[tuple[str, bool, int], float] = {}
    for r in rows:
        if r["variant"] == "export" and "median_ms" in r:
            export[(r["model"], r["kv_cache"], r["source_opset"])] = r["median_ms"]
    for r in rows:
        cache = "KV" if r["kv_cache"] else "prefill"
        head = f"| {r['model']} | {cache} | {r['source_opset']} | {r['variant']} |"
        if "error" in r or "median_ms" not in r:
            lines.append(f"{head} | error: {r.get('error', '?')[:80]} | | | | | | | | |")
            continue
        base = export.get((r["model"], r["kv_cache"], r["source_opset"]))
        ratio = f"{r['median_ms'] / base:.2f}x" if base else ""
        fusions = ", ".join(f"{p} x{n}" for p, n in r["fusions"])
        diff = "" if r["max_diff"] is None else f"{r['max_diff']:.1e}"
        lines.append(
            f"{head} {r['opset'] or ''} | {r['memcpy']} | {r['cpu_nodes']} of {r['nodes']} | "
            f"{r['min_ms']:.2f} | {r['median_ms']:.2f} | {ratio} | {diff} | "
            f"{r['loadavg_1m']:.1f} | {fusions} |"
        )
    return "\n".join(lines)


def verdict(rows: list[dict[str, Any]]) -> str:
    """Where ``optimize`` is slower than the export (median and min), said plainly."""
    by_key = {(r["model"], r["kv_cache"], r["source_opset"], r["variant"]): r for r in rows}
    slower, faster = [], []
    for (model, kv, opset, variant), r in by_key.items():
        base = by_key.get((model, kv, opset, "export"))
        if variant != "optimize" or base is None or "median_ms" not in r or "median_ms" not in base:
            continue
        label = f"{model} {'KV' if kv else 'prefill'} {opset}"
        ratio = r["median_ms"] / base["median_ms"]
        min_ratio = r["min_ms"] / base["min_ms"]
        text = f"{label} ({ratio:.2f}x median, {min_ratio:.2f}x min)"
        (slower if ratio > 1.0 or min_ratio > 1.0 else faster).append(text)
    out = [f"`optimize` no slower than the export (median and min): {', '.join(faster) or '-'}."]
    out.append(f"`optimize` slower than the export on median or min: {', '.join(slower) or '-'}.")
    return "\n\n".join(out)


INTRO = """\
Tiny random-weight decoders (`tests/torch_models.py`, 4 layers, hidden 64), batch 1;
prefill: 8 tokens; KV: 1 token after 8 past. One session per variant on the WebGPU plugin
EP (lavapipe) at ORT's default optimization level. Timing: warm-up, then rounds in which
every variant of a group runs once in turn (interleaved), min and median per variant.
`load`: 1-minute load average before the group's rounds (a shared 2-core machine: compare
variants within a group, not across groups). `diff`: max |logits - export's logits on ORT
CPU|. Lavapipe's GPU is the CPU: latencies rank variants only roughly; Memcpy and CPU-node
counts transfer to real GPUs."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--opsets", default="24")
    parser.add_argument("--runs", type=int, default=100, help="interleaved rounds")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--no-genai", action="store_true", help="skip ORT GenAI's builder")
    parser.add_argument("--out-dir", type=Path, default=HERE, help="where results_fusion.* go")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    for name in ("onnxscript", "onnx_ir", "onnxscript_ep_passes"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    rows = bench(
        args.models.split(","),
        [int(o) for o in args.opsets.split(",")],
        max(1, args.runs),
        args.warmup,
        not args.no_genai,
    )
    text = f"{INTRO}\n\n{render(rows)}\n\n{verdict(rows)}"
    print(text)
    used = " ".join(["python benchmarks/bench_fusion.py", *(argv or sys.argv[1:])]).strip()
    write_results(
        "fusion",
        "benchmarks/bench_fusion.py",
        used,
        text,
        rows,
        title="Fusion on WebGPU: export vs lower vs optimize (vs ORT GenAI's builder)",
        out_dir=args.out_dir,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
