"""Check the lowering on a real CUDA EP: Memcpy nodes, CPU-placed nodes and latency.

Run on a machine with an NVIDIA GPU and ``onnxruntime-gpu`` (installed *instead of*
``onnxruntime``; never both), from the repository root::

    pip install -e ".[torch,dev]" && pip uninstall -y onnxruntime && pip install onnxruntime-gpu
    python benchmarks/cuda_check.py --out cuda_results
    python benchmarks/cuda_check.py --models llama,cnn --opsets 23,24,25 --runs 100

What it does:

1. Checks that the CUDA EP really works here: ``CUDAExecutionProvider`` is available and a
   probe session puts its node on it. Otherwise it prints why and exits with status 2
   without measuring anything (``onnxruntime-gpu`` on a machine without a GPU silently
   runs sessions on CPU, so "available" alone proves nothing).
2. Lists the CUDA EP's kernels from the installed ORT (``live_table("cuda")``) and writes
   them as a snapshot (``cuda-ort-<major.minor>.tsv`` + ``.json``) into ``--out``, in the
   format of ``src/onnxscript_ep_passes/ep/data`` (copy it there to ship it); prints how it
   differs from the shipped snapshots.
3. For each model of ``tests/torch_models.py`` (tiny random Llama/Qwen/Gemma with SDPA, a
   CNN) exported at each source opset (21..25): lowers it with
   ``LowerOpsetForEpPass("cuda")`` on the live table, then for the original and the lowered
   model creates real CUDA sessions and reports

   * Memcpy nodes in the optimized model ORT saves (``optimized_model_filepath``) and
     CPU-placed nodes from ORT's placement record (``session.record_ep_graph_assignment_info``;
     on ORT builds without it, from a profiling run's ``args.provider``), at ORT's default
     optimization level, and at ``ORT_DISABLE_ALL`` next to the package's prediction for
     the graph as written;
   * the median latency of a forward pass (after warm-up), and the largest difference of
     the outputs from ORT's CPU EP.

Prints a Markdown table and writes ``cuda_check.json`` and ``cuda_check.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CUDA = "CUDAExecutionProvider"
MODELS = ("llama", "qwen", "gemma", "cnn")
OPSETS = (21, 22, 23, 24, 25)
EXIT_NO_CUDA = 2


class CudaUnavailableError(RuntimeError):
    """The CUDA EP cannot run here; the message says why."""


def _probe_model() -> bytes:
    import onnx
    import onnx.helper

    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])
    node = onnx.helper.make_node("Relu", ["x"], ["y"], name="probe")
    graph = onnx.helper.make_graph([node], "cuda_probe", [x], [y])
    model = onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid("", 14)], ir_version=8
    )
    return model.SerializeToString()


def check_cuda() -> str:
    """Return a description of the working CUDA EP, or raise :class:`CudaUnavailableError`."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise CudaUnavailableError(f"onnxruntime is not importable: {e}") from e
    if hasattr(ort, "preload_dlls"):  # CUDA/cuDNN from the nvidia-* wheels, if present
        with contextlib.suppress(Exception):
            ort.preload_dlls()
    available = ort.get_available_providers()
    if CUDA not in available:
        raise CudaUnavailableError(
            f"onnxruntime {ort.__version__} has no {CUDA} (available: {available}). "
            "Install onnxruntime-gpu instead of onnxruntime, on a machine with an NVIDIA GPU."
        )
    import numpy as np

    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(
            _probe_model(), options, providers=[CUDA, "CPUExecutionProvider"]
        )
        session.run(None, {"x": np.ones((2, 3), np.float32)})
    except Exception as e:
        raise CudaUnavailableError(f"a CUDA probe session failed: {e}") from e
    if CUDA not in session.get_providers():
        raise CudaUnavailableError(
            f"{CUDA} is listed but a session could not create it (providers "
            f"{session.get_providers()}): no usable GPU, driver or CUDA/cuDNN libraries here"
        )
    return f"onnxruntime {ort.__version__} with {CUDA} on {_gpu_name()}"


def _gpu_name() -> str:
    with contextlib.suppress(Exception):
        import torch

        if torch.cuda.is_available():
            return str(torch.cuda.get_device_name(0))
    with contextlib.suppress(Exception):
        import subprocess

        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if out:
            return out.splitlines()[0]
    return "an NVIDIA GPU"


# -- measuring ---------------------------------------------------------------------------


def _placement_from_profile(session: Any, feeds: dict[str, Any]) -> list[tuple[str, str, str]]:
    session.run(None, feeds)
    profile = session.end_profiling()
    try:
        events = json.loads(Path(profile).read_text())
    finally:
        with contextlib.suppress(OSError):
            os.remove(profile)
    seen: dict[str, tuple[str, str, str]] = {}
    for ev in events:
        args = ev.get("args", {})
        if ev.get("cat") == "Node" and "provider" in args and "op_name" in args:
            name = str(ev.get("name", "")).removesuffix("_kernel_time")
            seen[name] = (name, str(args["op_name"]), str(args["provider"]))
    return list(seen.values())


def measure(model: bytes, feeds: dict[str, Any], level: Any, runs: int) -> dict[str, Any]:
    """One CUDA session: placement, Memcpy in the saved optimized model, latency, outputs."""
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = level
    has_record = hasattr(ort.InferenceSession, "get_provider_graph_assignment_info")
    if has_record:
        options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    else:
        options.enable_profiling = True
    with tempfile.TemporaryDirectory(prefix="cuda_check_") as tmp:
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", "weights.bin"
        )
        session = ort.InferenceSession(model, options, providers=[CUDA, "CPUExecutionProvider"])
        saved = onnx.load(options.optimized_model_filepath, load_external_data=False)
    if CUDA not in session.get_providers():
        raise RuntimeError(f"the session has no {CUDA}: {session.get_providers()}")
    if has_record:
        placed = [
            (n.name, n.op_type, sub.ep_name)
            for sub in session.get_provider_graph_assignment_info()
            for n in sub.get_nodes()
        ]
        how = "record_ep_graph_assignment_info"
    else:
        placed = _placement_from_profile(session, feeds)
        how = "profiling args.provider"
    from onnxscript_ep_passes.core.onnx_utils import iter_nodes

    placed = [p for p in placed if p[1] not in ("MemcpyFromHost", "MemcpyToHost")]
    memcpy = Counter(n.op_type for n in iter_nodes(saved.graph))
    cpu = [p for p in placed if p[2] != CUDA]
    if len(cpu) == len(placed):
        raise RuntimeError(f"{CUDA} received no node: not a CUDA measurement")
    outputs = session.run(None, feeds)
    for _ in range(5):
        session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return {
        "memcpy": memcpy["MemcpyFromHost"] + memcpy["MemcpyToHost"],
        "memcpy_from_host": memcpy["MemcpyFromHost"],
        "memcpy_to_host": memcpy["MemcpyToHost"],
        "cpu": len(cpu),
        "nodes": len(placed),
        "cpu_ops": dict(sorted(Counter(p[1] for p in cpu).items())),
        "placement_from": how,
        "median_ms": round(statistics.median(times) * 1000, 3),
        "outputs": outputs,
    }


def _cpu_outputs(model: bytes, feeds: dict[str, Any]) -> list[Any]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def _max_diff(a: list[Any], b: list[Any]) -> float:
    import numpy as np

    return float(
        max(
            (
                np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)))
                for x, y in zip(a, b)
            ),
            default=0.0,
        )
    )


def run_case(kind: str, opset: int, table: Any, runs: int) -> dict[str, Any]:
    import onnx_ir as ir
    import onnxruntime as ort
    from tests.torch_models import export_proto, sample_inputs

    from onnxscript_ep_passes.passes import LowerOpsetForEpPass

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        proto = export_proto(kind, opset)
    feeds = sample_inputs(kind)
    model = ir.serde.deserialize_model(proto)
    choice = getattr(LowerOpsetForEpPass("cuda", table=table)(model), "choice", None)
    assert choice is not None
    sides = {
        "before": proto.SerializeToString(),
        "after": ir.serde.serialize_model(model).SerializeToString(),
    }
    reference = _cpu_outputs(sides["before"], feeds)
    result: dict[str, Any] = {
        "model": kind,
        "source_opset": opset,
        "chosen_opset": choice.chosen_opset,
        "predicted": {
            "before": {"memcpy": choice.before.memcpy, "cpu": _cpu_count(choice.before)},
            "after": {"memcpy": choice.after.memcpy, "cpu": _cpu_count(choice.after)},
        },
    }
    for side, blob in sides.items():
        default = measure(blob, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, runs)
        as_written = measure(blob, feeds, ort.GraphOptimizationLevel.ORT_DISABLE_ALL, 1)
        default["max_abs_diff_vs_cpu"] = _max_diff(default.pop("outputs"), reference)
        as_written.pop("outputs")
        result[side] = {"default": default, "as_written": as_written}
    return result


def _cpu_count(prediction: Any) -> int:
    return len(prediction.fallback_nodes) + len(prediction.shape_computation_nodes)


# -- kernel table ----------------------------------------------------------------------


def dump_table(out: Path, where: str) -> tuple[Any, list[str]]:
    from onnxscript_ep_passes.ep.live_tables import live_table
    from onnxscript_ep_passes.ep.snapshots import available_snapshots, load_snapshot, write_snapshot

    table = live_table("cuda")
    line = ".".join(table.ort_version.split(".")[:2])
    path = write_snapshot(
        table, out, f"cuda-ort-{line}", notes=f"dumped by benchmarks/cuda_check.py on {where}"
    )
    notes = [f"wrote {path} ({len(table)} kernels, {table.source})"]
    mine = {(d, op, r.start, r.end) for (d, op), rs in table.ranges.items() for r in rs}
    for info in available_snapshots():
        if info.ep != CUDA:
            continue
        snap = load_snapshot(info.name)
        theirs = {(d, op, r.start, r.end) for (d, op), rs in snap.ranges.items() for r in rs}
        notes.append(
            f"vs shipped {info.name}: {len(mine - theirs)} ranges only here, "
            f"{len(theirs - mine)} only there"
        )
    return table, notes


# -- report ------------------------------------------------------------------------------


def _arrow(a: Any, b: Any) -> str:
    return f"{a} → {b}" if a != b else f"{a}"


def render(results: list[dict[str, Any]], header: list[str]) -> str:
    lines = [
        *header,
        "",
        "Each cell is *before → after* lowering. Default = ORT_ENABLE_ALL (what a user gets); "
        "as written = ORT_DISABLE_ALL, next to the package's prediction for that graph.",
        "",
        "| model | opset → chosen | Memcpy (default) | CPU nodes (default) | CPU ops after "
        "| Memcpy as written: measured / predicted | CPU nodes as written: measured / predicted "
        "| median ms | max abs diff vs CPU |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['source_opset']} → error | | | | | | | |")
            continue
        b, a = r["before"], r["after"]
        pb, pa = r["predicted"]["before"], r["predicted"]["after"]
        ops = ", ".join(f"{k} {v}" for k, v in a["default"]["cpu_ops"].items()) or "none"
        lines.append(
            f"| {r['model']} | {_arrow(r['source_opset'], r['chosen_opset'])} "
            f"| {_arrow(b['default']['memcpy'], a['default']['memcpy'])} "
            f"| {_arrow(b['default']['cpu'], a['default']['cpu'])} | {ops} "
            f"| {_arrow(b['as_written']['memcpy'], a['as_written']['memcpy'])} / "
            f"{_arrow(pb['memcpy'], pa['memcpy'])} "
            f"| {_arrow(b['as_written']['cpu'], a['as_written']['cpu'])} / "
            f"{_arrow(pb['cpu'], pa['cpu'])} "
            f"| {b['default']['median_ms']} → {a['default']['median_ms']} "
            f"| {b['default']['max_abs_diff_vs_cpu']:.2g} → {a['default']['max_abs_diff_vs_cpu']:.2g} |"
        )
    errors = [
        f"- {r['model']}-{r['source_opset']}: `{r['error']}`" for r in results if "error" in r
    ]
    if errors:
        lines += ["", "Errors:", *errors]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--opsets", default=",".join(map(str, OPSETS)))
    parser.add_argument("--runs", type=int, default=50, help="timed forward passes per session")
    parser.add_argument("--out", type=Path, default=Path("cuda_results"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)

    try:
        where = check_cuda()
    except CudaUnavailableError as e:
        print(
            f"cuda_check: nothing measured. The CUDA EP cannot run here: {e}\n"
            "Run this script on a machine with an NVIDIA GPU and onnxruntime-gpu "
            "(see its docstring). Exit status 2.",
            file=sys.stderr,
        )
        return EXIT_NO_CUDA
    try:
        import tests.torch_models  # noqa: F401  (needs pytest, torch, transformers)
    except ImportError as e:
        print(f"cuda_check: the exports need pytest, torch and transformers: {e}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    table, table_notes = dump_table(args.out, where)
    print(f"CUDA EP: {where}", file=sys.stderr)
    for note in table_notes:
        print(note, file=sys.stderr)
    results = []
    for kind in args.models.split(","):
        for opset in (int(o) for o in args.opsets.split(",")):
            try:
                results.append(run_case(kind, opset, table, args.runs))
            except Exception as e:
                results.append(
                    {"model": kind, "source_opset": opset, "error": f"{type(e).__name__}: {e}"}
                )
            print(f"{kind}-{opset} done", file=sys.stderr)
    text = render(results, [f"CUDA check: {where}.", *table_notes])
    print(text)
    (args.out / "cuda_check.md").write_text(text + "\n", encoding="utf-8")
    (args.out / "cuda_check.json").write_text(
        json.dumps({"where": where, "table": table_notes, "results": results}, indent=1) + "\n",
        encoding="utf-8",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
