"""A candidate's plain prediction, and its legalization, derived from the one above it,
when the lowering step between them changed nothing but the opset label (issue 23).

Lowering the working copy one opset at a time, some steps build, replace and rewrite no
node (:class:`~onnxscript_ep_passes.lowering.lower_opset.LoweringResult`): the model is the
one above with a lower ai.onnx import (and ``ir_version``, which no prediction reads), and
each ai.onnx node resolves to the schema in force at the lower opset. The prediction
(:func:`~onnxscript_ep_passes.ep.placement.predict_placement`) and its price
(:func:`~onnxscript_ep_passes.ep.cost.placement_cost`) read the opset only through:

(a) each op's facts (:func:`~onnxscript_ep_passes.ep.placement.flatten.op_facts`): its
    schema, since_version, and whether ORT inlines its schema body;
(b) the kernel decision, per (domain, op, since_version, types) (:mod:`.kernels`), whose
    type bindings read the schema's formals;
(c) common-subexpression elimination: the since_version and the schema's attribute
    defaults (:func:`~onnxscript_ep_passes.ep.placement.common_subexpressions.schema_defaults`);
(d) constant folding: the CPU table's match at the since_version;
(e) the calls to ONNX with the opset and a schema that
    :mod:`~onnxscript_ep_passes.ep.placement.opset_reads` records (type inference,
    ORT's inference at load, the cost's inference of missing shapes) and the reference
    evaluation of folded nodes;
(f) the NHWC layout transformation (the Transposes it inserts are resolved at the opset);
(g) the schema bodies ORT inlines (resolved at the calling graph's opset).

:func:`derive_prediction` derives the prediction below from the one above only when all
of these give the same answer at both opsets but for the labels, and otherwise returns
None (the caller predicts afresh). Rules:

1. (f) is ruled out (the EP has no NHWC domain, no record above is inserted). For (g),
   each op ORT may inline at one opset may at the other, and each recorded attempt to
   build a body (:mod:`.opset_reads`) on a relabelled op builds the same body at the
   lower opset, but for its ai.onnx import, which the calling graph's overrides
   (rule 4): the body's nodes are then placed as the model's are, and their ops are
   checked with the model's.
2. (e): the record of the prediction above is complete (every call had a key) and holds
   no reference evaluation.
3. An op whose facts are the same at both opsets (the same schema version) reads the same
   schema in (a) to (d). Its recorded calls differ only in the opset import given to
   ONNX's per-node inference, which ONNX reads only to infer graph attributes (its
   ``CallNodeInferenceFunction`` gives it to the graph inference context alone), and no
   call hands ONNX a node with one (:func:`.kernels.infer_types` and
   :func:`~onnxscript_ep_passes.ep.shapes.infer_missing_shapes` skip such nodes, the
   load inference's node proto drops them).
4. An op whose schema version changes (a *relabelled* op) needs a schema at both; the
   same schema defaults (c); the CPU table matching at both or at neither (d); when
   some node of the op has a record above, every kernel decision the table keeps for it
   at the version above (:func:`~onnxscript_ep_passes.ep.placement.kernels.decisions_of`,
   a superset of the prediction's) giving the same placement and reason code at the
   version below, with each reason above standing for one reason below (b); and every
   recorded call on it answering the same when made again at the lower opset with its
   schema there (e). A decision is read only by the phases after the basic
   optimizations (which read none) and by the records, on the nodes those optimizations
   leave, each of which has a record: an op without a record above (every ``Identity``
   eliminated) has its nodes removed below too, its decisions read by nothing.
5. The derived prediction is the one above with each record of a relabelled op given the
   version below and its reason below; every other record, the Memcpy nodes and the
   removed nodes are the same. Its price is the one above: pricing reads no version or
   reason, and its calls are checked (rule 4).

:func:`derive_legalization` derives the legalized candidate below (:mod:`.legalize`: the
lowering's built nodes' shape math folded, then a search for fallback nodes to rewrite)
from the legalization above, on the same working copy, put back as it was:

6. The search above tried no node, and the record of the whole legalization above (its
   folding, prediction and price) is complete. The plain prediction below was derived
   (rules 1-5): the step built and replaced nothing, so the same nodes are folded.
7. Folding reads the opset only through its reference evaluations
   (:mod:`.static_shapes`, rule 5). Each recorded one, asked again at the lower opset
   whatever its op's version, answers the same: folding the working copy below would
   make the edits it made above, and the folded model below is the one above relabelled.
8. Its prediction is then derived from the one above under rules 1-5 (when nothing was
   folded: it is the plain prediction below), and its price is the one above.
9. The legalization's search below runs on that prediction
   (:func:`~.legalize.untried_legalization`); when it finds a node to try, nothing is
   derived (the trials need the folded model). Else the derived result is the
   legalization below, and the working copy is not folded: the candidate ties the one
   above (the same price, the same nodes replaced), which the tie goes to, so it is
   never chosen and its model is never built.
"""

from __future__ import annotations

__all__ = ["derive_legalization", "derive_prediction"]

import dataclasses
import logging

import onnx
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import walk
from onnxscript_ep_passes.ep.cost import PlacementCost
from onnxscript_ep_passes.ep.dims import DimSizes
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.live_tables import installed_cpu_table
from onnxscript_ep_passes.ep.placement import PlacementPrediction
from onnxscript_ep_passes.ep.placement.common_subexpressions import schema_defaults
from onnxscript_ep_passes.ep.placement.flatten import op_facts
from onnxscript_ep_passes.ep.placement.graph import FlatNode, FlatValue
from onnxscript_ep_passes.ep.placement.kernels import decide, decisions_of
from onnxscript_ep_passes.ep.placement.opset_reads import OpsetReads
from onnxscript_ep_passes.ep.profiles import traits_for
from onnxscript_ep_passes.passes.legalize import LegalizationResult, untried_legalization

logger = logging.getLogger(__name__)

_Relabel = tuple[int, int, onnx.defs.OpSchema]  # version above, version below, schema below


def derive_prediction(
    above: PlacementPrediction,
    reads: OpsetReads | None,
    work: ir.Model,
    table: KernelTable,
    opset: int,
) -> PlacementPrediction | None:
    """The prediction of ``work`` at ``opset`` on ``table``, derived from ``above`` (the
    prediction of ``work`` at ``opset + 1``, its calls recorded in ``reads``) when the
    lowering step between them changed no node; None when the module docstring's rules do
    not all hold (the caller predicts afresh)."""
    if reads is None or not reads.complete or reads.evaluated:
        return None
    if traits_for(table.ep).nhwc_domain is not None:
        return None
    if any(r.inserted_by_ort for r in above.nodes):
        return None
    relabelled = _relabelled_ops(work, reads, table, opset)
    if relabelled is None:
        return None
    placed = {r.op_type for r in above.nodes if r.domain == ""}
    reasons = _reasons_below({op: e for op, e in relabelled.items() if op in placed}, table)
    if reasons is None or not _calls_agree(reads, relabelled, opset):
        return None
    nodes = []
    for record in above.nodes:
        entry = relabelled.get(record.op_type) if record.domain == "" else None
        if entry is None:
            nodes.append(record)
            continue
        upper, lower, _ = entry
        if record.since_version != upper:
            return None
        reason = record.reason
        if record.reason_code != "shape_computation":
            found = reasons.get((record.op_type, record.reason))
            if found is None:
                return None
            reason = found
        nodes.append(dataclasses.replace(record, since_version=lower, reason=reason))
    logger.debug(
        "opset %d derived from %d: %d ops relabelled (%s)",
        *(opset, opset + 1, len(relabelled), ", ".join(sorted(relabelled))),
    )
    return dataclasses.replace(above, nodes=tuple(nodes))


def derive_legalization(
    above: LegalizationResult,
    reads: OpsetReads | None,
    plain: PlacementPrediction,
    plain_cost: PlacementCost,
    work: ir.Model,
    table: KernelTable,
    sizes: DimSizes,
) -> LegalizationResult | None:
    """The legalization of ``work`` at its opset, derived from ``above`` (its legalization
    one opset up, the whole of it recorded in ``reads``), where ``plain`` (its prediction,
    at ``plain_cost``) was derived from the plain one above; None when the module
    docstring's rules 6-9 do not all hold (the caller legalizes afresh). ``work`` is not
    changed."""
    if above.tried or reads is None or not reads.complete:
        return None
    opset = above.opset - 1
    for (kind, _), call in reads.calls.items():
        if kind == "fold" and call.again(opset, None, 0) != call.result:
            return None  # rule 7
    prediction, cost = plain, plain_cost
    if above.folded:
        derived = derive_prediction(above.after, reads, work, table, opset)
        if derived is None:
            return None
        prediction, cost = derived, above.after_cost
    result = untried_legalization(work, table, above.folded, prediction, cost, sizes)
    if result is not None:
        logger.debug("opset %d legalization derived from %d", opset, opset + 1)
    return result


def _relabelled_ops(
    work: ir.Model, reads: OpsetReads, table: KernelTable, opset: int
) -> dict[str, _Relabel] | None:
    """The ai.onnx ops of ``work`` and of the schema bodies its prediction inlined whose
    schema version differs between ``opset + 1`` and ``opset`` (rule 4's first checks
    done); None when a rule rules the derivation out."""
    ops: set[str] = set()
    for graph in (work.graph, *work.functions.values()):
        ops.update(n.op_type for n in walk(graph)[0] if n.domain in ("", "ai.onnx"))
    for call in reads.calls.values():
        ops.update(call.ops)
    ops.discard("Constant")  # an initializer to placement: its schema is never read
    cpu = installed_cpu_table()
    relabelled: dict[str, _Relabel] = {}
    for op in sorted(ops):
        schema_up, since_up, inline_up = op_facts(table, op, "", opset + 1)
        schema_low, since_low, inline_low = op_facts(table, op, "", opset)
        if inline_up != inline_low:
            return None  # rule 1
        if since_up == since_low and (schema_up is None) == (schema_low is None):
            continue  # the same schema (rule 3)
        if schema_up is None or schema_low is None:
            return None
        if schema_defaults(op, "", since_up) != schema_defaults(op, "", since_low):
            return None
        if cpu is not None and (cpu.match("", op, since_up) is None) != (
            cpu.match("", op, since_low) is None
        ):
            return None
        relabelled[op] = (since_up, since_low, schema_low)
    return relabelled


def _reasons_below(
    relabelled: dict[str, _Relabel], table: KernelTable
) -> dict[tuple[str, str], str] | None:
    """``(op, reason above) -> reason below`` for the relabelled ops' kept decisions
    (rule 4); None when a decision's placement or reason code differs below, or a reason
    above stands for two below."""
    reasons: dict[tuple[str, str], str] = {}
    for key, (on_ep, reason, code) in list(decisions_of(table).items()):
        assert isinstance(key, tuple)  # kernels.cached_decision's key
        domain, op, since, _, in_types, out_types = key
        entry = relabelled.get(op) if domain == "" else None
        if entry is None or since != entry[0]:
            continue
        stand_in = FlatNode(
            "",
            op,
            "",
            entry[1],
            [None if t is None else FlatValue("", "node", t) for t in in_types],
            [None if t is None else FlatValue("", "node", t) for t in out_types],
            "",
        )
        on_ep_below, reason_below, code_below = decide(stand_in, entry[2], table)
        if (on_ep_below, code_below) != (on_ep, code):
            return None
        if reasons.setdefault((op, reason), reason_below) != reason_below:
            return None
    return reasons


def _calls_agree(reads: OpsetReads, relabelled: dict[str, _Relabel], opset: int) -> bool:
    """Every recorded call on a relabelled op answers the same at ``opset`` (rule 4)."""
    for call in reads.calls.values():
        entry = relabelled.get(call.op_type) if call.domain in ("", "ai.onnx") else None
        if entry is None:
            continue
        _, since, schema = entry
        if call.again(opset, schema, since) != call.result:
            return False
    return True
