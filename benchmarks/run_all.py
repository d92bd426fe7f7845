"""Regenerate every results file in ``benchmarks/`` with one command.

Runs each benchmark script in turn, in a fresh process, with its default settings; each
writes its own ``results_NAME.md`` and ``results_NAME.json`` (with the commit and date).
Nothing else writes those files.

========== ======================= ===============================================
name       script                  needs
========== ======================= ===============================================
cost       ``bench_cost.py``       ~2 GB in ``--workdir``; about 10 min on 2 cores
profile    ``profile_cli.py``      the models of ``cost`` (run it first)
scale      ``bench_scale.py``      ~1 GB in ``--workdir``; the EP search on 200k nodes
search     ``profile_search.py``   the 5k and 40k models of ``scale`` (run it first)
effect     ``bench_effect.py``     torch, the WebGPU plugin EP (lavapipe is enough)
legalize   ``bench_legalize.py``   torch, the WebGPU plugin EP
candidates ``bench_candidates.py`` torch, the WebGPU plugin EP; ~1 h on 2 shared cores
calibrate  ``calibrate_cost.py``   the WebGPU plugin EP; a few minutes
fusion     ``bench_fusion.py``     torch, the WebGPU plugin EP; onnxruntime-genai if present
families   ``bench_families.py``   torch, the WebGPU plugin EP; about 10 min on 2 cores
========== ======================= ===============================================

``cuda_check.py`` is not run: it needs an NVIDIA GPU (see its docstring).

Usage::

    python benchmarks/run_all.py                     # everything
    python benchmarks/run_all.py --only cost,scale
    python benchmarks/run_all.py --quick --out-dir /tmp/bench   # tiny sizes, a smoke test
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

SCRIPTS = {
    "cost": "bench_cost.py",
    "profile": "profile_cli.py",
    "scale": "bench_scale.py",
    "search": "profile_search.py",
    "effect": "bench_effect.py",
    "legalize": "bench_legalize.py",
    "candidates": "bench_candidates.py",
    "calibrate": "calibrate_cost.py",
    "fusion": "bench_fusion.py",
    "families": "bench_families.py",
}
QUICK = {  # tiny sizes: checks that the scripts run, measures nothing worth keeping
    "cost": ["--models", "300:1M", "--repeats", "1"],
    "profile": ["--repeats", "1"],
    "scale": ["--models", "300:1M,600:2M", "--timeout", "300"],
    "search": [],
    "effect": ["--models", "cnn", "--opsets", "25"],
    "legalize": ["--models", "cnn", "--runs", "2", "--repeats", "1"],
    "candidates": ["--models", "llama-dynamic", "--opsets", "24", "--runs", "1", "--rounds", "1"],
    "calibrate": ["--runs", "2"],
    "fusion": ["--models", "llama", "--opsets", "24", "--runs", "2", "--no-genai"],
    "families": ["--models", "gpt2", "--runs", "2", "--warmup", "1"],
}
WORKDIR_ARG = {"cost", "scale"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(SCRIPTS), help="names, comma-separated")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/onnx-bench"))
    parser.add_argument("--out-dir", type=Path, default=HERE, help="where results_* go")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(SCRIPTS)
    if unknown:
        parser.error(f"unknown benchmarks {sorted(unknown)}; known: {sorted(SCRIPTS)}")
    failed = []
    for name in names:
        cmd = [sys.executable, str(HERE / SCRIPTS[name]), "--out-dir", str(args.out_dir)]
        if name in WORKDIR_ARG:
            cmd += ["--workdir", str(args.workdir)]
        if name == "profile":  # the models bench_cost.py made (it runs first)
            labels = ("300_1M",) if args.quick else ("5k_120M", "20k_480M", "80k_960M")
            cmd += [str(args.workdir / f"synthetic_{label}.onnx") for label in labels]
            cmd += ["--write"]
        if name == "search":  # the models bench_scale.py made (it runs first)
            labels = ("300_1M",) if args.quick else ("5k_15M", "40k_120M")
            cmd += [str(args.workdir / f"decoder_{label}.onnx") for label in labels]
            cmd += ["--write"]
        if args.quick:
            cmd += QUICK[name]
        print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
        start = time.perf_counter()
        done = subprocess.run(cmd, check=False)
        print(f"== {name}: exit {done.returncode} after {time.perf_counter() - start:.0f} s")
        if done.returncode:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
