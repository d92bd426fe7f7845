"""Does the EP objective pick what measurement picks? Every candidate, predicted vs measured.

For each dynamic-shape export of ``tests/torch_models.py`` (tiny 4-layer Llama, Qwen3,
Gemma3, Phi-3; dynamic batch, sequence and attention mask, ``-kv`` with a KV cache; random
weights, nothing downloaded; opsets above 25 up-converted from the opset-24 export), the
EP pass's candidates on WebGPU (``candidate_models``: every reachable opset, plain and
legalized) are each built and run in a real session of the WebGPU plugin EP (Mesa
lavapipe here) at ORT's default optimization level
(:func:`onnxscript_ep_passes.ep.measure.measure_candidate`): Memcpy nodes in ORT's
optimized model, nodes ORT placed on CPU, median latency of ``--runs`` runs after 2
warm-up runs, on inputs generated with the same ``--dims`` as the estimate. Per model the
table marks the source (``src``), the candidate the estimate chooses (``est``) and the
fastest measured (``fast``).

On lavapipe the "GPU" is the CPU: latencies rank candidates only roughly (a CPU
``Attention`` kernel is fast there, a Memcpy is a CPU copy); Memcpy and CPU-node counts
transfer to real GPUs. The machine may be shared: timings are noisy.

Usage (from the repository root, in the project's venv)::

    python benchmarks/bench_candidates.py          # the committed results' settings
    python benchmarks/bench_candidates.py --models llama-dynamic --opsets 24,25,28 --runs 10
    python benchmarks/bench_candidates.py --write     # results_candidates.md + .json

``--write`` writes ``benchmarks/results_candidates.md`` and the raw data
``benchmarks/results_candidates.json`` (``--out-dir DIR``: into DIR), both with the commit
and the date. ``benchmarks/run_all.py`` runs it as ``candidates``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # tests.torch_models: the exact models the tests use

from benchlib import git_state  # noqa: E402

MODELS = [f"{k}-{v}" for v in ("dynamic", "kv") for k in ("llama", "qwen3", "gemma3", "phi3")]
OPSETS = (24,)
DIMS = "batch=1,sequence_length=32,past_sequence_length=32"  # the results' settings


def _bench_model(name: str, opset: int, dims: str | None, runs: int, rounds: int) -> dict[str, Any]:
    import onnx_ir as ir
    from tests.torch_models import llm_export

    from onnxscript_ep_passes.ep import get_table
    from onnxscript_ep_passes.ep.measure import measure_candidate
    from onnxscript_ep_passes.passes.lower_for_ep import candidate_models

    kind, variant = name.split("-")
    proto = llm_export(kind, opset, kv_cache=variant == "kv")
    model = ir.serde.deserialize_model(proto)
    table = get_table("webgpu")
    start = time.perf_counter()
    choice, models = candidate_models(model, table, dims=dims)
    choose_s = time.perf_counter() - start
    keys = [  # plain candidates first, each kind from the highest opset
        (c.opset, c.legalized, c.cost)
        for c in sorted(choice.candidates.values(), key=lambda c: (c.legalized, -c.opset))
    ]
    # Rounds interleave the candidates (a burst of load hits all of them alike); each
    # candidate's latency is the lowest of its per-round medians.
    latencies: dict[tuple[int, bool], list[float]] = {}
    results: dict[tuple[int, bool], Any] = {}
    for _ in range(rounds):
        for cand_opset, legalized, _cost in keys:
            built = models[(cand_opset, legalized)]
            measured = measure_candidate(built, "webgpu", choice.dims, runs=runs)
            results[(cand_opset, legalized)] = measured
            latencies.setdefault((cand_opset, legalized), []).append(measured.latency_ms)
    rows = []
    for cand_opset, legalized, cost in keys:
        measured = results[(cand_opset, legalized)]
        rows.append(
            {
                "opset": cand_opset,
                "legalized": legalized,
                "source": cand_opset == choice.source_opset and not legalized,
                "chosen": (cand_opset, legalized) == (choice.chosen_opset, choice.legalized),
                "predicted": {
                    "memcpy": cost.memcpy,
                    "memcpy_bytes": cost.memcpy_bytes,
                    "fallback_nodes": cost.fallback_nodes,
                    "cost_us": cost.cost,
                },
                "measured": {
                    "memcpy": measured.memcpy,
                    "cpu_nodes": measured.cpu_nodes,
                    "latency_ms": min(latencies[(cand_opset, legalized)]),
                    "round_medians_ms": latencies[(cand_opset, legalized)],
                },
            }
        )
    fastest = min(rows, key=lambda r: r["measured"]["latency_ms"])
    fewest = min(r["measured"]["memcpy"] for r in rows)
    for row in rows:
        row["fastest"] = row is fastest
    chosen = next(r for r in rows if r["chosen"])
    return {
        "model": name,
        "opset": opset,
        "choose_s": round(choose_s, 2),
        "chosen_memcpy": chosen["measured"]["memcpy"],
        "fewest_memcpy": fewest,
        "estimate_picks_fastest": chosen is fastest,
        "candidates": rows,
    }


def _markdown(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "# EP objective: predicted vs measured candidates (WebGPU on lavapipe)",
        "",
        f"Written by `benchmarks/bench_candidates.py` on {meta['date']} at commit "
        f"`{meta['commit']}`{' (uncommitted changes)' if meta['dirty'] else ''}; "
        f"ORT {meta['ort']}, WebGPU plugin {meta['plugin']}, {meta['machine']}. "
        f"Dims: {meta['dims'] or 'defaults (batch 1, sequence 128, past 128)'}; "
        f"{meta['runs']} timed runs per candidate in each of {meta.get('rounds', 1)} "
        "interleaved rounds, the lowest round median kept. Raw data: "
        "`results_candidates.json`. The machine was shared with two other helpers' work "
        "(tests, benchmarks), so timings are noisy: candidates with the same placement "
        "(e.g. 21 and 20 legalized: the same graph under another opset) show the noise. "
        "On lavapipe the EP computes far slower than the CPU "
        "(`results_calibration.md`), the opposite of a GPU: a fast candidate here is one "
        "that keeps work off the EP, which is not what the estimate (built for a GPU) "
        "rewards.",
        "",
        "| model | opset | source Memcpy | chosen Memcpy (measured) | fewest reachable | "
        "source ms | chosen ms | fastest ms | estimate picks fastest |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        by_mark = {
            mark: next(c for c in r["candidates"] if c[mark])
            for mark in ("source", "chosen", "fastest")
        }
        ms = {k: f"{c['measured']['latency_ms']:.1f}" for k, c in by_mark.items()}
        lines.append(
            f"| {r['model']} | {r['opset']} | {by_mark['source']['measured']['memcpy']} | "
            f"{r['chosen_memcpy']} | {r['fewest_memcpy']} | {ms['source']} | "
            f"{ms['chosen']} | {ms['fastest']} | "
            f"{'yes' if r['estimate_picks_fastest'] else 'no'} |"
        )
    agree = sum(r["estimate_picks_fastest"] for r in results)
    lines += [
        "",
        f"The estimate picked the fastest measured candidate in {agree} of {len(results)} models.",
        "",
    ]
    for r in results:
        lines += [
            f"## {r['model']} at opset {r['opset']}",
            "",
            "| candidate | predicted Memcpy | predicted bytes | fallback | est. us | "
            "measured Memcpy | CPU nodes | ms | |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for c in r["candidates"]:
            p, m = c["predicted"], c["measured"]
            marks = " ".join(
                t
                for t, on in (("src", c["source"]), ("est", c["chosen"]), ("fast", c["fastest"]))
                if on
            )
            lines.append(
                f"| {c['opset']}{' legalized' if c['legalized'] else ''} | {p['memcpy']} | "
                f"{p['memcpy_bytes']} | {p['fallback_nodes']} | {p['cost_us']:.0f} | "
                f"{m['memcpy']} | {m['cpu_nodes']} | {m['latency_ms']:.1f} | {marks} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--opsets", default=",".join(map(str, OPSETS)))
    parser.add_argument("--dims", default=DIMS, help=f"name=size,... (default {DIMS})")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (min kept)")
    parser.add_argument("--write", action="store_true", help="write results_candidates.*")
    parser.add_argument("--out-dir", type=Path, help="write results_candidates.* there")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.ERROR)

    import onnxruntime as ort

    from onnxscript_ep_passes.ep.profiles.webgpu import plugin_version

    # The commit and tree state the run starts from (the code it measures).
    git = git_state()
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git["commit"],
        "dirty": bool(git["changed"]),
        "ort": ort.__version__,
        "plugin": plugin_version(),
        "machine": f"{platform.machine()}, {platform.system()}",
        "dims": args.dims,
        "runs": args.runs,
        "rounds": args.rounds,
    }
    results = []
    for name in [m for m in args.models.split(",") if m]:
        for opset in [int(o) for o in args.opsets.split(",") if o]:
            result = _bench_model(name, opset, args.dims, args.runs, args.rounds)
            print(
                f"{name} {opset}: chosen {result['chosen_memcpy']} Memcpy, fewest "
                f"{result['fewest_memcpy']}, estimate picks fastest: "
                f"{result['estimate_picks_fastest']}",
                flush=True,
            )
            results.append(result)
    out_dir = args.out_dir or (HERE if args.write else None)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "results_candidates.json").write_text(
            json.dumps({"meta": meta, "results": results}, indent=1) + "\n", encoding="utf-8"
        )
        (out_dir / "results_candidates.md").write_text(_markdown(results, meta), encoding="utf-8")
    else:
        print(_markdown(results, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
