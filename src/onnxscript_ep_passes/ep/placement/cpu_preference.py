"""ORT's CPU preference, the third phase of placement: shape computations go to CPU.

Only for EPs whose traits say they apply ORT's ``GetCpuPreferredNodes`` (CUDA): nodes that
consume only CPU-resident values (CPU-output slots such as Shape's, small initializers,
graph inputs), with no 16-bit or 8-bit float input, go to CPU on purpose (reason code
``"shape_computation"``). They are not fallback. This replays the forward trace of ORT
main's ``fallback_cpu_capability.cc`` (including its propagation through CPU nodes reached
from CPU tensors); it is not measured here (no GPU), and the WebGPU plugin does not apply
it (measured).
"""

from __future__ import annotations

__all__ = ["apply_cpu_preference"]

from onnxscript_ep_passes.ep.placement.graph import FlatNode, FlatScope, FlatValue
from onnxscript_ep_passes.ep.placement.results import SHAPE_COMPUTATION_REASON
from onnxscript_ep_passes.ep.traits import EpTraits

_SMALL_INITIALIZER_THRESHOLD = 100  # fallback_cpu_capability.cc kSmallInitializerThreshold
_NO_CPU_PREFERENCE_TYPES = frozenset(
    f"tensor({t})"
    for t in (
        "float16",
        "bfloat16",
        "float8e4m3fn",
        "float8e4m3fnuz",
        "float8e5m2",
        "float8e5m2fnuz",
    )
)


def apply_cpu_preference(scope: FlatScope, traits: EpTraits) -> None:
    """ORT's GetCpuPreferredNodes on one graph (forward trace, in topological order)."""
    tentative = [n for n in scope.nodes if n.on_ep]
    if not tentative:
        return
    cpu_args: set[FlatValue] = set()
    candidates: set[FlatNode] = set()
    for n in tentative:
        for slot, out in enumerate(n.outputs):
            if out is not None and traits.output_on_cpu(n.domain, n.op_type, slot):
                cpu_args.add(out)
                candidates.update(c for c, _ in out.consumers)
    for n in scope.nodes:  # graph order is topological
        if n not in candidates:
            continue
        if not n.on_ep:
            # A CPU node reached from CPU tensors: its outputs are CPU tensors too.
            for out in n.outputs:
                if out is not None:
                    cpu_args.add(out)
                    candidates.update(c for c, _ in out.consumers)
            continue
        place_in_cpu = True
        for i, val in enumerate(n.inputs):
            if val is None:
                place_in_cpu = False
                break
            if val.dtype in _NO_CPU_PREFERENCE_TYPES:
                place_in_cpu = False
                break
            small_init = val.kind == "initializer" and (
                val.size is not None and val.size <= _SMALL_INITIALIZER_THRESHOLD
            )
            if small_init or val.kind == "input":
                continue
            if val not in cpu_args:
                place_in_cpu = False
                break
            if traits.input_on_cpu(n.domain, n.op_type, i):
                place_in_cpu = False
                break
        if place_in_cpu:
            n.on_ep = False
            n.shape_computation = True
            n.reason = SHAPE_COMPUTATION_REASON
            n.reason_code = "shape_computation"
            for out in n.outputs:
                if out is not None:
                    cpu_args.add(out)
                    candidates.update(c for c, _ in out.consumers)
