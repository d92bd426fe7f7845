"""What the EP pass did about each node that cannot run on the EP, for the chosen candidate.

:mod:`.lower_for_ep` (rule 6) gives each node that falls back at the source opset or at
the chosen one a :class:`~onnxscript_ep_passes.passes.legalize.LegalizationDecision`.
Rules:

1. In this order: a node that runs on the EP at the chosen opset is ``lower``; one the
   chosen legalized candidate decided about keeps that decision; one the lowering to the
   chosen opset replaced (it is gone there) is ``expand``; the rest are ``cpu``, with the
   reason.
2. Decisions of the legalization at the chosen opset are kept for the nodes they cover;
   when the plain candidate was chosen, an ``expand`` there becomes ``cpu`` ("expanding it
   did not make the model better").
3. Nodes are keyed by the model's node each stands for (a node built on a copy stands for
   itself), never by name. Nodes of a function body ORT inlines are not listed: the
   decision about the op's node covers them.
"""

from __future__ import annotations

__all__ = ["choice_decisions"]

import dataclasses

import onnx_ir as ir

from onnxscript_ep_passes.ep.placement import NodePlacement
from onnxscript_ep_passes.passes.candidates import Candidate
from onnxscript_ep_passes.passes.legalize import Decision, LegalizationDecision


def choice_decisions(
    source: Candidate, chosen: Candidate, variant: Candidate | None
) -> tuple[LegalizationDecision, ...]:
    """One decision per node falling back at the source or at the chosen opset.

    Nodes of a function body ORT inlines (an op no EP has a kernel for) are not listed:
    the legalized variant's decision about the op's node covers them. Nodes are keyed by
    the model's node each stands for (a node built on a copy stands for itself).
    """
    by_variant: dict[ir.Node, LegalizationDecision] = {}
    if variant is not None and variant.legalization is not None:
        for d in variant.legalization.decisions:
            if d.ir_node is not None:
                by_variant[variant.model_node(d.ir_node)] = d
    placed_after = {
        chosen.model_node(n.node): n
        for n in chosen.prediction.nodes
        if n.node is not None and not n.inserted_by_ort and not n.inlined_by_ort
    }
    opset = chosen.opset
    out: dict[ir.Node, LegalizationDecision] = {}
    for node in source.prediction.fallback_nodes:
        key = node.node
        if key is None or node.inserted_by_ort or node.inlined_by_ort or key in out:
            continue
        now = placed_after.get(key)
        known = by_variant.get(key)
        if now is not None and now.placement == "ep":
            reason = f"{node.reason}; runs on the EP at opset {opset} ({now.reason})"
            decision = _decision(node, opset, "lower", reason, key)
        elif chosen.legalized and known is not None:
            decision = known
        elif now is None:
            reason = f"{node.reason}; the lowering to opset {opset} expanded it"
            decision = _decision(node, opset, "expand", reason, key)
        else:
            why = known.reason if known is not None and known.decision == "cpu" else now.reason
            decision = _decision(node, opset, "cpu", why, key)
        out[key] = decision
    for key, known in by_variant.items():
        if key in out:
            continue
        if not chosen.legalized and known.decision == "expand":
            now = placed_after.get(key)
            reason = now.reason if now is not None else known.reason
            known = dataclasses.replace(
                known,
                decision="cpu",
                reason=f"{reason}; expanding it did not make the model better",
            )
        out[key] = known
    return tuple(out.values())


def _decision(
    node: NodePlacement, opset: int, decision: Decision, reason: str, key: ir.Node
) -> LegalizationDecision:
    return LegalizationDecision(
        node.name, node.op_type, node.domain, node.since_version, opset, decision, reason, key
    )
