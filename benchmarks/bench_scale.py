"""Scale: the CLI on decoder-shaped models of 5k, 40k and 200k nodes, time and peak RSS.

For each model (made by ``make_decoder.py`` when missing: a repeated transformer block
with RMSNormalization, q/k/v/o MatMuls, rotary, Attention-24, a SwiGLU MLP,
Reshape/Transpose and an int64 shape subgraph; dynamic batch and sequence; external data)
each command runs in a fresh process, end to end (interpreter start, imports, load,
work, save):

* ``lower_23``: ``onnxscript-ep-passes lower IN -o OUT --target-opset 23``
* ``lower_22``: the same to 22: the step 23 -> 22 expands every Attention,
  RMSNormalization and RotaryEmbedding through its function body (about 5x the nodes),
  and the EP search evaluates that opset and those below it (the floor of its cost)
* ``lower_ep``: ``onnxscript-ep-passes lower IN -o OUT --ep cuda --ort-version 1.24``
* ``lower_ep_23``: ``lower_ep`` with ``--lowest-opset 23``: the search bounded to the
  model's opset and 23 (no candidate with the expansions built)
* ``report_json``: ``onnxscript-ep-passes report IN --ep cuda --ort-version 1.24 --json``
* ``ir_roundtrip``: what every command that builds the onnx-ir model pays before any work:
  the interpreter, the EP commands' imports, ``model_io.load_model`` and
  ``model_io.save_model`` of the unchanged model, garbage collection paused as in the CLI
  (``--worker ir_roundtrip``); the floor of any pass on the IR
* ``onnx_vc``: ``onnx.load``, ``onnx.version_converter.convert_version(model, 23)``,
  ``onnx.save`` with external data (``bench_cost.py``'s worker)

and records wall seconds, CPU seconds and peak RSS (``ru_maxrss``). Then it derives the
figures issue 10 sets targets for: the EP commands against ``lower_23`` (time <= 3x,
peak RSS <= 2x at 40k nodes) and growth with the node count (8x the nodes, 5k -> 40k:
<= 10x the time). The output of ``lower_23`` on models of at most ``--verify-max-nodes``
nodes is checked (opset 23, ``check_model(full_check=True)``, ORT CPU outputs equal).

Usage::

    python benchmarks/bench_scale.py                     # 5k, 40k, 200k; writes results_scale.*
    python benchmarks/bench_scale.py --models 300:2M --out-dir /tmp/x --repeats 1   # smoke
    python benchmarks/bench_scale.py --models 200k:600M --name scale_200k   # one size apart
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchlib import HERE, environment, gb, machine, measure, write_results

TARGET = 23
EP_ARGS = ("--ep", "cuda", "--ort-version", "1.24")
COMMANDS = (
    "lower_23",
    "lower_22",
    "lower_ep",
    "lower_ep_23",
    "report_json",
    "ir_roundtrip",
    "onnx_vc",
)
DEFAULT_MODELS = "5k:15M,40k:120M,200k:600M"
# What benchlib.measure records about a run (the raw data keeps these, not the report
# that ``report --json`` prints: megabytes at 40k nodes).
MEASURED_KEYS = frozenset(
    {
        "cmd",
        "rc",
        "wall_s",
        "user_s",
        "sys_s",
        "max_rss_bytes",
        "minor_faults",
        "major_faults",
        "peak_anon_bytes",
        "peak_file_bytes",
        "loadavg_1m_before",
        "timed_out",
        "error",
    }
)


def command(tool: str, src: Path, dst: Path) -> list[str]:
    cli = [sys.executable, "-m", "onnxscript_ep_passes", "-q"]
    if tool in ("lower_23", "lower_22"):
        opset = tool.removeprefix("lower_")
        return [*cli, "lower", str(src), "-o", str(dst), "--target-opset", opset]
    if tool == "lower_ep":
        return [*cli, "lower", str(src), "-o", str(dst), *EP_ARGS]
    if tool == "lower_ep_23":
        return [*cli, "lower", str(src), "-o", str(dst), *EP_ARGS, "--lowest-opset", "23"]
    if tool == "ir_roundtrip":
        return [sys.executable, str(HERE / "bench_scale.py"), "--worker", "ir_roundtrip",
                str(src), str(dst)]  # fmt: skip
    if tool == "report_json":
        return [*cli, "report", str(src), *EP_ARGS, "--json", "--no-run"]  # the prediction only
    if tool == "onnx_vc":
        return [
            sys.executable,
            str(HERE / "bench_cost.py"),
            "--worker",
            "onnx_vc",
            str(src),
            str(dst),
        ]
    raise ValueError(f"unknown command {tool}")


def parse_count(text: str) -> int:
    text = text.strip().lower()
    return int(float(text[:-1]) * 1000) if text.endswith("k") else int(text)


def ensure_model(workdir: Path, spec: str) -> tuple[str, Path, dict[str, Any]]:
    """``40k:270M`` -> (label, path, info); makes the model when missing."""
    nodes_text, _, weights = spec.partition(":")
    label = f"decoder_{nodes_text}_{weights}"
    path = workdir / f"{label}.onnx"
    info_path = workdir / f"{label}.json"
    if not (path.exists() and info_path.exists()):
        print(f"making {path}", flush=True)
        done = subprocess.run(
            [
                sys.executable,
                str(HERE / "make_decoder.py"),
                str(path),
                "--nodes",
                str(parse_count(nodes_text)),
                "--weight-bytes",
                weights,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        info_path.write_text(json.dumps(dict(kv.split("=", 1) for kv in done.stdout.split())))
    return label, path, json.loads(info_path.read_text())


def _remove(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".data")):
        p.unlink(missing_ok=True)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if r["rc"] == 0]
    if not ok:
        last = runs[-1]
        return {"ok": False, "error": last.get("error"), "wall_s": last["wall_s"],
                "max_rss_bytes": last["max_rss_bytes"], "runs": len(runs)}  # fmt: skip
    return {
        "ok": True,
        "runs": len(ok),
        "wall_s": statistics.median(r["wall_s"] for r in ok),
        "cpu_s": statistics.median(r["user_s"] + r["sys_s"] for r in ok),
        "max_rss_bytes": statistics.median(r["max_rss_bytes"] for r in ok),
    }


def derived(models: dict[str, Any]) -> dict[str, Any]:
    """Ratios against issue 10's targets."""
    out: dict[str, Any] = {"per_model": {}, "growth": {}}
    for label, entry in models.items():
        tools = entry["tools"]
        base = tools.get("lower_23", {})
        ratios: dict[str, Any] = {}
        for tool in COMMANDS[1:]:
            s = tools.get(tool, {})
            if base.get("ok") and s.get("ok"):
                ratios[tool] = {
                    "time_vs_lower_23": s["wall_s"] / base["wall_s"],
                    "rss_vs_lower_23": s["max_rss_bytes"] / base["max_rss_bytes"],
                }
        out["per_model"][label] = ratios
    ordered = sorted(models.items(), key=lambda kv: int(kv[1]["info"]["nodes"]))
    for (la, a), (lb, b) in itertools.pairwise(ordered):
        key = f"{la} -> {lb}"
        nodes = int(b["info"]["nodes"]) / int(a["info"]["nodes"])
        growth: dict[str, Any] = {"nodes_x": nodes}
        for tool in COMMANDS:
            sa, sb = a["tools"].get(tool, {}), b["tools"].get(tool, {})
            if sa.get("ok") and sb.get("ok"):
                growth[f"{tool}_time_x"] = sb["wall_s"] / sa["wall_s"]
        out["growth"][key] = growth
    return out


def render(models: dict[str, Any], figures: dict[str, Any]) -> str:
    lines = [
        "## Wall time and peak RSS",
        "",
        "| model | nodes | weights | command | wall (median) | CPU | peak RSS | x lower_23 time "
        "| x lower_23 RSS | result |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for label, entry in models.items():
        info = entry["info"]
        for tool, s in entry["tools"].items():
            r = figures["per_model"][label].get(tool)
            tx = f"{r['time_vs_lower_23']:.2f}x" if r else "-"
            rx = f"{r['rss_vs_lower_23']:.2f}x" if r else "-"
            if s["ok"]:
                wall, cpu, result = f"{s['wall_s']:.2f} s", f"{s['cpu_s']:.2f} s", "ok"
            else:
                wall, cpu, result = "-", "-", f"FAILED after {s['wall_s']:.0f} s: {s['error']}"
            if tool in entry.get("verify", {}):
                result += f"; output: {entry['verify'][tool]}"
            lines.append(
                f"| {label} | {info['nodes']} | {gb(int(info['weight_bytes']))} | `{tool}` "
                f"| {wall} | {cpu} | {gb(s['max_rss_bytes'])} | {tx} | {rx} | {result} |"
            )
    lines += ["", "## Growth with the node count", ""]
    lines += ["| models | nodes | " + " | ".join(f"`{t}` time" for t in COMMANDS) + " |"]
    lines += ["|---|---:|" + "---:|" * len(COMMANDS)]
    for key, g in figures["growth"].items():
        cells = [f"{g[f'{t}_time_x']:.1f}x" if f"{t}_time_x" in g else "-" for t in COMMANDS]
        lines.append(f"| {key} | {g['nodes_x']:.1f}x | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _verify(src: Path, dst: Path, log_dir: Path, tag: str) -> str:
    check = measure(
        [
            sys.executable,
            str(HERE / "bench_cost.py"),
            "--worker",
            "verify",
            str(src),
            str(dst),
            "1",
        ],
        log_dir,
        tag,
    )
    report = check.get("verify")
    if not report:
        return f"verify failed: {check.get('error')}"
    good = (
        report["opset"].get("ai.onnx") == TARGET
        and report["checker"] == "ok"
        and report.get("ort_bitwise_equal") is True
    )
    return "opset 23, checker ok, ORT outputs equal" if good else f"CHECK FAILED: {report}"


def ir_roundtrip(src: str, dst: str) -> None:
    """The ``ir_roundtrip`` command (module docstring), in this process."""
    import onnxscript_ep_passes.passes.lower_for_ep  # noqa: F401  (the EP commands' imports)
    from onnxscript_ep_passes.core.collector import paused_collector
    from onnxscript_ep_passes.model_files.io import load_model, save_model

    with paused_collector():
        save_model(load_model(src), dst)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:2] == ["--worker", "ir_roundtrip"]:
        ir_roundtrip(argv[2], argv[3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/onnx-bench"))
    parser.add_argument("--models", default=DEFAULT_MODELS, help="NODES:WEIGHTS,...")
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    parser.add_argument(
        "--timeout-for",
        default="",
        help="per model size, e.g. 5k=900,200k=300 (overrides --timeout for those models)",
    )
    parser.add_argument(
        "--memory-limit", type=float, default=0.6, help="address-space cap, fraction of RAM"
    )
    parser.add_argument("--verify-max-nodes", type=int, default=5000)
    parser.add_argument("--out-dir", type=Path, default=HERE, help="where results_NAME.* go")
    parser.add_argument(
        "--name", default="scale", help="results_NAME.*: e.g. scale_200k for a run of one size"
    )
    args = parser.parse_args(argv)

    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"workdir {args.workdir}: {shutil.disk_usage(args.workdir).free / 1e9:.1f} GB free")
    limit = int(args.memory_limit * machine()["mem_bytes"]) or None
    logs = args.workdir / "logs"
    models: dict[str, Any] = {}
    timeouts = dict(item.split("=", 1) for item in args.timeout_for.split(",") if item)
    for spec in args.models.split(","):
        label, src, info = ensure_model(args.workdir, spec)
        timeout = float(timeouts.get(spec.partition(":")[0], args.timeout))
        entry: dict[str, Any] = {"info": info, "tools": {}, "runs": {}, "verify": {}}
        models[label] = entry
        for tool in args.commands.split(","):
            dst = args.workdir / f"out_{label}_{tool}.onnx"
            runs = []
            for i in range(args.repeats):
                _remove(dst)
                cmd = command(tool, src, dst)
                run = measure(cmd, logs, f"{label}_{tool}_{i}", memory_limit=limit,
                              timeout=timeout)  # fmt: skip
                if tool == "report_json":  # measure() merged the printed report in
                    run = {k: v for k, v in run.items() if k in MEASURED_KEYS}
                runs.append(run)
                print(f"{label} {tool}: {run['wall_s']:.2f} s, peak RSS "
                      f"{gb(run['max_rss_bytes'])}, rc {run['rc']} {run.get('error', '')}",
                      flush=True)  # fmt: skip
                if run["rc"] != 0:
                    break
            entry["runs"][tool] = runs
            entry["tools"][tool] = summarize(runs)
            small = int(info["nodes"]) <= args.verify_max_nodes
            if tool == "lower_23" and runs[-1]["rc"] == 0 and small:
                entry["verify"][tool] = _verify(src, dst, logs, f"{label}_verify")
            _remove(dst)
    figures = derived(models)
    used = " ".join(["python benchmarks/bench_scale.py", *argv]).strip()
    md = INTRO + "\n\n" + render(models, figures)
    write_results(
        args.name,
        "benchmarks/bench_scale.py",
        used,
        md,
        {"models": models, "derived": figures},
        title="Scale: the CLI on decoder-shaped models (time, peak RSS)",
        out_dir=args.out_dir,
        env=environment(),
    )
    print(render(models, figures))
    return 0


INTRO = """\
Each command runs in a fresh process, end to end (interpreter start, imports, load, work,
save); `wall` is the median over the runs, `peak RSS` is the child's `ru_maxrss` (it counts
memory-mapped weight pages that were touched). `x lower_23` divides by the plain
`lower --target-opset 23` on the same model: issue 10 wants the EP commands at most 3x its
time and 2x its peak RSS at 40k nodes, and 8x the nodes to cost at most 10x the time.
`lower_ep_23` is the EP search bounded with `--lowest-opset 23`; `ir_roundtrip` loads the
model into onnx-ir and saves it unchanged, with the EP commands' imports: the floor of
any command that works on the onnx-ir model.
Models: `make_decoder.py` (see its docstring), weights float32 in one external data file.
The machine is shared: other work ran at the same time (see the load average)."""


if __name__ == "__main__":
    sys.exit(main())
