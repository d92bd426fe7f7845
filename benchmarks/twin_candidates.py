"""Which consecutive candidates of the EP search are twins, and what proving it would take.

Issue 23 asks whether candidate ``k``'s entry can be derived from ``k+1``'s when the
lowering step between them changed nothing but the opset label. This script measures the
opportunity and the obstacle on one model, without changing the search:

* It runs the search ``lower --ep`` runs (:func:`~onnxscript_ep_passes.passes.lower_for_ep`'s
  ``_search``, plain and legalized candidates) with a timer around each candidate
  (``lower_and_predict``, ``add_legalized``); a twin's lower plain candidate, and its
  legalization, are derived (:mod:`onnxscript_ep_passes.passes.twins`) unless
  ``--fresh`` is given.
* For each consecutive pair it says whether the predictions are *identical*, *equal but
  for the labels* (each record's ``since_version`` and ``reason``; placements, reason
  codes, Memcpy and removed nodes equal) or *different*, and whether the costs are equal.
* For each lowering step it counts what the step's adapters did (``built``, ``replaced``,
  ``rewritten``) and which ops of the working copy resolve to another schema at the lower
  opset (``since_version`` changes).
* For the plain prediction and pricing at each opset, it counts the calls to ONNX's
  per-node inference made on nodes whose schema was introduced at that opset (the ones
  whose schema differs one opset lower): by the kernel phase's type inference, ORT's
  inference at load (``load_shapes``) and the cost's ``infer_missing_shapes``. Their
  answers at the lower opset come from another schema's inference function, so a
  derived entry would have to check each of them.

Usage::

    python benchmarks/twin_candidates.py /tmp/onnx-bench/decoder_5k_15M.onnx
"""

from __future__ import annotations

import argparse
import collections
import itertools
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

logger = logging.getLogger("twin_candidates")


def _signature(prediction: Any, labels: bool) -> tuple[Any, ...]:
    nodes = [
        (
            n.name,
            n.op_type,
            n.domain,
            n.since_version if labels else None,
            n.placement,
            n.reason if labels else None,
            n.reason_code,
            n.is_shape_computation,
            n.inserted_by_ort,
            n.inlined_by_ort,
        )
        for n in prediction.nodes
    ]
    removed = [(r.name, r.op_type, r.rule) for r in prediction.removed]
    return tuple(nodes), prediction.transfers, tuple(removed)


def _compare(a: Any, b: Any) -> str:
    if _signature(a, True) == _signature(b, True):
        return "identical"
    if _signature(a, False) == _signature(b, False):
        return "equal but for the labels"
    return "different"


def _timed(owner: Any, name: str, opset_of: Callable[..., int], seconds: dict[Any, float]) -> None:
    original = getattr(owner, name)

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            seconds[(name, opset_of(*args))] += time.perf_counter() - start

    setattr(owner, name, wrapper)


def run(path: Path, ep: str, ort_version: str, fresh: bool = False) -> dict[str, Any]:
    """The measurements of the module docstring for the model at ``path`` (``fresh``:
    derive no candidate)."""
    import onnx_ir as ir

    from onnxscript_ep_passes.core.onnx_utils import get_schema, walk
    from onnxscript_ep_passes.ep import cost, shapes
    from onnxscript_ep_passes.ep.placement import flatten, load_shapes, predict_placement
    from onnxscript_ep_passes.ep.table_choice import get_table
    from onnxscript_ep_passes.lowering.lower_opset import run_lowering
    from onnxscript_ep_passes.passes import candidates, lower_for_ep

    table = get_table(ep, ort_version)
    seconds: dict[Any, float] = collections.defaultdict(float)
    search_class = candidates.CandidateSearch
    _timed(search_class, "lower_and_predict", lambda work, target, state: target, seconds)
    _timed(search_class, "add_legalized", lambda work, plain, *rest, **kw: plain.opset, seconds)
    steps: dict[int, dict[str, Any]] = {}
    original_lowering = candidates.run_lowering

    def lowering(model: ir.Model, target: int, **kwargs: Any) -> Any:
        result = original_lowering(model, target, **kwargs)
        ops = {n.op_type for g in (model.graph, *model.functions.values()) for n in walk(g)[0]}
        changed = []
        for op in sorted(ops):
            upper, lower = get_schema(op, target + 1, ""), get_schema(op, target, "")
            if (
                upper is not None
                and lower is not None
                and upper.since_version != lower.since_version
            ):
                changed.append(f"{op}-{upper.since_version}->{lower.since_version}")
        steps[target] = {
            "built": len(result.built),
            "replaced": len(result.replaced),
            "rewritten": result.rewritten,
            "since_changes": changed,
        }
        return result

    candidates.run_lowering = lowering  # type: ignore[assignment]
    candidates.REUSE_TWINS = not fresh
    model = ir.load(path)
    start = time.perf_counter()
    choice, _, search = lower_for_ep._search(
        model, table, None, 18, True, candidates.SearchSettings()
    )
    search_s = time.perf_counter() - start
    candidates.run_lowering = original_lowering
    pairs = []
    for kind, found in (("plain", search.plain), ("legalized", search.legalizations)):
        opsets = sorted(found, reverse=True)
        for upper, lower in itertools.pairwise(opsets):
            a, b = found[upper], found[lower]
            pairs.append(
                {
                    "kind": kind,
                    "opsets": [upper, lower],
                    "predictions": _compare(a.prediction, b.prediction),
                    "cost_equal": a.rank.cost == b.rank.cost,
                }
            )

    # ONNX inference on nodes whose schema differs one opset lower, per plain opset.
    inference: dict[int, collections.Counter[str]] = {}
    counts: collections.Counter[str] = collections.Counter()
    infer_types, infer_load = flatten.infer_types, load_shapes.LoadShapes._infer
    infer_cost = shapes._infer_node

    def types(flat: Any, node: Any, schema: Any, opset: int) -> None:
        if schema.since_version == opset and node.domain in ("", "ai.onnx"):
            counts[f"kernels.infer_types {node.op_type}"] += 1
        infer_types(flat, node, schema, opset)

    def load(self: Any, node: Any) -> Any:
        if node.domain == "" and node.since_version == self.scope.opset:
            counts[f"load_shapes {node.op_type}"] += 1
        return infer_load(self, node)

    def priced(node: Any, opsets: Any, known: Any, max_elements: int) -> None:
        opset = opsets.get("")
        schema = get_schema(node.op_type, opset, "") if opset is not None else None
        if schema is not None and schema.since_version == opset and node.domain in ("", "ai.onnx"):
            counts[f"cost.infer_missing_shapes {node.op_type}"] += 1
        infer_cost(node, opsets, known, max_elements)

    flatten.infer_types = types
    load_shapes.LoadShapes._infer = load  # type: ignore[method-assign]
    shapes._infer_node = priced
    try:
        work = ir.load(path)
        source = max(search.plain)
        for opset in sorted(search.plain, reverse=True):
            if opset < source:
                run_lowering(work, opset)
            counts.clear()
            cost.placement_cost(predict_placement(work, table), work)
            inference[opset] = collections.Counter(counts)
    finally:
        flatten.infer_types = infer_types
        load_shapes.LoadShapes._infer = infer_load  # type: ignore[method-assign]
        shapes._infer_node = infer_cost
    return {
        "summary": choice.summary(),
        "search_s": search_s,
        "seconds": {f"{name} {opset}": s for (name, opset), s in sorted(seconds.items())},
        "derived": sorted(search.derived),
        "legalized_derived": sorted(search.legalized_derived),
        "steps": steps,
        "pairs": pairs,
        "changed_schema_inference": {o: dict(c) for o, c in inference.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--ep", default="cuda")
    parser.add_argument("--ort-version", default="1.24")
    parser.add_argument("--fresh", action="store_true", help="derive no candidate")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    found = run(args.model, args.ep, args.ort_version, args.fresh)
    logger.info("%s; search %.2f s", found["summary"], found["search_s"])
    logger.info("derived plain candidates: %s", found["derived"] or "none")
    logger.info("derived legalizations: %s", found["legalized_derived"] or "none")
    for label, s in found["seconds"].items():
        logger.info("  %-22s %.2f s", label, s)
    for target, step in sorted(found["steps"].items(), reverse=True):
        logger.info(
            "step to %d: built %d, replaced %d, rewritten %d; since_version changes: %s",
            target,
            step["built"],
            step["replaced"],
            step["rewritten"],
            ", ".join(step["since_changes"]) or "none",
        )
    for pair in found["pairs"]:
        upper, lower = pair["opsets"]
        logger.info(
            "%s %d -> %d: %s; cost %s",
            pair["kind"],
            upper,
            lower,
            pair["predictions"],
            "equal" if pair["cost_equal"] else "differs",
        )
    for opset, calls in found["changed_schema_inference"].items():
        listed = ", ".join(f"{k}: {v}" for k, v in sorted(calls.items()))
        logger.info("inference on schemas new at %d: %s", opset, listed or "none")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
