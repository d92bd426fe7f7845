"""Make ONNX models run wholly on the ONNX Runtime execution provider you pick.

The core is :class:`LowerOpsetPass` / :func:`lower_opset`: lower a model's ai.onnx
opset with per-op down-conversion adapters that keep its meaning exactly, or refuse
with a :class:`DowngradeError` that lists every offending node.

The names below are imported on first use (PEP 562), so that importing the package (as
the command line does first) costs nothing until a name is needed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onnxscript_ep_passes.ep.target import EpTarget, resolve_target
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
    from onnxscript_ep_passes.passes.options import SearchOptions

__all__ = [
    "DEFAULT_REGISTRY",
    "ORT_TRACKING_ISSUE",
    "AdapterEntry",
    "AdapterRegistry",
    "DowngradeContext",
    "DowngradeError",
    "EpTarget",
    "InvalidModelError",
    "LowerOpsetPass",
    "Refusal",
    "SearchOptions",
    "lower_opset",
    "register_downgrade",
    "resolve_target",
]

__version__ = "0.1.0"

_HOMES = {
    "DowngradeError": "onnxscript_ep_passes.errors",
    "InvalidModelError": "onnxscript_ep_passes.errors",
    "Refusal": "onnxscript_ep_passes.errors",
    "ORT_TRACKING_ISSUE": "onnxscript_ep_passes.lowering.lower_opset",
    "EpTarget": "onnxscript_ep_passes.ep.target",
    "resolve_target": "onnxscript_ep_passes.ep.target",
    "SearchOptions": "onnxscript_ep_passes.passes.options",
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(_HOMES.get(name, "onnxscript_ep_passes.lowering"))
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
