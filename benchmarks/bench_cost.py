"""What lowering opset 24 -> 23 costs: ours vs onnx.version_converter vs a bare onnx-ir save.

For each synthetic model (made with ``make_synthetic.py`` when missing) and each tool,
every measurement runs in a fresh Python process and covers the whole job, end to end:
interpreter start, imports, load, convert, save with external data. For each run:

* wall seconds, measured around the child process;
* peak RSS: ``ru_maxrss`` of the child from ``os.wait4`` (the kernel's high-water mark,
  which counts file-backed pages such as memory-mapped weights too);
* peak anonymous memory (``RssAnon`` sampled from ``/proc/PID/status`` every 20 ms), the
  part that memory-mapped weights do not explain.

Tools:

* ``ours``: ``python -m onnxscript_ep_passes lower IN -o OUT --target-opset 23``
* ``onnx_vc``: ``onnx.load`` (external data loaded), ``onnx.version_converter.
  convert_version(model, 23)``, ``onnx.save(..., save_as_external_data=True)``
* ``ir_relabel``: ``onnx_ir.load``, set the ai.onnx opset import to 23, ``onnx_ir.save``
  with external data; the floor for any onnx-ir based tool (it is not exact in general).
* ``ours_nogc`` (not run by default): our CLI with ``gc.disable()`` first, to measure
  what Python's cyclic garbage collector costs it.

Each is repeated ``--repeats`` times (median reported); a tool that fails is run once.
Then each output of ours (and of onnx_vc) is verified in a fresh process: opset 23,
``onnx.checker.check_model(path, full_check=True)``, same node count, and for the
models up to ``--ort-max-nodes`` nodes the same ONNX Runtime output as the original on
one random input.

Usage::

    python benchmarks/bench_cost.py                      # 5k/120M, 20k/480M, 80k/960M
    python benchmarks/bench_cost.py --models 5k:120M --repeats 1 --tools ours,ir_relabel

Results go to ``--results`` (JSON) and a Markdown table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchlib import HERE, environment, fit, gb, machine, measure, write_results

TARGET = 23
TOOLS = ("ours", "onnx_vc", "ir_relabel")
DEFAULT_MODELS = "5k:120M,20k:480M,80k:960M"


# ---------------------------------------------------------------------------------------
# Workers: each runs in its own fresh process, prints one JSON line of phase timings.


def _emit(phases: dict[str, float]) -> None:
    sys.stdout.write(json.dumps({"phases": phases}) + "\n")
    sys.stdout.flush()


def worker_onnx_vc(src: str, dst: str) -> None:
    import onnx
    from onnx import version_converter

    phases: dict[str, float] = {}
    start = time.perf_counter()
    model = onnx.load(src)  # external data is read into the protos
    phases["load"] = time.perf_counter() - start
    start = time.perf_counter()
    model = version_converter.convert_version(model, TARGET)
    phases["convert"] = time.perf_counter() - start
    start = time.perf_counter()
    onnx.save(
        model,
        dst,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=Path(dst).name + ".data",
    )
    phases["save"] = time.perf_counter() - start
    _emit(phases)


def worker_ir_relabel(src: str, dst: str) -> None:
    import onnx_ir as ir

    phases: dict[str, float] = {}
    start = time.perf_counter()
    model = ir.load(src)
    phases["load"] = time.perf_counter() - start
    start = time.perf_counter()
    model.opset_imports[""] = TARGET
    model.ir_version = min(model.ir_version, 11)  # the IR version of opset 23's release
    phases["convert"] = time.perf_counter() - start
    start = time.perf_counter()
    ir.save(model, dst, external_data=Path(dst).name + ".data")
    phases["save"] = time.perf_counter() - start
    _emit(phases)


def _weights_equal(a: Any, a_path: str, b: Any, b_path: str) -> bool | str:
    """Every initializer of ``a`` has the same name, type, shape and bytes in ``b``."""
    import mmap

    import numpy as np
    from onnx import TensorProto, numpy_helper

    maps: dict[str, mmap.mmap] = {}

    def data(tensor: TensorProto, model_path: str) -> np.ndarray:
        if tensor.data_location != TensorProto.EXTERNAL:
            return numpy_helper.to_array(tensor).reshape(-1).view(np.uint8)
        info = {entry.key: entry.value for entry in tensor.external_data}
        path = os.path.join(os.path.dirname(model_path), info["location"])
        if path not in maps:
            with open(path, "rb") as file:
                maps[path] = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        offset = int(info.get("offset", 0))
        return np.frombuffer(maps[path], np.uint8, int(info["length"]), offset)

    try:
        left = {t.name: t for t in a.graph.initializer}
        right = {t.name: t for t in b.graph.initializer}
        if left.keys() != right.keys():
            return "initializer names differ"
        for name, tensor in left.items():
            other = right[name]
            if (tensor.data_type, list(tensor.dims)) != (other.data_type, list(other.dims)):
                return f"{name}: type or shape differs"
            if not np.array_equal(data(tensor, a_path), data(other, b_path)):
                return f"{name}: bytes differ"
        return True
    finally:
        for handle in maps.values():
            handle.close()


def worker_verify(original: str, lowered: str, ort_check: bool) -> None:
    """Check a lowered model; print a JSON line with what was found."""
    import numpy as np
    import onnx

    report: dict[str, Any] = {}
    head = onnx.load(lowered, load_external_data=False)
    source = onnx.load(original, load_external_data=False)
    report["opset"] = {o.domain or "ai.onnx": o.version for o in head.opset_import}
    report["ir_version"] = head.ir_version
    report["nodes"] = len(head.graph.node)
    report["source_nodes"] = len(source.graph.node)
    report["ops_same"] = [n.op_type for n in head.graph.node] == [
        n.op_type for n in source.graph.node
    ]
    report["weights_equal"] = _weights_equal(source, original, head, lowered)
    del head, source
    start = time.perf_counter()
    try:
        onnx.checker.check_model(lowered, full_check=True)
        report["checker"] = "ok"
    except Exception as error:  # report, do not hide
        report["checker"] = f"{type(error).__name__}: {error}"[:500]
    report["checker_seconds"] = round(time.perf_counter() - start, 2)
    if ort_check:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        outputs = []
        for path in (original, lowered):
            session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
            feeds = {}
            rng = np.random.default_rng(1234)
            for arg in session.get_inputs():
                shape = [d if isinstance(d, int) else 2 for d in arg.shape]
                if arg.type == "tensor(int64)":  # ids, mask, positions: 0, 1, ... per row
                    feeds[arg.name] = np.broadcast_to(np.arange(shape[-1]), shape).copy()
                else:
                    feeds[arg.name] = rng.standard_normal(shape).astype(np.float32)
            outputs.append(session.run(None, feeds))
            del session
        same = all(np.array_equal(a, b) for a, b in zip(*outputs, strict=True))
        worst = max(
            float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            for a, b in zip(*outputs, strict=True)
        )
        report["ort_bitwise_equal"] = same
        report["ort_max_abs_diff"] = worst
        report["ort_output_finite"] = bool(all(np.isfinite(a).all() for a in outputs[0]))
    sys.stdout.write(json.dumps({"verify": report}) + "\n")


# ---------------------------------------------------------------------------------------
# The parent: run children, measure them.


def tool_command(tool: str, src: Path, dst: Path) -> list[str]:
    if tool == "ours":
        return [
            sys.executable,
            "-m",
            "onnxscript_ep_passes",
            "-q",
            "lower",
            str(src),
            "-o",
            str(dst),
            "--target-opset",
            str(TARGET),
        ]
    if tool == "ours_nogc":
        # What-if: the same CLI with Python's cyclic GC off (see README, profiling).
        return [
            sys.executable,
            "-c",
            "import gc, sys; gc.disable(); from onnxscript_ep_passes.cli.program import main; "
            "sys.exit(main(sys.argv[1:]))",
            "-q",
            "lower",
            str(src),
            "-o",
            str(dst),
            "--target-opset",
            str(TARGET),
        ]
    return [sys.executable, str(Path(__file__).resolve()), "--worker", tool, str(src), str(dst)]


def remove_model(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".data")):
        if p.exists():
            p.unlink()


def ensure_model(workdir: Path, spec: str) -> tuple[str, Path, dict[str, Any]]:
    """``20k:480M`` -> (label, path); makes the model with make_synthetic.py when missing."""
    nodes_text, _, weights_text = spec.partition(":")
    nodes = int(float(nodes_text.lower().removesuffix("k")) * (1000 if "k" in nodes_text else 1))
    label = f"{nodes_text}_{weights_text}"
    path = workdir / f"synthetic_{label}.onnx"
    info_path = path.with_suffix(".json")
    if not (path.exists() and path.with_name(path.name + ".data").exists() and info_path.exists()):
        sys.stdout.write(f"making {path} ({nodes} nodes, {weights_text} of weights)\n")
        sys.stdout.flush()
        done = subprocess.run(
            [
                sys.executable,
                str(HERE / "make_synthetic.py"),
                str(path),
                "--nodes",
                str(nodes),
                "--weight-bytes",
                weights_text,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        info = dict(item.split("=", 1) for item in done.stdout.split())
        info_path.write_text(json.dumps(info))
    info = json.loads(info_path.read_text())
    return label, path, info


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if r["rc"] == 0]
    if not ok:
        return {
            "ok": False,
            "error": runs[0].get("error"),
            "wall_s": runs[0]["wall_s"],
            "max_rss_bytes": runs[0]["max_rss_bytes"],
            "peak_anon_bytes": runs[0]["peak_anon_bytes"],
            "runs": len(runs),
        }
    summary: dict[str, Any] = {"ok": True, "runs": len(ok)}
    for key in (
        "wall_s",
        "user_s",
        "sys_s",
        "max_rss_bytes",
        "peak_anon_bytes",
        "minor_faults",
    ):
        values = [r[key] for r in ok if r.get(key) is not None]
        summary[key] = statistics.median(values) if values else None
    summary["wall_min_s"] = min(r["wall_s"] for r in ok)
    summary["cpu_s"] = statistics.median(r["user_s"] + r["sys_s"] for r in ok)
    phases = [r["phases"] for r in ok if "phases" in r]
    if phases:
        summary["phases"] = {k: statistics.median(p[k] for p in phases) for k in phases[0]}
    return summary


def table(results: dict[str, Any]) -> str:
    rows = [
        "| model | nodes | weights | tool | wall median (min) | CPU user / sys | peak RSS | peak anon"
        " | onnx_vc / tool | result |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for label, entry in results["models"].items():
        info = entry["info"]
        vc = entry["tools"].get("onnx_vc", {})
        for tool, summary in entry["tools"].items():
            speedup = "-"
            if tool != "onnx_vc" and vc.get("ok") and summary.get("ok"):
                speedup = f"{vc['wall_s'] / summary['wall_s']:.1f}x"
            if summary["ok"]:
                outcome = f"ok ({summary['runs']} runs)"
                wall = f"{summary['wall_s']:.2f} s ({summary['wall_min_s']:.2f})"
                cpu = f"{summary['user_s']:.1f} / {summary['sys_s']:.1f} s"
            else:
                outcome = f"FAILED after {summary['wall_s']:.1f} s: {summary['error']}"
                wall, cpu = "-", "-"
            rows.append(
                f"| {label} | {info['nodes']} | {gb(int(info['weight_bytes']))} | {tool} | "
                f"{wall} | {cpu} | {gb(summary['max_rss_bytes'])} | "
                f"{gb(summary['peak_anon_bytes'])} | {speedup} | {outcome} |"
            )
    return "\n".join(rows)


def targets(results: dict[str, Any], tool: str = "ours") -> str:
    """Issue 10's targets for the plain lowering, computed from the runs."""
    lines = [
        f"| model | `{tool}` wall | `onnx_vc` wall | speed-up (target >= 5x) "
        "| peak RSS / weight bytes (target <= 0.5) |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, entry in results["models"].items():
        ours, vc = entry["tools"].get(tool, {}), entry["tools"].get("onnx_vc", {})
        if not ours.get("ok"):
            continue
        weights = int(entry["info"]["weight_bytes"])
        if vc.get("ok"):
            vc_wall, speedup = f"{vc['wall_s']:.2f} s", f"{vc['wall_s'] / ours['wall_s']:.1f}x"
        else:
            vc_wall, speedup = "failed" if vc else "-", "-"
        lines.append(
            f"| {label} | {ours['wall_s']:.2f} s | {vc_wall} | {speedup} "
            f"| {ours['max_rss_bytes'] / weights:.2f} |"
        )
    return "\n".join(lines)


def scaling(results: dict[str, Any], tool: str = "ours") -> str:
    """Time per node, and lines through (nodes, median wall) and (nodes, median CPU).

    The lines use only the models with the same weight bytes per node as the first one,
    so that they measure node count alone.
    """
    points = [
        (int(e["info"]["nodes"]), int(e["info"]["weight_bytes"]), e["tools"][tool])
        for e in results["models"].values()
        if e["tools"].get(tool, {}).get("ok")
    ]
    lines = [f"{tool}: time per node (end to end, including interpreter start and imports):"]
    for nodes, weights, summary in points:
        lines.append(
            f"  {nodes:>7} nodes, {weights / 1e9:.2f} GB: wall {summary['wall_s']:6.2f} s = "
            f"{summary['wall_s'] / nodes * 1e6:6.1f} us/node; CPU {summary['cpu_s']:6.2f} s = "
            f"{summary['cpu_s'] / nodes * 1e6:6.1f} us/node"
        )
    if points:
        per_node = points[0][1] / points[0][0]
        same = [p for p in points if abs(p[1] / p[0] - per_node) <= 0.05 * per_node]
        if len({p[0] for p in same}) >= 2:
            for key in ("wall_s", "cpu_s"):
                a, b, r2 = fit([(n, s[key]) for n, _, s in same])
                lines.append(
                    f"  fit over {len(same)} models at {per_node / 1e3:.1f} kB/node: "
                    f"{key} = {a:.2f} s + {b * 1e6:.1f} us x nodes (R^2 = {r2:.4f})"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/onnx-bench"))
    parser.add_argument("--models", default=DEFAULT_MODELS, help="NODES:WEIGHTS,...")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ort-max-nodes", type=int, default=20_000)
    parser.add_argument("--out-dir", type=Path, default=HERE, help="where results_cost.* go")
    parser.add_argument(
        "--vc-memory-limit",
        type=float,
        default=0.45,
        help="cap onnx_vc's address space at this fraction of RAM (0: no cap)",
    )
    parser.add_argument(
        "--keep-outputs", action="store_true", help="keep the converted models (default: delete)"
    )
    args = parser.parse_args(argv)

    if args.worker:
        mode, *rest = args.worker
        if mode == "onnx_vc":
            worker_onnx_vc(*rest)
        elif mode == "ir_relabel":
            worker_ir_relabel(*rest)
        elif mode == "verify":
            worker_verify(rest[0], rest[1], rest[2] == "1")
        else:
            parser.error(f"unknown worker {mode}")
        return 0

    args.workdir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(args.workdir).free
    sys.stdout.write(f"workdir {args.workdir}: {free / 1e9:.1f} GB free\n")
    tools = [t for t in args.tools.split(",") if t]
    memory_limit = int(args.vc_memory_limit * machine()["mem_bytes"]) or None
    results: dict[str, Any] = {"target_opset": TARGET, "repeats": args.repeats, "models": {}}
    python_start = measure(
        [sys.executable, "-c", "import onnxscript_ep_passes.cli.program, onnx_ir, onnx"],
        args.workdir / "logs",
        "imports",
    )
    results["imports_wall_s"] = python_start["wall_s"]
    for spec in args.models.split(","):
        label, src, info = ensure_model(args.workdir, spec)
        entry: dict[str, Any] = {"info": info, "tools": {}, "runs": {}, "verify": {}}
        results["models"][label] = entry
        for tool in tools:
            dst = args.workdir / f"out_{label}_{tool}.onnx"
            runs = []
            for i in range(args.repeats):
                remove_model(dst)
                run = measure(
                    tool_command(tool, src, dst),
                    args.workdir / "logs",
                    f"{label}_{tool}_{i}",
                    memory_limit=memory_limit if tool == "onnx_vc" else None,
                )
                runs.append(run)
                state = "ok" if run["rc"] == 0 else f"FAILED ({run.get('error')})"
                sys.stdout.write(
                    f"{label} {tool} run {i + 1}: {run['wall_s']:.2f} s, "
                    f"max RSS {gb(run['max_rss_bytes'])}, anon {gb(run['peak_anon_bytes'])} "
                    f"{run.get('phases', '')} {state}\n"
                )
                sys.stdout.flush()
                if run["rc"] != 0:
                    break  # failures are deterministic; do not repeat them
            entry["runs"][tool] = runs
            entry["tools"][tool] = summarize(runs)
            if runs[-1]["rc"] == 0 and tool in ("ours", "ours_nogc", "onnx_vc"):
                ort_check = tool != "onnx_vc" and int(info["nodes"]) <= args.ort_max_nodes
                check = measure(
                    [
                        sys.executable,
                        str(Path(__file__).resolve()),
                        "--worker",
                        "verify",
                        str(src),
                        str(dst),
                        "1" if ort_check else "0",
                    ],
                    args.workdir / "logs",
                    f"{label}_{tool}_verify",
                )
                entry["verify"][tool] = check.get("verify", {"error": check.get("error")})
                sys.stdout.write(f"{label} {tool} verify: {entry['verify'][tool]}\n")
            if not args.keep_outputs:
                remove_model(dst)
    text = [table(results), targets(results)]
    for tool in tools:
        results[f"scaling_{tool}"] = scaling(results, tool)
        text.append("```\n" + results[f"scaling_{tool}"] + "\n```")
    sys.stdout.write("\n\n".join(text) + "\n")
    used = " ".join(["python benchmarks/bench_cost.py", *(argv or sys.argv[1:])]).strip()
    write_results(
        "cost",
        "benchmarks/bench_cost.py",
        used,
        INTRO + "\n\n" + "\n\n".join(text),
        results,
        title="Cost: lowering 24 -> 23 end to end, ours vs onnx.version_converter",
        out_dir=args.out_dir,
        env=environment(),
    )
    return 0


INTRO = """\
Median of the runs of each tool, each in a fresh process (load, lower, save with external
data; `bench_cost.py`'s docstring says what each tool does). `peak RSS` is `ru_maxrss`
(it counts touched pages of memory-mapped weights), `peak anon` leaves them out.
`onnx_vc / tool` is how many times faster the tool is than `onnx.version_converter`
(issue 10's target for `ours`: >= 5x). The machine is shared: see the load average."""


if __name__ == "__main__":
    sys.exit(main())
