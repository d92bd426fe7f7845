"""Graph rewriting: the opset-lowering pass and its adapter registry.

Importing this package (which any import of one of its modules does first) registers
every hand-written adapter, so :data:`DEFAULT_REGISTRY` is complete once it is importable.
"""

from onnxscript_ep_passes.lowering import adapters
from onnxscript_ep_passes.lowering.context import DowngradeContext
from onnxscript_ep_passes.lowering.lower_opset import (
    LoweringResult,
    LowerOpsetPass,
    lower_opset,
    run_lowering,
)
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
    "LoweringResult",
    "adapters",
    "lower_opset",
    "register_downgrade",
    "run_lowering",
]
