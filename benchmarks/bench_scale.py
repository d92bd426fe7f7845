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

Beside them, on chain models without ``value_info`` (``make_chain.py``, ``--chain-models``:
a label-only lowering whose type rules read types only shape inference can tell):

* ``lower_23`` as above, and ``ir_roundtrip``
* ``parse_copy``: the interpreter, ``import onnx``, the model file parsed into a
  ``ModelProto`` and its data file copied (``--worker parse_copy``): the floor of any
  lowering that writes the same weights

and records wall seconds, CPU seconds and peak RSS (``ru_maxrss``). Then it derives the
ratios: every command against ``lower_23`` (issue 10) and against its yardstick
(``ir_roundtrip`` on the decoders, ``parse_copy`` on the chains), growth with the node
count, and issue 23's targets (:data:`TARGETS`): at 40k nodes ``lower_ep`` and
``report_json`` <= 3x ``ir_roundtrip``'s time and <= 2x its peak RSS (200k: <= 3.5x
the time), 5k -> 40k nodes <= 9x ``lower_ep``'s time, ``lower_22`` at 40k <= 2x
``ir_roundtrip``, the chain's ``lower_23`` <= 1.5x ``parse_copy``. The output of
``lower_23`` on models of at most ``--verify-max-nodes`` nodes is checked (opset 23,
``check_model(full_check=True)``, ORT CPU outputs equal).

Usage::

    python benchmarks/bench_scale.py                     # 5k, 40k, 200k; writes results_scale.*
    python benchmarks/bench_scale.py --models 300:2M --out-dir /tmp/x --repeats 1   # smoke
    python benchmarks/bench_scale.py --models 200k:600M --name scale_200k   # one size apart
    python benchmarks/bench_scale.py --models 5k:15M --chain-models 2k:48M   # small first
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

from benchlib import HERE, compile_package, environment, gb, machine, measure, write_results

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
CHAIN_COMMANDS = ("lower_23", "parse_copy", "ir_roundtrip")
DEFAULT_MODELS = "5k:15M,40k:120M,200k:600M"
DEFAULT_CHAIN_MODELS = "20k:480M"
# Issue 23's targets: (model size, command) -> (most time, most peak RSS) as a multiple of
# the model's yardstick (``ir_roundtrip``; ``parse_copy`` on chain models, size "chain").
TARGETS: dict[tuple[str, str], tuple[float, float | None]] = {
    ("40k", "lower_ep"): (3.0, 2.0),
    ("40k", "report_json"): (3.0, 2.0),
    ("200k", "lower_ep"): (3.5, None),
    ("200k", "report_json"): (3.5, None),
    ("40k", "lower_22"): (2.0, None),
    ("chain", "lower_23"): (1.5, None),
}
GROWTH_TARGET = ("5k", "40k", "lower_ep", 9.0)  # 8x the nodes: at most 9x the time
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
    if tool in ("ir_roundtrip", "parse_copy"):
        return [sys.executable, str(HERE / "bench_scale.py"), "--worker", tool,
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


def ensure_model(
    workdir: Path, spec: str, kind: str = "decoder"
) -> tuple[str, Path, dict[str, Any]]:
    """``40k:270M`` -> (label, path, info); makes the model when missing: a decoder
    (``make_decoder.py``) or a chain without value_info (``kind="chain"``, ``make_chain.py``)."""
    nodes_text, _, weights = spec.partition(":")
    label = f"{kind}_{nodes_text}_{weights}"
    path = workdir / f"{label}.onnx"
    info_path = workdir / f"{label}.json"
    if not (path.exists() and info_path.exists()):
        print(f"making {path}", flush=True)
        maker = "make_chain.py" if kind == "chain" else "make_decoder.py"
        done = subprocess.run(
            [
                sys.executable,
                str(HERE / maker),
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
    info = json.loads(info_path.read_text())
    info.setdefault("kind", kind)
    info.setdefault("size", nodes_text)
    return label, path, info


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


def yardstick(info: dict[str, Any]) -> str:
    """The command a model's others are measured against (module docstring)."""
    return "parse_copy" if info.get("kind") == "chain" else "ir_roundtrip"


def _ratio(s: dict[str, Any], base: dict[str, Any], key: str) -> float | None:
    if s.get("ok") and base.get("ok") and base.get(key):
        return float(s[key] / base[key])
    return None


def derived(models: dict[str, Any]) -> dict[str, Any]:
    """Ratios: against ``lower_23`` (issue 10), against the yardstick, growth, targets."""
    out: dict[str, Any] = {"per_model": {}, "growth": {}, "targets": []}
    for label, entry in models.items():
        tools = entry["tools"]
        base = tools.get("lower_23", {})
        stick_name = yardstick(entry["info"])
        stick = tools.get(stick_name, {})
        ratios: dict[str, Any] = {}
        for tool, s in tools.items():
            r: dict[str, Any] = {}
            if tool != "lower_23" and _ratio(s, base, "wall_s") is not None:
                r["time_vs_lower_23"] = _ratio(s, base, "wall_s")
                r["rss_vs_lower_23"] = _ratio(s, base, "max_rss_bytes")
            if tool != stick_name and _ratio(s, stick, "wall_s") is not None:
                r[f"time_vs_{stick_name}"] = _ratio(s, stick, "wall_s")
                r[f"rss_vs_{stick_name}"] = _ratio(s, stick, "max_rss_bytes")
            if r:
                ratios[tool] = r
        out["per_model"][label] = ratios
        size = "chain" if entry["info"].get("kind") == "chain" else entry["info"].get("size")
        for (want_size, tool), (most_time, most_rss) in TARGETS.items():
            if want_size != size or tool not in ratios:
                continue
            time_x = ratios[tool].get(f"time_vs_{stick_name}")
            rss_x = ratios[tool].get(f"rss_vs_{stick_name}")
            met = time_x is not None and time_x <= most_time
            if most_rss is not None:
                met = met and rss_x is not None and rss_x <= most_rss
            out["targets"].append(
                {
                    "model": label,
                    "command": tool,
                    "against": stick_name,
                    "time_x": time_x,
                    "rss_x": rss_x,
                    "most_time_x": most_time,
                    "most_rss_x": most_rss,
                    "met": met,
                }
            )
    decoders = [(la, e) for la, e in models.items() if e["info"].get("kind") != "chain"]
    ordered = sorted(decoders, key=lambda kv: int(kv[1]["info"]["nodes"]))
    for (la, a), (lb, b) in itertools.pairwise(ordered):
        key = f"{la} -> {lb}"
        nodes = int(b["info"]["nodes"]) / int(a["info"]["nodes"])
        growth: dict[str, Any] = {"nodes_x": nodes}
        for tool in COMMANDS:
            sa, sb = a["tools"].get(tool, {}), b["tools"].get(tool, {})
            if sa.get("ok") and sb.get("ok"):
                growth[f"{tool}_time_x"] = sb["wall_s"] / sa["wall_s"]
        out["growth"][key] = growth
        small, large, tool, most = GROWTH_TARGET
        if (a["info"].get("size"), b["info"].get("size")) == (small, large):
            x = growth.get(f"{tool}_time_x")
            out["targets"].append(
                {
                    "model": key,
                    "command": tool,
                    "against": "growth",
                    "time_x": x,
                    "rss_x": None,
                    "most_time_x": most,
                    "most_rss_x": None,
                    "met": x is not None and x <= most,
                }
            )
    return out


def render(models: dict[str, Any], figures: dict[str, Any]) -> str:
    lines = [
        "## Wall time and peak RSS",
        "",
        "`x yardstick` divides by `ir_roundtrip` on the decoders, by `parse_copy` on the chains.",
        "",
        "| model | nodes | weights | command | wall (median) | CPU | peak RSS | x lower_23 time "
        "| x lower_23 RSS | x yardstick time | x yardstick RSS | result |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for label, entry in models.items():
        info = entry["info"]
        stick = yardstick(info)
        for tool, s in entry["tools"].items():
            r = figures["per_model"][label].get(tool, {})

            def cell(key: str, r: dict[str, Any] = r) -> str:
                return f"{r[key]:.2f}x" if r.get(key) is not None else "-"

            if s["ok"]:
                wall, cpu, result = f"{s['wall_s']:.2f} s", f"{s['cpu_s']:.2f} s", "ok"
            else:
                wall, cpu, result = "-", "-", f"FAILED after {s['wall_s']:.0f} s: {s['error']}"
            if tool in entry.get("verify", {}):
                result += f"; output: {entry['verify'][tool]}"
            lines.append(
                f"| {label} | {info['nodes']} | {gb(int(info['weight_bytes']))} | `{tool}` "
                f"| {wall} | {cpu} | {gb(s['max_rss_bytes'])} | {cell('time_vs_lower_23')} "
                f"| {cell('rss_vs_lower_23')} | {cell(f'time_vs_{stick}')} "
                f"| {cell(f'rss_vs_{stick}')} | {result} |"
            )
    lines += ["", "## Growth with the node count", ""]
    lines += ["| models | nodes | " + " | ".join(f"`{t}` time" for t in COMMANDS) + " |"]
    lines += ["|---|---:|" + "---:|" * len(COMMANDS)]
    for key, g in figures["growth"].items():
        cells = [f"{g[f'{t}_time_x']:.1f}x" if f"{t}_time_x" in g else "-" for t in COMMANDS]
        lines.append(f"| {key} | {g['nodes_x']:.1f}x | " + " | ".join(cells) + " |")
    lines += ["", "## Issue 23's targets", ""]
    lines += ["| model | command | against | time | at most | peak RSS | at most | met |"]
    lines += ["|---|---|---|---:|---:|---:|---:|---|"]
    for t in figures["targets"]:

        def x(value: float | None) -> str:
            return "-" if value is None else f"{value:.2f}x"

        lines.append(
            f"| {t['model']} | `{t['command']}` | {t['against']} | {x(t['time_x'])} "
            f"| {x(t['most_time_x'])} | {x(t['rss_x'])} | {x(t['most_rss_x'])} "
            f"| {'yes' if t['met'] else 'NO'} |"
        )
    if not figures["targets"]:
        lines.append("| (no model of a size with a target was run) | | | | | | | |")
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


def parse_copy(src: str, dst: str) -> None:
    """The ``parse_copy`` command (module docstring), in this process: ``src`` parsed,
    its one data file (``SRC.data`` or the location its tensors name) copied beside
    ``dst`` under the name ``lower`` gives it."""
    import onnx

    proto = onnx.ModelProto()
    with open(src, "rb") as file:
        proto.ParseFromString(file.read())
    locations = {
        entry.value
        for tensor in proto.graph.initializer
        for entry in tensor.external_data
        if entry.key == "location"
    }
    for location in locations:
        shutil.copyfile(Path(src).parent / location, Path(dst).with_name(Path(dst).name + ".data"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:2] == ["--worker", "ir_roundtrip"]:
        ir_roundtrip(argv[2], argv[3])
        return 0
    if argv[:2] == ["--worker", "parse_copy"]:
        parse_copy(argv[2], argv[3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/onnx-bench"))
    parser.add_argument("--models", default=DEFAULT_MODELS, help="NODES:WEIGHTS,...")
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument(
        "--chain-models",
        default=DEFAULT_CHAIN_MODELS,
        help="NODES:WEIGHTS,... of make_chain.py models (no value_info); '' for none",
    )
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
    parser.add_argument(
        "--notes", default="", help="a line for the results (e.g. what else ran meanwhile)"
    )
    parser.add_argument("--out-dir", type=Path, default=HERE, help="where results_NAME.* go")
    parser.add_argument(
        "--name", default="scale", help="results_NAME.*: e.g. scale_200k for a run of one size"
    )
    args = parser.parse_args(argv)

    args.workdir.mkdir(parents=True, exist_ok=True)
    if not compile_package():
        print("some modules of the package did not compile to bytecode", file=sys.stderr)
    print(f"workdir {args.workdir}: {shutil.disk_usage(args.workdir).free / 1e9:.1f} GB free")
    limit = int(args.memory_limit * machine()["mem_bytes"]) or None
    logs = args.workdir / "logs"
    models: dict[str, Any] = {}
    timeouts = dict(item.split("=", 1) for item in args.timeout_for.split(",") if item)
    plan = [(spec, "decoder", args.commands.split(",")) for spec in args.models.split(",") if spec]
    plan += [(spec, "chain", list(CHAIN_COMMANDS)) for spec in args.chain_models.split(",") if spec]
    for spec, kind, tools in plan:
        label, src, info = ensure_model(args.workdir, spec, kind)
        timeout = float(timeouts.get(spec.partition(":")[0], args.timeout))
        entry: dict[str, Any] = {"info": info, "tools": {}, "runs": {}, "verify": {}}
        models[label] = entry
        for tool in tools:
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
    notes = f"\n\nNotes: {args.notes}" if args.notes else ""
    md = INTRO + notes + "\n\n" + render(models, figures)
    write_results(
        args.name,
        "benchmarks/bench_scale.py",
        used,
        md,
        {"models": models, "derived": figures, "notes": args.notes},
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
any command that works on the onnx-ir model, and the yardstick of issue 23's targets on
the decoders. On the chain models (no value_info) the yardstick is `parse_copy`: the
interpreter, `import onnx`, the model file parsed and its data file copied.
Models: `make_decoder.py` and `make_chain.py` (see their docstrings), weights float32 in
one external data file. The package's modules are compiled to bytecode before the runs
(as pip does when it installs a package; onnx and onnx-ir, which the yardsticks import,
were compiled so), so no timed run compiles them.
The machine is shared: other work ran at the same time (see the load average)."""


if __name__ == "__main__":
    sys.exit(main())
