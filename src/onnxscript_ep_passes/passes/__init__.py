"""Passes that join graph rewriting (:mod:`..lowering`) with EP knowledge (:mod:`..ep`).

- :mod:`.lower_for_ep` -- choose the opset (and legalized candidate) best for an EP;
- :mod:`.options` -- what the search is asked (:class:`SearchOptions`);
- :mod:`.legalize` -- expand, at the model's opset, the nodes an EP cannot run;
- :mod:`.static_shapes` -- fold the static shape arithmetic of the nodes a rewrite built.
"""

from onnxscript_ep_passes.ep.cost import placement_cost
from onnxscript_ep_passes.passes.legalize import (
    LegalizationDecision,
    LegalizationResult,
    LegalizeForEpPass,
    LegalizeForEpResult,
    legalize,
)
from onnxscript_ep_passes.passes.lower_for_ep import (
    CandidateEntry,
    CandidateKey,
    EpLoweringChoice,
    EpLoweringResult,
    LowerOpsetForEpPass,
    choose_target_opset,
)
from onnxscript_ep_passes.passes.options import SearchOptions
from onnxscript_ep_passes.passes.static_shapes import fold_static_shapes

__all__ = [
    "CandidateEntry",
    "CandidateKey",
    "EpLoweringChoice",
    "EpLoweringResult",
    "LegalizationDecision",
    "LegalizationResult",
    "LegalizeForEpPass",
    "LegalizeForEpResult",
    "LowerOpsetForEpPass",
    "SearchOptions",
    "choose_target_opset",
    "fold_static_shapes",
    "legalize",
    "placement_cost",
]
