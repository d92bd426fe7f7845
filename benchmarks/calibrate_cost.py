"""Calibrate the cost objective's rates (``ep/cost.py``) against the EP available here.

Each figure comes from real ORT sessions on generated float32 inputs (the minimum and the
median of ``--runs`` timed runs after 3 warm-up runs; the minimum is the figure used, as
the machine may be shared):

1. **Transfers.** A chain ``x -> [Neg -> Sign] x K -> y`` of ``N`` floats: the EP has
   ``Neg`` but no ``Sign`` kernel (WebGPU), so each ``Sign`` runs on CPU between two
   Memcpy nodes (checked in ORT's optimized model). The same chain with ``Abs`` (which
   the EP has, and which does the same work) instead of ``Sign`` is the all-EP baseline,
   and ``K`` ``Sign`` nodes alone on the CPU EP give the CPU time of the islands. Per
   island: ``2 x copy = mixed - all_ep - cpu_sign + ep_abs``, with ``ep_abs`` half the
   baseline's per-island time. The link bandwidth is the least-squares slope of the
   per-copy time over the sizes; the fixed cost per Memcpy is the smallest size's
   per-copy time less its bytes over that bandwidth (a plain intercept is dominated by
   the largest size's noise, and came out negative).
2. **Compute.** A square ``MatMul`` (``--matmul`` rows) on the CPU EP and on the EP gives
   FLOP/s (2 n^3 per run); an ``Add`` of two ``N``-float vectors gives bytes/s (12 N
   bytes touched per run).

On WebGPU over Mesa lavapipe the "device" is the host CPU running Vulkan in software: a
Memcpy is a copy within host memory plus a queue submission, and the EP computes with
the CPU. These figures describe lavapipe, not a GPU; ``docs/ep.md`` says how the shipped
rates relate to them.

Usage (from the repository root, in the project's venv)::

    python benchmarks/calibrate_cost.py            # print the table
    python benchmarks/calibrate_cost.py --write    # results_calibration.md + .json
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import environment, fit, write_results  # noqa: E402

logger = logging.getLogger("calibrate_cost")

SIZES = (1 << 10, 1 << 14, 1 << 17, 1 << 20)  # float32 elements per transfer
ISLANDS = 8
MATMUL = 512


def _chain(island_op: str, n: int, islands: int) -> Any:
    import onnx
    import onnx.helper as oh

    nodes, last = [], "x"
    for i in range(islands):
        nodes.append(oh.make_node("Neg", [last], [f"n{i}"], name=f"neg{i}"))
        nodes.append(oh.make_node(island_op, [f"n{i}"], [f"s{i}"], name=f"island{i}"))
        last = f"s{i}"
    nodes.append(oh.make_node("Neg", [last], ["y"], name="last"))
    graph = oh.make_graph(
        nodes,
        "chain",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [n])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [n])],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def _only(op: str, n: int, count: int) -> Any:
    import onnx
    import onnx.helper as oh

    nodes = [oh.make_node(op, ["x" if i == 0 else f"v{i}"], [f"v{i + 1}"]) for i in range(count)]
    nodes[-1].output[0] = "y"
    graph = oh.make_graph(
        nodes,
        "only",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [n])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [n])],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def _binary(op: str, shape_a: list[int], shape_b: list[int]) -> Any:
    import onnx
    import onnx.helper as oh

    graph = oh.make_graph(
        [oh.make_node(op, ["a", "b"], ["y"])],
        "binary",
        [
            oh.make_tensor_value_info("a", onnx.TensorProto.FLOAT, shape_a),
            oh.make_tensor_value_info("b", onnx.TensorProto.FLOAT, shape_b),
        ],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def _session(model: Any, on_ep: bool) -> tuple[Any, int]:
    """A session (EP first, or CPU only) and the Memcpy nodes of its optimized model."""
    import tempfile

    import onnx
    import onnxruntime as ort

    from onnxscript_ep_passes.ep import make_webgpu_session_options

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if on_ep:
        make_webgpu_session_options(session_options=options)
    with tempfile.TemporaryDirectory() as tmp:
        options.optimized_model_filepath = f"{tmp}/opt.onnx"
        session = ort.InferenceSession(model.SerializeToString(), options)
        saved = onnx.load(f"{tmp}/opt.onnx")
    if on_ep and "WebGpuExecutionProvider" not in session.get_providers():
        raise RuntimeError("no WebGPU EP here (set ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER=1)")
    memcpy = sum(1 for n in saved.graph.node if n.op_type.startswith("Memcpy"))
    return session, memcpy


def _time(session: Any, feeds: dict[str, np.ndarray], runs: int) -> tuple[float, float]:
    """(min, median) seconds of ``runs`` runs after 3 warm-up runs."""
    for _ in range(3):
        session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def _transfers(runs: int) -> tuple[list[dict[str, Any]], dict[str, float]]:
    rng = np.random.default_rng(0)
    rows = []
    for n in SIZES:
        feeds = {"x": rng.standard_normal(n).astype(np.float32)}
        mixed, mixed_copies = _session(_chain("Sign", n, ISLANDS), True)
        all_ep, base_copies = _session(_chain("Abs", n, ISLANDS), True)
        cpu_sign, _ = _session(_only("Sign", n, ISLANDS), False)
        t_mixed, m_mixed = _time(mixed, feeds, runs)
        t_ep, m_ep = _time(all_ep, feeds, runs)
        t_cpu, m_cpu = _time(cpu_sign, feeds, runs)
        ep_abs = t_ep / (2 * ISLANDS + 1)
        copy_s = (t_mixed - t_ep - t_cpu + ISLANDS * ep_abs) / (2 * ISLANDS)
        rows.append(
            {
                "elements": n,
                "bytes": 4 * n,
                "memcpy_mixed": mixed_copies,
                "memcpy_all_ep": base_copies,
                "mixed_ms": [round(1e3 * t_mixed, 4), round(1e3 * m_mixed, 4)],
                "all_ep_ms": [round(1e3 * t_ep, 4), round(1e3 * m_ep, 4)],
                "cpu_islands_ms": [round(1e3 * t_cpu, 4), round(1e3 * m_cpu, 4)],
                "per_copy_us": round(1e6 * copy_s, 3),
            }
        )
        logger.info("transfer %d floats: %.1f us per copy", n, 1e6 * copy_s)
    _, per_byte, r2 = fit([(r["bytes"], r["per_copy_us"]) for r in rows])
    fixed = rows[0]["per_copy_us"] - rows[0]["bytes"] * max(per_byte, 0.0)
    fitted = {
        "memcpy_latency_us": round(fixed, 3),
        "link_bytes_per_us": round(1 / per_byte, 1) if per_byte > 0 else float("inf"),
        "r2": round(r2, 4),
    }
    return rows, fitted


def _compute(runs: int) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(1)
    n = MATMUL
    mm = {"a": rng.standard_normal((n, n)).astype(np.float32)}
    mm["b"] = rng.standard_normal((n, n)).astype(np.float32)
    vec = 1 << 22
    add = {k: rng.standard_normal(vec).astype(np.float32) for k in ("a", "b")}
    out: dict[str, dict[str, float]] = {}
    for where, on_ep in (("cpu", False), ("ep", True)):
        session, _ = _session(_binary("MatMul", [n, n], [n, n]), on_ep)
        t_mm, _ = _time(session, mm, runs)
        session, _ = _session(_binary("Add", [vec], [vec]), on_ep)
        t_add, _ = _time(session, add, runs)
        out[where] = {
            "flops_per_us": round(2 * n**3 / (1e6 * t_mm), 1),
            "bytes_per_us": round(12 * vec / (1e6 * t_add), 1),
        }
        logger.info("%s: %s", where, out[where])
    return out


def _markdown(rows: list[dict[str, Any]], fitted: dict[str, float], compute: Any) -> str:
    from onnxscript_ep_passes.ep.cost import rates

    shipped = rates()
    lines = [
        "Rates measured here next to the rates `ep/cost.py` ships (`rates()`). The EP is "
        "WebGPU on Mesa lavapipe: a CPU running Vulkan in software, so the EP's compute is "
        "the host CPU's and a Memcpy is a host-memory copy plus a queue submission. These "
        "figures say what a transfer and a CPU island cost on lavapipe; they are not a GPU's "
        "(docs/ep.md, 'Where the rates come from'). The machine is shared with other jobs: "
        "minimum of the runs.",
        "",
        "| rate | measured here | shipped |",
        "|---|---:|---:|",
        f"| fixed cost per Memcpy (us) | {fitted['memcpy_latency_us']} | "
        f"{shipped['memcpy_latency_us']} |",
        f"| link bytes/us | {fitted['link_bytes_per_us']} | {shipped['link_bytes_per_us']} |",
        f"| CPU FLOPs/us (MatMul {MATMUL}) | {compute['cpu']['flops_per_us']} | "
        f"{shipped['cpu_flops_per_us']} |",
        f"| CPU bytes/us (Add) | {compute['cpu']['bytes_per_us']} | "
        f"{shipped['cpu_bytes_per_us']} |",
        f"| EP FLOPs/us (MatMul {MATMUL}) | {compute['ep']['flops_per_us']} | "
        f"{shipped['ep_flops_per_us']} |",
        f"| EP bytes/us (Add) | {compute['ep']['bytes_per_us']} | {shipped['ep_bytes_per_us']} |",
        "",
        f"Transfers: `link` is the least-squares slope of the per-copy time over "
        f"{len(rows)} sizes (R^2 = {fitted['r2']}), `fixed` the smallest size's per-copy "
        "time less its bytes over `link`.",
        "",
        "| floats | Memcpy (mixed / all-EP) | mixed ms | all-EP ms | CPU islands ms | "
        "per copy us |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['elements']} | {r['memcpy_mixed']} / {r['memcpy_all_ep']} | "
            f"{r['mixed_ms'][0]} | {r['all_ep_ms'][0]} | {r['cpu_islands_ms'][0]} | "
            f"{r['per_copy_us']} |"
        )
    ratio_ep = compute["ep"]["flops_per_us"] / max(compute["cpu"]["flops_per_us"], 1e-9)
    lines += [
        "",
        f"EP / CPU MatMul rate here: {ratio_ep:.2f}x (shipped: "
        f"{shipped['ep_flops_per_us'] / shipped['cpu_flops_per_us']:.0f}x).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--write", action="store_true", help="write results_calibration.*")
    parser.add_argument("--out-dir", type=Path, help="write results_calibration.* there")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows, fitted = _transfers(args.runs)
    compute = _compute(args.runs)
    markdown = _markdown(rows, fitted, compute)
    out_dir = args.out_dir or (HERE if args.write else None)
    if out_dir is None:
        logger.info("%s", markdown)
        return 0
    command = "python benchmarks/calibrate_cost.py " + " ".join(argv or sys.argv[1:])
    write_results(
        "calibration",
        "benchmarks/calibrate_cost.py",
        command.strip(),
        markdown,
        {"transfers": rows, "fitted": fitted, "compute": compute, "runs": args.runs},
        title="Cost rates: measured on the EP here (WebGPU on lavapipe) vs shipped",
        out_dir=out_dir,
        env=environment(),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
