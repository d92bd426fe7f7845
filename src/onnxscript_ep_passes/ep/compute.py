"""How much work one node does and how many bytes one value holds, from the model's shapes.

The EP objective (:mod:`~onnxscript_ep_passes.ep.cost`) weighs each Memcpy by the bytes
it moves and each node by the work it does where it runs. Both come from the shapes the
model declares, with symbolic dimensions sized by
:class:`~onnxscript_ep_passes.ep.dims.DimSizes`. Rules:

1. **Bytes of a value**: elements x the element type's size in bits / 8 (rounded up).
   Shapes and types are the model's, else those inferred by
   :func:`~onnxscript_ep_passes.ep.shapes.infer_missing_shapes`. A value of unknown type
   counts 4 bytes per element; one of unknown shape :data:`UNKNOWN_ELEMENTS` elements
   (an activation-sized guess). Every ONNX element type has a size: a string element
   counts :data:`STRING_ELEMENT_BYTES` (what ORT holds per element, a ``std::string``;
   its characters are not counted), ``UNDEFINED`` counts 4 bytes like an unknown type.
2. **FLOPs of a node** (multiply-adds count 2):
   - ``MatMul``/``MatMulInteger``/``Gemm``: 2 x output elements x the reduced dimension.
   - ``Conv``/``ConvTranspose``/``ConvInteger``: 2 x output elements x (input channels /
     group) x kernel size (for ``ConvTranspose``, input elements x output channels x
     kernel size).
   - ``Attention`` (ai.onnx and ORT's ``MultiHeadAttention``/``GroupQueryAttention``):
     2 x query elements x key length (scores) + 2 x output elements x key length
     (weighted sum) + 5 x scores (softmax, mask); the key length is the key's
     second-to-last dimension (4-D) or its sequence dimension (3-D).
   - ``LSTM``/``GRU``/``RNN``: 2 x sequence x batch x gates x hidden x (input + hidden).
   - Everything else: one operation per output element (element-wise, data movement),
     or per input element for reductions, ``Softmax`` and normalizations (x5).
3. **Bytes a node touches**: its inputs' and outputs' bytes (weights included).
"""

from __future__ import annotations

__all__ = ["STRING_ELEMENT_BYTES", "UNKNOWN_ELEMENTS", "NodeWork", "ValueSizes", "element_bits"]

import dataclasses
import math
from collections.abc import Mapping

import onnx_ir as ir

from onnxscript_ep_passes.ep.dims import DEFAULT_SEQUENCE, DimSizes

UNKNOWN_ELEMENTS = DEFAULT_SEQUENCE * 64
"""Elements assumed for a value of unknown shape."""
STRING_ELEMENT_BYTES = 32
"""Bytes counted per element of a string tensor (ORT's ``std::string``)."""
_NO_BITWIDTH = {ir.DataType.STRING: 8 * STRING_ELEMENT_BYTES, ir.DataType.UNDEFINED: 32}


def element_bits(dtype: ir.DataType | None) -> int:
    """Bits per element of ``dtype`` (rule 1): 32 for an unknown or undefined type."""
    if dtype is None:
        return 32
    bits = _NO_BITWIDTH.get(dtype)
    return dtype.bitwidth if bits is None else bits


_MATMUL = frozenset({"MatMul", "MatMulInteger", "Gemm", "QLinearMatMul", "FusedMatMul"})
_CONV = frozenset({"Conv", "ConvInteger", "QLinearConv", "FusedConv"})
_ATTENTION = frozenset({"Attention", "MultiHeadAttention", "GroupQueryAttention"})
_RECURRENT = {"LSTM": 4, "GRU": 3, "RNN": 1}
_PER_INPUT = frozenset(
    {
        "ReduceMean",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceSumSquare",
        "ArgMax",
        "ArgMin",
        "Softmax",
        "LogSoftmax",
        "LayerNormalization",
        "RMSNormalization",
        "SimplifiedLayerNormalization",
        "SkipLayerNormalization",
        "SkipSimplifiedLayerNormalization",
        "GroupNormalization",
        "InstanceNormalization",
        "BatchNormalization",
    }
)


@dataclasses.dataclass(frozen=True)
class NodeWork:
    """Estimated work of one node: floating-point (or integer) operations and bytes."""

    flops: float
    bytes: float


@dataclasses.dataclass(frozen=True)
class ValueSizes:
    """Elements and bytes of values, and the work of nodes (module docstring).

    Attributes:
        dims: Sizes of symbolic dimensions.
        inferred: Types and shapes for values the model leaves without one.
    """

    dims: DimSizes = dataclasses.field(default_factory=DimSizes)
    inferred: Mapping[ir.Value, tuple[ir.DataType | None, ir.Shape | None]] = dataclasses.field(
        default_factory=dict
    )
    # (elements, bytes) of the values sized so far (a value is read by its producer and
    # each consumer), and elements of the shapes met so far, by their dimensions.
    _sized: dict[ir.Value, tuple[int, int]] = dataclasses.field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )
    _shape_elements: dict[tuple[object, ...], int] = dataclasses.field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def shape(self, value: ir.Value) -> ir.Shape | None:
        if value.shape is not None:
            return value.shape
        return self.inferred.get(value, (None, None))[1]

    def dtype(self, value: ir.Value) -> ir.DataType | None:
        if value.dtype is not None:
            return value.dtype
        return self.inferred.get(value, (None, None))[0]

    def elements(self, value: ir.Value | None) -> int:
        """Elements of ``value`` (rule 1); 0 for a missing optional input."""
        if value is None:
            return 0
        return self._size(value)[0]

    def bytes(self, value: ir.Value | None) -> int:
        """Bytes of ``value`` (rule 1)."""
        if value is None:
            return 0
        return self._size(value)[1]

    def _size(self, value: ir.Value) -> tuple[int, int]:
        known = self._sized.get(value)
        if known is None:
            shape, dtype = value.shape, value.dtype
            if shape is None or dtype is None:  # :meth:`shape` and :meth:`dtype`, inlined
                inferred = self.inferred.get(value)
                if inferred is not None:
                    dtype = inferred[0] if dtype is None else dtype
                    shape = inferred[1] if shape is None else shape
            if shape is None:
                const = value.const_value
                elements = int(const.size) if const is not None else UNKNOWN_ELEMENTS
            else:
                dims = shape.dims
                counted = self._shape_elements.get(dims)
                if counted is None:
                    counted = self._shape_elements[dims] = self.dims.elements(dims)
                elements = counted
            bits = element_bits(dtype)
            known = self._sized[value] = (elements, (elements * bits + 7) // 8)
        return known

    def _sizes(self, value: ir.Value | None) -> list[int] | None:
        shape = None if value is None else self.shape(value)
        if shape is None:
            return None
        return [max(1, self.dims.size(d)) for d in shape]

    def node_work(self, node: ir.Node) -> NodeWork:
        """Estimated FLOPs and bytes touched by ``node`` (rules 2-3)."""
        return NodeWork(*self.work(node))

    def work(self, node: ir.Node) -> tuple[float, float]:
        """:meth:`node_work` as a plain ``(flops, bytes)`` pair (the pricing loop's)."""
        sized, size = self._sized, self._size
        touched = 0
        for v in node.inputs:
            if v is not None:
                known = sized.get(v)
                touched += (known if known is not None else size(v))[1]
        elements = 0
        for v in node.outputs:
            known = sized.get(v)
            if known is None:
                known = size(v)
            elements += known[0]
            touched += known[1]
        if node.op_type in _SPECIAL:
            return self._flops(node), float(touched)
        return float(elements), float(touched)  # one operation per output element

    def _flops(self, node: ir.Node) -> float:
        op = node.op_type
        inputs = list(node.inputs)
        first = inputs[0] if inputs else None
        second = inputs[1] if len(inputs) > 1 else None
        out_elements = self.elements(node.outputs[0]) if node.outputs else 0
        if op in _MATMUL:
            a = self._sizes(first)
            if op == "Gemm" and a is not None and len(a) == 2:
                k = a[0] if node.attributes.get_int("transA", 0) else a[1]
            else:
                k = a[-1] if a else DEFAULT_SEQUENCE
            return 2.0 * out_elements * k
        if op in _CONV:
            w = self._sizes(second)
            per_output = w[1] * math.prod(w[2:]) if w and len(w) >= 2 else DEFAULT_SEQUENCE
            return 2.0 * out_elements * per_output
        if op == "ConvTranspose":
            w = self._sizes(second)
            per_input = w[1] * math.prod(w[2:]) if w and len(w) >= 2 else DEFAULT_SEQUENCE
            return 2.0 * self.elements(first) * per_input
        if op in _ATTENTION:
            key = self._sizes(second)
            if key is not None and len(key) == 4:
                key_length = key[-2]
            elif key is not None and len(key) >= 2:
                key_length = key[1]
            else:
                key_length = DEFAULT_SEQUENCE
            query = self.elements(first)
            q = self._sizes(first)
            head = q[-1] if q and len(q) == 4 else 64
            scores = query / max(1, head) * key_length
            return 2.0 * query * key_length + 2.0 * out_elements * key_length + 5.0 * scores
        if op in _RECURRENT:
            x = self._sizes(first)
            hidden = node.attributes.get_int("hidden_size", 0) or DEFAULT_SEQUENCE
            if x is None or len(x) != 3:
                return 2.0 * out_elements * hidden
            seq, batch, width = x
            directions = 2 if node.attributes.get_string("direction", "") == "bidirectional" else 1
            return 2.0 * directions * seq * batch * _RECURRENT[op] * hidden * (width + hidden)
        if op in _PER_INPUT:
            return 5.0 * self.elements(first)
        return float(sum(self.elements(o) for o in node.outputs))


# The ops whose FLOPs are not one per output element (rule 2).
_SPECIAL = frozenset({*_MATMUL, *_CONV, "ConvTranspose", *_ATTENTION, *_RECURRENT, *_PER_INPUT})
