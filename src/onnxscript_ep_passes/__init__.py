"""Make ONNX models run wholly on the ONNX Runtime execution provider you pick.

The core is :class:`LowerOpsetPass` / :func:`lower_opset`: lower a model's ai.onnx
opset with per-op down-conversion adapters that keep its meaning exactly, or refuse
with a :class:`DowngradeError` that lists every offending node.
"""

from onnxscript_ep_passes.errors import DowngradeError, InvalidModelError, Refusal
from onnxscript_ep_passes.lowering import (
    DEFAULT_REGISTRY,
    AdapterEntry,
    AdapterRegistry,
    DowngradeContext,
    LowerOpsetPass,
    lower_opset,
    register_downgrade,
)
from onnxscript_ep_passes.lowering.lower_opset import ORT_TRACKING_ISSUE

__all__ = [
    "DEFAULT_REGISTRY",
    "ORT_TRACKING_ISSUE",
    "AdapterEntry",
    "AdapterRegistry",
    "DowngradeContext",
    "DowngradeError",
    "InvalidModelError",
    "LowerOpsetPass",
    "Refusal",
    "lower_opset",
    "register_downgrade",
]

__version__ = "0.1.0"
