"""Gelu forms -> ORT's FastGelu / BiasGelu, only where the fused op is the same function.

- :func:`fuse_fast_gelu`: the tanh approximation written out,
  ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`` (GPT-2's ``gelu_new``,
  torch's ``gelu(approximate="tanh")`` decomposed), in either association of the outer
  product -> com.microsoft ``FastGelu``, which computes exactly that approximation. Each
  constant is checked by value (relative 1e-6); another constant is a different function
  and is left alone.
- :func:`fuse_bias_gelu`: onnxscript's ``fuse_bias_gelu`` (``Add(x, bias)`` + the exact,
  erf ``Gelu`` -> com.microsoft ``BiasGelu``; its rule refuses the tanh ``Gelu``).

Each returns the number of nodes it created and changes the model in place.
"""

from __future__ import annotations

__all__ = ["fuse_bias_gelu", "fuse_fast_gelu"]

import math
from typing import Any

import onnx_ir as ir
from onnxscript.rewriter import pattern
from onnxscript.rewriter.ort_fusions.bias_gelu import fuse_bias_gelu as _onnxscript_bias_gelu
from onnxscript.rewriter.pattern import MatchResult

_CONSTANTS = {
    "cube": 3.0,
    "coefficient": 0.044715,
    "scale": math.sqrt(2.0 / math.pi),
    "one": 1.0,
    "half": 0.5,
}


class TanhGeluToFastGelu(pattern.RewriteRuleClassBase):
    """``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`` -> ``FastGelu(x)``.

    ``half_first``: the product is ``(x * 0.5) * gate`` (GPT-2), else ``x * (0.5 * gate)``.
    """

    def __init__(self, name: str, *, half_first: bool) -> None:
        super().__init__(name)
        self._half_first = half_first

    def pattern(
        self, op: Any, x: Any, cube: Any, coefficient: Any, scale: Any, one: Any, half: Any
    ) -> Any:
        inner = op.Mul(op.Add(x, op.Mul(op.Pow(x, cube), coefficient)), scale)
        gate = op.Add(op.Tanh(inner), one)
        if self._half_first:
            return op.Mul(op.Mul(x, half), gate)
        return op.Mul(x, op.Mul(half, gate))

    def check(self, op: Any, *args: Any, **kwargs: Any) -> MatchResult:
        result = MatchResult()
        x: ir.Value = kwargs["x"]
        for name, expected in _CONSTANTS.items():
            tensor = ir.convenience.get_const_tensor(kwargs[name])
            if tensor is None or tensor.size != 1:
                return result.fail(f"the {name} constant is not a scalar constant")
            value = float(tensor.numpy().reshape(-1)[0])
            if not math.isclose(value, expected, rel_tol=1e-6):
                return result.fail(f"the {name} constant is {value}, not {expected}")
        if x.dtype is None or not x.dtype.is_floating_point():
            return result.fail("x is not a float tensor")
        return result

    def rewrite(self, op: Any, x: Any, **_: Any) -> Any:
        return op.FastGelu(x, _domain="com.microsoft")


_FAST_GELU_RULES = pattern.RewriteRuleSet(
    [
        TanhGeluToFastGelu.rule("tanh_gelu_half_first", half_first=True),
        TanhGeluToFastGelu.rule("tanh_gelu_half_last", half_first=False),
    ],
    commute=True,
)


def fuse_fast_gelu(model: ir.Model) -> int:
    """The written-out tanh Gelu -> com.microsoft FastGelu (see module doc)."""
    return int(_FAST_GELU_RULES.apply_to_model(model))


def fuse_bias_gelu(model: ir.Model) -> int:
    """onnxscript's bias + exact Gelu fusion (to com.microsoft BiasGelu)."""
    return int(_onnxscript_bias_gelu(model))
