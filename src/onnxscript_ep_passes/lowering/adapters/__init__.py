"""Hand-written down-conversion adapters, one module per opset step.

``opsetNN`` undoes what ai.onnx opset NN changed, stepping each node down to the schema
in force just below it. Type-only changes are not written here: the registry derives
them from ``onnx.defs``.
"""

from onnxscript_ep_passes.lowering.adapters import (
    opset19,
    opset20,
    opset21,
    opset22,
    opset23,
    opset24,
    opset25,
    opset26,
    opset27,
    opset28,
)

__all__ = [
    "opset19",
    "opset20",
    "opset21",
    "opset22",
    "opset23",
    "opset24",
    "opset25",
    "opset26",
    "opset27",
    "opset28",
]
