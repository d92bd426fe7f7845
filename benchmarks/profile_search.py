"""Where the EP search's time goes, phase by phase, and how big each candidate is.

For each model, a child process runs the search ``lower --ep`` runs
(:func:`onnxscript_ep_passes.passes.lower_for_ep.choose_target_opset`, garbage collection
paused as in the CLI) with a timer around each phase; a phase called from inside another
counts for the outer one only:

* ``lower``: the one-opset lowering steps of the working copy (``run_lowering``);
* ``predict``: placement predictions (``predict_placement``);
* ``price``: pricing them (``placement_cost``);
* ``fold``: static shape folding of the nodes lowering built (legalized variants);
* ``checkpoint`` / ``restore``: recording the working copy and putting it back after each
  trial (a checkpoint), and undoing each legalized variant (its edit log's restore; the log
  records the folding's edits as they are made, counted in ``fold``);
* ``collect``: the young-generation collections after each candidate;
* ``clone``: the one working copy; ``other``: the rest (choosing, decisions, trials'
  expansions and widening).

It also records each candidate opset's node count (the placed nodes of its prediction),
and the same model's plain ``run_lowering`` to 23 and to 22, in the same process, for
scale: the search must evaluate every opset it can reach unless the model runs wholly on
the EP first. Writes ``results_profile_search.md`` / ``.json`` with ``--write``.

Usage::

    python benchmarks/profile_search.py /tmp/onnx-bench/decoder_5k_15M.onnx --write
"""

from __future__ import annotations

import argparse
import collections
import functools
import importlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchlib import HERE, environment, write_results

PKG = "onnxscript_ep_passes"
PHASES = (
    ("ep.placement.predict", "predict_placement", "predict"),
    ("ep.cost", "placement_cost", "price"),
    ("lowering.lower_opset", "run_lowering", "lower"),
    ("passes.static_shapes", "fold_static_shapes", "fold"),
    ("core.checkpoint", "checkpoint", "checkpoint"),
    ("core.collector", "collect_young", "collect"),
    ("core.copies", "copy_with_origins", "clone"),
)


def _child(path: str, ep: str, ort_version: str | None) -> dict[str, Any]:
    import gc

    gc.disable()
    import onnx_ir as ir

    seconds: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    inside: list[str] = []

    def timed(function: Any, label: str) -> Any:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if inside:  # called from within another phase: counted there
                return function(*args, **kwargs)
            inside.append(label)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[label] += time.perf_counter() - start
                calls[label] += 1
                inside.pop()

        return wrapper

    lower_for_ep = importlib.import_module(f"{PKG}.passes.lower_for_ep")
    checkpoints = importlib.import_module(f"{PKG}.core.checkpoint")
    lower_opset = importlib.import_module(f"{PKG}.lowering.lower_opset")
    table_choice = importlib.import_module(f"{PKG}.ep.table_choice")
    plain_lowering = lower_opset.run_lowering
    for module_name, name, label in PHASES:
        original = getattr(importlib.import_module(f"{PKG}.{module_name}"), name)
        wrapped = timed(original, label)
        for module in list(sys.modules.values()):  # every module that imported it
            ours = getattr(module, "__name__", "").startswith(PKG)
            if ours and getattr(module, name, None) is original:
                setattr(module, name, wrapped)
    checkpoints.Checkpoint.restore = timed(checkpoints.Checkpoint.restore, "restore")
    checkpoints.EditLog.restore = timed(checkpoints.EditLog.restore, "restore")

    table = table_choice.get_table(ep, ort_version)
    start = time.perf_counter()
    model = ir.load(path)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    choice = lower_for_ep.choose_target_opset(model, table)
    search_s = time.perf_counter() - start
    phases = {k: {"seconds": seconds[k], "calls": calls[k]} for k in seconds}
    phases["other"] = {"seconds": search_s - sum(seconds.values()), "calls": 1}
    plain = {}
    for opset in (23, 22):
        model = ir.load(path)
        start = time.perf_counter()
        plain_lowering(model, opset)
        plain[str(opset)] = time.perf_counter() - start
    return {
        "load_s": load_s,
        "search_s": search_s,
        "phases": phases,
        "plain_lowering_s": plain,
        "summary": choice.summary(),
        "candidates": {
            str(o): len(c.prediction.nodes)
            for (o, legalized), c in sorted(choice.candidates.items(), reverse=True)
            if not legalized
        },
        "legalized": sorted((o for o, legalized in choice.candidates if legalized), reverse=True),
    }


def render(results: dict[str, Any]) -> str:
    lines = [
        "Times are in one process, garbage collection paused as in the CLI; a phase called",
        "from inside another counts for the outer one. `x lower 23` divides by the plain",
        "lowering of the same model to 23 (onnx-ir model in memory, no load or save).",
        "",
    ]
    for name, r in results.items():
        plain23, plain22 = r["plain_lowering_s"]["23"], r["plain_lowering_s"]["22"]
        lines += [
            f"## {name}",
            "",
            f"{r['summary']}. Search {r['search_s']:.2f} s ({r['search_s'] / plain23:.0f}x "
            f"the plain lowering to 23, {plain23:.2f} s; lowering to 22 alone takes "
            f"{plain22:.2f} s, {plain22 / plain23:.0f}x). Load {r['load_s']:.2f} s.",
            "",
            "| phase | seconds | share | calls |",
            "|---|---:|---:|---:|",
        ]
        for phase, p in sorted(r["phases"].items(), key=lambda kv: -kv[1]["seconds"]):
            share = p["seconds"] / r["search_s"]
            lines.append(f"| {phase} | {p['seconds']:.2f} | {share:.0%} | {p['calls']} |")
        lines += [
            "",
            "Placed nodes per candidate opset (plain): "
            + ", ".join(f"{o}: {n}" for o, n in r["candidates"].items())
            + f"; legalized variants at {r['legalized']}.",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", type=Path, nargs="*")
    parser.add_argument("--ep", default="cuda")
    parser.add_argument("--ort-version", default="1.24")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--write", action="store_true", help="write results_profile_search.*")
    parser.add_argument("--out-dir", type=Path, default=HERE)
    args = parser.parse_args(argv)
    if args.child:
        path, ep, version = args.child
        print(json.dumps(_child(path, ep, version or None)))
        return 0
    results = {}
    for model in args.models:
        done = subprocess.run(
            [sys.executable, __file__, "--child", str(model), args.ep, args.ort_version or ""],
            check=True,
            capture_output=True,
            text=True,
        )
        results[model.stem] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{model.stem}: search {results[model.stem]['search_s']:.2f} s", flush=True)
    markdown = render(results)
    print(markdown)
    if args.write:
        used = " ".join(["python benchmarks/profile_search.py", *(argv or sys.argv[1:])])
        write_results(
            "profile_search",
            "benchmarks/profile_search.py",
            used,
            markdown,
            {"ep": args.ep, "ort_version": args.ort_version, "models": results},
            title=f"The EP search, phase by phase ({args.ep}, ORT {args.ort_version})",
            out_dir=args.out_dir,
            env=environment(),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
