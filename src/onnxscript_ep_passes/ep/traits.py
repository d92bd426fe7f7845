"""What an EP does besides registering kernels: which tensors it keeps in CPU memory, and
whether ORT moves small shape computations off it.

The facts are data, one :class:`EpTraits` per EP, each entry with its evidence:

- **CPU-input slots** -- inputs an EP kernel declares ``InputMemoryType(OrtMemTypeCPU...)``
  (shape, axes, starts/ends, K, pads, scales/sizes ...). A CPU-resident value feeding such a
  slot needs no MemcpyFromHost; a device value feeding it needs a MemcpyToHost.
- **CPU-output slots** -- outputs declared ``OutputMemoryType(OrtMemTypeCPU...)``
  (``Shape``, ``Size``): produced on the EP, but in CPU memory.
- **CPU preference for shape nodes** -- an EP whose ``GetCapability`` calls ORT's
  ``GetCpuPreferredNodes`` (``fallback_cpu_capability.cc``) gives up nodes that consume only
  CPU-resident values (outputs of CPU-output slots, small initializers <= 100 elements,
  graph inputs) unless a float16/bfloat16/float8 input is involved, so shape arithmetic
  (``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``) runs on CPU. That is a choice, not
  a fallback.

Slots are listed per ``(domain, op)`` for every version of the op that has the input; an
index beyond a node's inputs is simply never used. Evidence:

- WebGPU plugin 0.4.0 on ORT 1.32.0: *measured* on lavapipe -- each slot fed by a CPU node
  and the optimized model checked for a MemcpyFromHost on that slot (and Shape's output and
  If's condition checked the other way). The plugin does **not** apply the CPU preference:
  ``Gather(data, Shape(x))`` with a graph-input or small-initializer ``data`` stays on WebGPU
  (measured), unlike the in-tree WebGPU EP, whose ``GetCapability`` calls
  ``GetCpuPreferredNodes``.
- CUDA: ORT source, ``onnxruntime/core/providers/cuda/**`` kernel registrations (read: Pad
  1-2, Resize 1-3, OneHot 1-2, Trilu 1, Clip 1-2, CumSum 1; the others follow the same
  pattern in the CUDA tensor/reduction/generator kernels), and CUDA's ``GetCapability`` calls
  ``GetCpuPreferredNodes``. Not measured here (no GPU).
- DirectML: not verifiable here; the CUDA slot list is used as an approximation (DML keeps
  the same "constant CPU inputs" for the shape ops) and no CPU preference is assumed.
"""

from __future__ import annotations

__all__ = [
    "CUDA_TRAITS",
    "DML_TRAITS",
    "WEBGPU_TRAITS",
    "EpTraits",
    "traits_for",
]

import dataclasses
from collections.abc import Iterable, Mapping

from onnxscript_ep_passes.ep.names import canonical_ep_name, normalize_domain

_REDUCE_OPS = (
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "ReduceSumSquare",
)


def _slots(entries: Iterable[tuple[str, Iterable[int]]]) -> dict[tuple[str, str], frozenset[int]]:
    out: dict[tuple[str, str], frozenset[int]] = {}
    for op, idx in entries:
        domain, _, name = op.rpartition("::")
        out[(normalize_domain(domain), name)] = frozenset(idx)
    return out


@dataclasses.dataclass(frozen=True)
class EpTraits:
    """Memory placement facts of one EP (see the module docstring for the evidence).

    Attributes:
        ep: ORT's provider name.
        cpu_inputs: ``(domain, op) -> input indices`` the EP's kernels read from CPU memory.
        cpu_outputs: ``(domain, op) -> output indices`` the EP's kernels write to CPU memory.
        prefers_cpu_for_shape_nodes: whether the EP applies ORT's ``GetCpuPreferredNodes``.
        nhwc_domain: the internal domain of the EP's NHWC kernels; ops that have a kernel
            there are converted to NHWC by ORT's layout transformation, which wraps them in
            Transpose nodes at the model's opset. None when the EP keeps NCHW.
        evidence: where the facts come from.
    """

    ep: str
    cpu_inputs: Mapping[tuple[str, str], frozenset[int]] = dataclasses.field(hash=False)
    cpu_outputs: Mapping[tuple[str, str], frozenset[int]] = dataclasses.field(hash=False)
    prefers_cpu_for_shape_nodes: bool = False
    nhwc_domain: str | None = None
    evidence: str = ""

    def input_on_cpu(self, domain: str, op: str, index: int) -> bool:
        return index in self.cpu_inputs.get((normalize_domain(domain), op), frozenset())

    def output_on_cpu(self, domain: str, op: str, index: int) -> bool:
        return index in self.cpu_outputs.get((normalize_domain(domain), op), frozenset())


# Slots measured on the WebGPU plugin 0.4.0 (ORT 1.32.0, lavapipe).
_WEBGPU_CPU_INPUTS = _slots(
    [
        ("Reshape", [1]),
        ("Expand", [1]),
        ("Slice", [1, 2, 3, 4]),
        ("Tile", [1]),
        ("Pad", [1, 2, 3]),
        ("Squeeze", [1]),
        ("Unsqueeze", [1]),
        ("TopK", [1]),
        ("Range", [0, 1, 2]),
        ("Split", [1]),
        ("Resize", [1, 2, 3]),
        ("Clip", [1, 2]),
        ("CumSum", [1]),
        ("Trilu", [1]),
        ("If", [0]),
        *((op, [1]) for op in _REDUCE_OPS),
    ]
)
_WEBGPU_CPU_OUTPUTS = _slots([("Shape", [0])])

# CUDA kernel registrations (ORT source).
_CUDA_CPU_INPUTS = _slots(
    [
        ("Reshape", [1]),
        ("Expand", [1]),
        ("Slice", [1, 2, 3, 4]),
        ("Tile", [1]),
        ("Pad", [1, 2]),
        ("Squeeze", [1]),
        ("Unsqueeze", [1]),
        ("TopK", [1]),
        ("Range", [0, 1, 2]),
        ("Split", [1]),
        ("Resize", [1, 2, 3]),
        ("Upsample", [1]),
        ("Clip", [1, 2]),
        ("CumSum", [1]),
        ("Trilu", [1]),
        ("ConstantOfShape", [0]),
        ("OneHot", [1, 2]),
        ("Dropout", [1, 2]),
        ("NonMaxSuppression", [2, 3, 4]),
        ("If", [0]),
        ("Loop", [0, 1]),
        *((op, [1]) for op in _REDUCE_OPS),
    ]
)
_CUDA_CPU_OUTPUTS = _slots([("Shape", [0]), ("Size", [0])])

WEBGPU_TRAITS = EpTraits(
    ep="WebGpuExecutionProvider",
    cpu_inputs=_WEBGPU_CPU_INPUTS,
    cpu_outputs=_WEBGPU_CPU_OUTPUTS,
    prefers_cpu_for_shape_nodes=False,
    nhwc_domain="com.ms.internal.nhwc",
    evidence="measured: onnxruntime-ep-webgpu 0.4.0 on ORT 1.32.0 (Mesa lavapipe)",
)
CUDA_TRAITS = EpTraits(
    ep="CUDAExecutionProvider",
    cpu_inputs=_CUDA_CPU_INPUTS,
    cpu_outputs=_CUDA_CPU_OUTPUTS,
    prefers_cpu_for_shape_nodes=True,
    nhwc_domain=None,
    evidence="ORT source: CUDA kernel registrations; CUDA GetCapability uses GetCpuPreferredNodes",
)
DML_TRAITS = EpTraits(
    ep="DmlExecutionProvider",
    cpu_inputs=_CUDA_CPU_INPUTS,
    cpu_outputs=_CUDA_CPU_OUTPUTS,
    prefers_cpu_for_shape_nodes=False,
    nhwc_domain=None,
    evidence="approximation: CUDA's CPU-input slots; not verified on DirectML",
)

_BY_EP: Mapping[str, EpTraits] = {t.ep: t for t in (WEBGPU_TRAITS, CUDA_TRAITS, DML_TRAITS)}


def traits_for(ep: str) -> EpTraits:
    """The traits of ``ep`` (an alias or ORT's name); an EP without data gets empty traits."""
    try:
        canonical = canonical_ep_name(ep)
    except ValueError:
        canonical = ep
    if canonical in _BY_EP:
        return _BY_EP[canonical]
    return EpTraits(ep=canonical, cpu_inputs={}, cpu_outputs={}, evidence="no data")
