"""Profile ``onnxscript-ep-passes lower --target-opset``, phase by phase, in fresh processes.

For each model, a child process runs the CLI's steps as ``lower`` runs them and times
each phase: interpreter start-up (a bare ``python -c pass``), imports, parse, lower, save
(as in the CLI the weights copy starts before the lowering, so ``save`` is what is left
of it, then the graph written), and the wall time of the whole process; and the
same for ``onnx.version_converter`` (``bench_cost.py``'s worker: load with the weights,
convert, save). The table says where the time goes and what bounds the ratio between
the two: with ``--write`` it goes to ``results_profile.md`` / ``.json`` (with the commit
and date).

With ``--cprofile`` (one model, no ``--write``) the child also prints cProfile's top
functions; ``--tracemalloc`` the peak Python heap.

Usage::

    python benchmarks/profile_cli.py /tmp/onnx-bench/synthetic_20k_480M.onnx --cprofile
    python benchmarks/profile_cli.py M5k.onnx M20k.onnx M80k.onnx --write
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from benchlib import HERE, gb, measure, write_results

TARGET = 23


def child(model: Path, out: Path, profile: bool, trace: bool, top: int) -> None:
    """Run the CLI's ``lower`` steps, print one JSON line of phase seconds."""
    phases: dict[str, float] = {}
    start = time.perf_counter()
    from onnxscript_ep_passes.cli.program import _defer_sympy

    _defer_sympy()
    from onnxscript_ep_passes.lowering.lower_opset import LowerOpsetPass
    from onnxscript_ep_passes.lowering.proto_fast_path import try_lower_proto
    from onnxscript_ep_passes.model_files.io import load_graph_proto, model_from_proto, save_model
    from onnxscript_ep_passes.model_files.proto_save import ProtoSave, early_save, proto_source_file

    phases["imports"] = time.perf_counter() - start
    profiler = cProfile.Profile() if profile else None
    if trace:
        tracemalloc.start(10)
    if profiler:
        profiler.enable()
    start = time.perf_counter()
    proto = load_graph_proto(model)
    source = proto_source_file(proto, model)
    phases["parse"] = time.perf_counter() - start
    start = time.perf_counter()
    fast = False
    if source is not False:  # as the CLI does: the weights copy overlaps the lowering
        with ProtoSave(proto, out, source) as saving:
            fast = try_lower_proto(proto, TARGET)
            phases["lower"] = time.perf_counter() - start
            if fast:
                start = time.perf_counter()
                saving.commit(proto)  # waits for the copy's end
                phases["save"] = time.perf_counter() - start
    else:
        phases["lower"] = 0.0
    if not fast:  # the full pass, as the CLI runs it: IR built from the proto, lower, save
        with early_save(proto, model, out, source) as early:  # the copy overlaps the rest
            start = time.perf_counter()
            ir_model = model_from_proto(proto, model)
            phases["ir_load"] = time.perf_counter() - start
            start = time.perf_counter()
            LowerOpsetPass(TARGET)(ir_model)
            phases["ir_lower"] = time.perf_counter() - start
            start = time.perf_counter()
            if early is None or not early.commit_model(ir_model):
                save_model(ir_model, out)
            phases["save"] = time.perf_counter() - start
    if profiler:
        profiler.disable()
    report: dict[str, Any] = {"phases": phases, "fast_path": fast}
    report["max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if trace:
        report["python_heap_peak_bytes"] = tracemalloc.get_traced_memory()[1]
    sys.stdout.write(json.dumps(report) + "\n")
    if profiler:
        stream = io.StringIO()
        pstats.Stats(profiler, stream=stream).sort_stats("cumulative").print_stats(top)
        sys.stderr.write(stream.getvalue())


def _profile_model(model: Path, repeats: int, logs: Path, extra: list[str]) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"python": [], "ours": [], "onnx_vc": []}
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        out = Path(tmp) / "out.onnx"
        for i in range(repeats):
            tag = f"{model.stem}_{i}"
            runs["python"].append(measure([sys.executable, "-c", "pass"], logs, f"{tag}_py"))
            cmd = [sys.executable, __file__, "--child", str(model), str(out), *extra]
            runs["ours"].append(measure(cmd, logs, f"{tag}_ours"))
            worker = [sys.executable, str(HERE / "bench_cost.py"), "--worker", "onnx_vc"]
            runs["onnx_vc"].append(measure([*worker, str(model), str(out)], logs, f"{tag}_vc"))
    summary: dict[str, Any] = {"runs": runs}
    for tool, items in runs.items():
        ok = [r for r in items if r["rc"] == 0]
        if not ok:
            summary[tool] = {"error": items[0].get("error")}
            continue
        entry: dict[str, Any] = {
            "wall_s": statistics.median(r["wall_s"] for r in ok),
            "cpu_s": statistics.median(r["user_s"] + r["sys_s"] for r in ok),
            "max_rss_bytes": statistics.median(r["max_rss_bytes"] for r in ok),
        }
        if ok[0].get("phases"):
            keys = ok[0]["phases"].keys()
            entry["phases"] = {k: statistics.median(r["phases"][k] for r in ok) for k in keys}
            entry["fast_path"] = ok[0].get("fast_path")
        summary[tool] = entry
    return summary


def render(results: dict[str, Any]) -> str:
    lines = [
        "| model | tool | process wall | python start-up | imports | parse / load "
        "| lower / convert | save | rest | CPU | peak RSS |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, entry in results.items():
        py = entry["python"]["wall_s"]
        for tool in ("ours", "onnx_vc"):
            s = entry[tool]
            if "error" in s:
                lines.append(f"| {name} | {tool} | failed: {s['error']} |" + " |" * 9)
                continue
            p = s.get("phases", {})
            if tool == "ours":
                label = "ours (fast path)" if s.get("fast_path") else "ours (full pass)"
                load = p.get("parse", 0) + p.get("ir_load", 0)
                work = p.get("lower", 0) + p.get("ir_lower", 0)
                imports = p.get("imports", 0)
            else:
                label, load, work, imports = tool, p.get("load", 0), p.get("convert", 0), 0.0
            save = p.get("save", 0)
            rest = s["wall_s"] - py - imports - load - work - save
            lines.append(
                f"| {name} | {label} | {s['wall_s']:.2f} s | {py:.2f} s | {imports:.2f} s "
                f"| {load:.2f} s | {work:.2f} s | {save:.2f} s | {rest:.2f} s "
                f"| {s['cpu_s']:.2f} s | {gb(s['max_rss_bytes'])} |"
            )
        ratio = entry["onnx_vc"].get("wall_s", 0) / entry["ours"].get("wall_s", 1)
        lines.append(f"| {name} | onnx_vc / ours | {ratio:.1f}x | | | | | | | | |")
    return "\n".join(lines)


INTRO = """\
Where the time of a plain `lower --target-opset 23` goes, phase by phase, next to
`onnx.version_converter` on the same model; each run is a fresh process and the figures
are medians. `python start-up` is a bare `python -c pass`; `imports` is what `lower`
imports (onnx, onnx-ir, this package; sympy deferred); `rest` is what the phases do not
cover (interpreter shutdown, unmapping). `onnx_vc`'s `load` reads the weights into memory,
its `save` writes them back. The machine is shared (see the load average): read the
ratios, not the absolute times."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", type=Path, nargs="+")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="write results_profile.*")
    parser.add_argument("--out-dir", type=Path, default=HERE)
    args = parser.parse_args(argv)
    if args.child:
        model, out = args.models
        child(model, out, args.cprofile, args.tracemalloc, args.top)
        return 0
    extra = ["--cprofile"] * args.cprofile + ["--tracemalloc"] * args.tracemalloc
    extra += ["--top", str(args.top)]
    logs = Path(tempfile.gettempdir()) / "onnx-bench-profile-logs"
    results = {m.name: _profile_model(m, args.repeats, logs, extra) for m in args.models}
    text = render(results)
    print(text)
    if args.cprofile:
        for m in args.models:
            print((logs / f"{m.stem}_0_ours.err").read_text())
    if args.write:
        used = " ".join(["python benchmarks/profile_cli.py", *(argv or sys.argv[1:])])
        write_results(
            "profile",
            "benchmarks/profile_cli.py",
            used,
            f"{INTRO}\n\n{text}",
            results,
            title="Profile: where a plain lowering's time goes",
            out_dir=args.out_dir,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
