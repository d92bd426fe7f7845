"""Graph rewriting: the opset-lowering pass and its adapter registry."""

from onnxscript_ep_passes.lowering.context import DowngradeContext
from onnxscript_ep_passes.lowering.lower_opset import LowerOpsetPass, lower_opset
from onnxscript_ep_passes.lowering.registry import (
    DEFAULT_REGISTRY,
    AdapterEntry,
    AdapterRegistry,
    register_downgrade,
)

__all__ = [
    "DEFAULT_REGISTRY",
    "AdapterEntry",
    "AdapterRegistry",
    "DowngradeContext",
    "LowerOpsetPass",
    "lower_opset",
    "register_downgrade",
]
