"""What an EP does besides registering kernels: which tensors it keeps in CPU memory, and
whether ORT moves small shape computations off it.

The facts are data, one :class:`EpTraits` per EP, held by the EP's profile
(:mod:`~onnxscript_ep_passes.ep.profiles`), each entry with its evidence:

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
- **Host memory** -- an EP whose tensors live in CPU (host) memory (OpenVINO: its
  allocator is the CPU's, on an Intel CPU or an integrated GPU sharing host memory). ORT's
  memcpy transformer inserts no Memcpy between such an EP and the CPU EP, so no transfer
  is predicted or priced at the boundary; its slots then do not matter.

Slots are listed per ``(domain, op)`` for every version of the op that has the input; an
index beyond a node's inputs is simply never used. Each profile module states where its
facts come from (measured, read in ORT's source, or approximated).
"""

from __future__ import annotations

__all__ = ["REDUCE_OPS", "EpTraits", "slots"]

import dataclasses
from collections.abc import Iterable, Mapping

from onnxscript_ep_passes.ep.names import normalize_domain

REDUCE_OPS = (
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


def slots(entries: Iterable[tuple[str, Iterable[int]]]) -> dict[tuple[str, str], frozenset[int]]:
    """``[("Reshape", [1]), ("com.microsoft::X", [0])]`` -> ``{(domain, op): indices}``."""
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
        host_memory: the EP's tensors live in host memory: no Memcpy, in either direction,
            between its nodes and CPU nodes.
        evidence: where the facts come from.
    """

    ep: str
    cpu_inputs: Mapping[tuple[str, str], frozenset[int]] = dataclasses.field(hash=False)
    cpu_outputs: Mapping[tuple[str, str], frozenset[int]] = dataclasses.field(hash=False)
    prefers_cpu_for_shape_nodes: bool = False
    nhwc_domain: str | None = None
    host_memory: bool = False
    evidence: str = ""

    def input_on_cpu(self, domain: str, op: str, index: int) -> bool:
        return index in self.cpu_inputs.get((normalize_domain(domain), op), frozenset())

    def output_on_cpu(self, domain: str, op: str, index: int) -> bool:
        return index in self.cpu_outputs.get((normalize_domain(domain), op), frozenset())
