"""Profile what ``onnxscript-ep-passes lower`` does, in process, phase by phase.

Runs the CLI's steps (``load_model``, ``LowerOpsetPass``, ``save_model``) on one model and
prints, for each phase, its wall seconds and RSS after it; with ``--cprofile`` the top
functions by cumulative time; with ``--tracemalloc`` the peak of Python allocations
and the lines that allocated most at that peak.

Usage::

    python benchmarks/profile_cli.py /tmp/onnx-bench/synthetic_20k_480M.onnx --cprofile
    python benchmarks/profile_cli.py MODEL.onnx --tracemalloc
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path


def _rss() -> str:
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                fields[key] = int(rest.split()[0]) / 1024
    return ", ".join(f"{k} {v:.0f} MiB" for k, v in fields.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--target-opset", type=int, default=23)
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument(
        "--phases", default="load,lower,save", help="phases cProfile records: load,lower,save"
    )
    parser.add_argument("--sort", default="cumulative", help="pstats sort key")
    parser.add_argument("--dump", type=Path, help="write the raw cProfile stats here")
    parser.add_argument(
        "--no-gc", action="store_true", help="gc.disable() first: what the cyclic GC costs"
    )
    args = parser.parse_args(argv)

    if args.no_gc:
        gc.disable()
    start = time.perf_counter()
    from onnxscript_ep_passes.lowering.lower_opset import LowerOpsetPass
    from onnxscript_ep_passes.model_io import load_model, save_model

    sys.stdout.write(f"imports: {time.perf_counter() - start:.2f} s; {_rss()}\n")

    profiler = cProfile.Profile() if args.cprofile else None
    if args.tracemalloc:
        tracemalloc.start(10)
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        out = Path(tmp) / "lowered.onnx"
        phases = (
            ("load", lambda: load_model(args.model)),
            ("lower", lambda: LowerOpsetPass(args.target_opset)(state["model"])),
            ("save", lambda: save_model(state["model"], out)),
        )
        state: dict[str, object] = {}
        for name, step in phases:
            start = time.perf_counter()
            profiled = profiler is not None and name in args.phases.split(",")
            if profiled:
                profiler.enable()
            result = step()
            if profiled:
                profiler.disable()
            if name == "load":
                state["model"] = result
            line = f"{name}: {time.perf_counter() - start:.2f} s; {_rss()}"
            if args.tracemalloc:
                current, peak = tracemalloc.get_traced_memory()
                line += f"; python heap {current / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB"
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        if args.tracemalloc:
            snapshot = tracemalloc.take_snapshot()
            sys.stdout.write("\ntop allocations held after save (by line):\n")
            for stat in snapshot.statistics("lineno")[: args.top]:
                sys.stdout.write(f"  {stat}\n")
    sys.stdout.write(
        f"gc collections per generation: {[g['collections'] for g in gc.get_stats()]}\n"
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    sys.stdout.write(f"peak RSS (ru_maxrss): {peak:.0f} MiB\n")
    if profiler:
        stream = io.StringIO()
        stats = pstats.Stats(profiler, stream=stream)
        stats.sort_stats(args.sort).print_stats(args.top)
        sys.stdout.write(stream.getvalue())
        if args.dump:
            stats.dump_stats(args.dump)
    return 0


if __name__ == "__main__":
    sys.exit(main())
