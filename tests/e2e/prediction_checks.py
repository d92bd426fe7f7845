"""The comparisons of a placement prediction with ORT's, shared by the prediction tests.

- :func:`assert_same_memcpy`: ORT's Memcpy nodes, in number and direction.
- :func:`assert_removed_as_ort`: the nodes the prediction says ORT removes before placing
  are the model's nodes missing from ORT's placement record (``exact``: all of them, op
  type by op type and by name; otherwise each predicted removal is ORT's, by op type).
"""

from __future__ import annotations

__all__ = ["assert_removed_as_ort", "assert_same_memcpy"]

import collections
from collections.abc import Collection

import onnx

from onnxscript_ep_passes.ep import KernelTable, measure_placement, predict_placement
from onnxscript_ep_passes.ep.placement import PlacementPrediction


def assert_same_memcpy(pred: PlacementPrediction, from_host: int, to_host: int) -> None:
    """ORT's Memcpy nodes, in number and direction."""
    assert (pred.memcpy_from_host, pred.memcpy_to_host) == (from_host, to_host), [
        (t.value, t.direction) for t in pred.transfers
    ]


def assert_removed_as_ort(
    proto: onnx.ModelProto,
    table: KernelTable,
    pred: PlacementPrediction,
    level: object,
    *,
    exact: bool,
    unmodelled: Collection[str] = (),
) -> None:
    """The predicted removals are the nodes missing from ORT's placement record, op
    type by op type and by name. Not ``exact``: every predicted removal is ORT's, by
    op type (ORT may remove more: see basic_optimizations' rules for what is not modelled,
    and a node it removes instead can change which duplicates are equal). ``unmodelled``:
    the op types of the nodes ORT's fusions that the prediction does not model remove
    (basic_optimizations' rules: Conv+BatchNormalization, MatMul+Add into Gemm, the
    transpose optimizer's pushes); exactly the predicted removals are missing from ORT's
    record, by name, besides nodes of those types."""
    as_written = predict_placement(proto, table, optimization_level=0)
    measured = measure_placement(proto, "webgpu", graph_optimization_level=level)
    placed = collections.Counter(n.source_name for n in measured.nodes)
    fused = collections.Counter(  # a chain of reshapes ORT makes one Reshape of
        n.node.name for n in pred.nodes if n.node is not None and n.name.endswith("_new_reshape")
    )
    missing: collections.Counter[str] = collections.Counter()
    for record in as_written.nodes:
        if record.inserted_by_ort:
            continue
        if placed[record.name] > 0:
            placed[record.name] -= 1
        elif fused[record.name] > 0:
            fused[record.name] -= 1
        else:
            missing[record.op_type] += 1
    removed = collections.Counter(r.op_type for r in pred.removed)
    assert not removed - missing, (pred.removed_by_rule(), removed - missing)
    if exact:
        extra = missing - removed
        assert all(op in unmodelled for op in extra), (pred.removed_by_rule(), extra)
        # By name too: ORT keeps the first of equal nodes in its topological order.
        gone = collections.Counter(n.name for n in as_written.nodes if not n.inserted_by_ort)
        gone -= collections.Counter(n.source_name for n in measured.nodes)
        named = collections.Counter(r.name for r in pred.removed)
        assert not named - gone, named - gone
        op_of = {n.name: n.op_type for n in as_written.nodes}
        assert all(op_of[name] in unmodelled for name in gone - named), gone - named
