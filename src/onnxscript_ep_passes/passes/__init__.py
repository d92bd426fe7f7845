"""Passes that join graph rewriting (:mod:`..lowering`) with EP knowledge (:mod:`..ep`)."""

from onnxscript_ep_passes.passes.lower_for_ep import (
    EpLoweringChoice,
    LowerOpsetForEpPass,
    choose_target_opset,
)

__all__ = ["EpLoweringChoice", "LowerOpsetForEpPass", "choose_target_opset"]
