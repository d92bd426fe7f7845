"""Predict ORT's placement of a model on an EP: the phases run in ORT's order.

1. Graph loading (:mod:`.flatten`), deciding each node's kernel (:mod:`.kernels`);
   then, at ORT's basic level and above (its default is ``ENABLE_ALL``), the optimizations
   ORT runs before partitioning (:mod:`.basic_optimizations`);
2. ORT's CPU preference for shape computations (:mod:`.cpu_preference`), for EPs whose
   traits say so;
3. the NHWC layout transformation (:mod:`.layout`), for EPs with an NHWC domain;
4. the Memcpy estimate (:mod:`.memcpy`).

Placement is predicted for the graph ORT partitions at the session's optimization level:
by default ORT's default level (what a user's session does); ``DISABLE_ALL`` predicts the
graph as written (:func:`~onnxscript_ep_passes.ep.sessions.measure_placement`'s default).
The fusions of the higher levels run after partitioning, on placed nodes.
"""

from __future__ import annotations

__all__ = ["predict_placement"]

import dataclasses
import logging
from typing import Any

import onnx
import onnx_ir as ir

from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.names import normalize_domain
from onnxscript_ep_passes.ep.placement.basic_optimizations import apply_basic_optimizations
from onnxscript_ep_passes.ep.placement.cpu_preference import apply_cpu_preference
from onnxscript_ep_passes.ep.placement.flatten import Flattener
from onnxscript_ep_passes.ep.placement.graph import FlatNode, FlatScope
from onnxscript_ep_passes.ep.placement.layout import apply_layout_transform
from onnxscript_ep_passes.ep.placement.memcpy import transfers
from onnxscript_ep_passes.ep.placement.results import (
    NodePlacement,
    OptimizationLevel,
    PlacementPrediction,
    RemovedNode,
    Transfer,
)
from onnxscript_ep_passes.ep.profiles import traits_for
from onnxscript_ep_passes.ep.traits import EpTraits

logger = logging.getLogger(__name__)


def predict_placement(
    model: ir.Model | onnx.ModelProto,
    table: KernelTable,
    *,
    traits: EpTraits | None = None,
    layout_transform: bool = True,
    optimization_level: OptimizationLevel | Any = OptimizationLevel.ENABLE_ALL,
) -> PlacementPrediction:
    """Predict ORT's placement of every node of ``model`` on ``table``'s EP.

    Args:
        model: The model (``onnx_ir.Model`` or ``onnx.ModelProto``); it is not modified.
        table: The EP's kernel table (:func:`~onnxscript_ep_passes.ep.target.resolve_target`).
        traits: The EP's memory facts; default :func:`~onnxscript_ep_passes.ep.profiles.traits_for`
            ``(table.ep)``.
        layout_transform: Model the Transposes of ORT's NHWC layout transformation for
            EPs that prefer NHWC (see the module docstring).
        optimization_level: The session's graph optimization level (an
            :class:`~onnxscript_ep_passes.ep.placement.OptimizationLevel`, an
            ``onnxruntime.GraphOptimizationLevel`` or its number); default ORT's default.

    Returns:
        Per-node placements, fallback and shape-computation lists, the Memcpy estimate,
        and the nodes ORT's basic optimizations remove before placing.

    Raises:
        ValueError: ``optimization_level`` is not one of ORT's levels.
    """
    level = OptimizationLevel.of(optimization_level)
    ir_model = model if isinstance(model, ir.Model) else ir.serde.deserialize_model(model)
    traits = traits if traits is not None else traits_for(table.ep)
    flat = Flattener(ir_model, table)
    opsets = {normalize_domain(k): v for k, v in ir_model.opset_imports.items()}
    flat.build_graph(ir_model.graph, opsets, "graph 'main'", None)
    removed: list[RemovedNode] = []
    if level.folds:
        for scope in flat.scopes:
            removed.extend(apply_basic_optimizations(scope))
    order = list(flat.order)
    if removed:
        kept = {n for scope in flat.scopes for n in scope.nodes}
        order = [n for n in order if n in kept]
    found: list[Transfer] = []
    for scope in flat.scopes:
        if traits.prefers_cpu_for_shape_nodes:
            apply_cpu_preference(scope, traits)
        if layout_transform:
            order.extend(apply_layout_transform(scope, table, traits))
        found.extend(transfers(scope, traits))
    records = _records(order)
    prediction = PlacementPrediction(
        ep=table.ep,
        table_source=table.source,
        ort_version=table.ort_version,
        nodes=records,
        transfers=tuple(found),
        optimization_level=level,
        removed=tuple(removed),
    )
    _release(flat.scopes)
    logger.debug("%s", prediction)
    return prediction


# How a frozen dataclass's own __init__ sets each field of a record: its slot's descriptor.
_STORE = {f.name: getattr(NodePlacement, f.name).__set__ for f in dataclasses.fields(NodePlacement)}


def _records(order: list[FlatNode]) -> tuple[NodePlacement, ...]:
    """One record per flat node, built without the frozen ``__init__``'s checks and
    defaults: every field is stored through its slot, one call each (a prediction makes a
    record per node; tests/ep/test_memo.py rebuilds each with ``__init__``). The class has
    slots: with an instance dict a record took 528 bytes, 2 GB of a search's predictions
    on a 40k-node decoder; now about a third."""
    store = _STORE
    name, op_type, domain, since = (
        store["name"],
        store["op_type"],
        store["domain"],
        store["since_version"],
    )
    placement, reason, shape, code = (
        store["placement"],
        store["reason"],
        store["is_shape_computation"],
        store["reason_code"],
    )
    scope, inserted, nhwc = store["scope"], store["inserted_by_ort"], store["nhwc"]
    node, function, inlined = store["node"], store["function"], store["inlined_by_ort"]
    new, cls = object.__new__, NodePlacement
    records = []
    for n in order:
        record = new(cls)
        name(record, n.name)
        op_type(record, n.op_type)
        domain(record, n.domain)
        since(record, n.since_version)
        placement(record, "ep" if n.on_ep else "cpu")
        reason(record, n.reason)
        shape(record, n.shape_computation)
        code(record, n.reason_code)
        scope(record, n.scope)
        inserted(record, n.inserted)
        nhwc(record, n.nhwc)
        node(record, n.node)
        function(record, n.function)
        inlined(record, n.inlined_by_ort)
        records.append(record)
    return tuple(records)


def _release(scopes: list[FlatScope]) -> None:
    """Break the flat graph's cycles (a value's producer and consumers point back at the
    nodes that point at it), so it is freed as soon as it is dropped, not by a scan of the
    whole heap (:mod:`~onnxscript_ep_passes.core.collector`)."""
    for scope in scopes:
        for value in scope.values:
            value.producer = None
            value.consumers.clear()
