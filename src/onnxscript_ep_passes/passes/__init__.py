"""Passes that join graph rewriting (:mod:`..lowering`) with EP knowledge (:mod:`..ep`)."""

from onnxscript_ep_passes.ep.cost import placement_cost
from onnxscript_ep_passes.passes.legalize import (
    LegalizationDecision,
    LegalizationResult,
    LegalizeForEpPass,
    fold_static_shapes,
    legalize,
)
from onnxscript_ep_passes.passes.lower_for_ep import (
    EpLoweringChoice,
    LowerOpsetForEpPass,
    choose_target_opset,
)

__all__ = [
    "EpLoweringChoice",
    "LegalizationDecision",
    "LegalizationResult",
    "LegalizeForEpPass",
    "LowerOpsetForEpPass",
    "choose_target_opset",
    "fold_static_shapes",
    "legalize",
    "placement_cost",
]
