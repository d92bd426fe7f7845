"""The DirectML EP's profile.

ORT name ``DmlExecutionProvider`` (onnxruntime-directml, Windows): sessions select it
through the ``providers`` list; its kernels are listed with ``get_all_opkernel_def()``.

Traits: not verifiable here. CUDA's CPU-input slots are used as an approximation (DML
keeps the same "constant CPU inputs" for the shape ops) and no CPU preference is assumed.
"""

from __future__ import annotations

__all__ = ["DML"]

from onnxscript_ep_passes.ep.profiles.base import EpProfile, register
from onnxscript_ep_passes.ep.profiles.cuda import CUDA_CPU_INPUTS, CUDA_CPU_OUTPUTS
from onnxscript_ep_passes.ep.traits import EpTraits

DML = register(
    EpProfile(
        ort_name="DmlExecutionProvider",
        display_name="DirectML",
        aliases=("dml", "directml"),
        traits=EpTraits(
            ep="DmlExecutionProvider",
            cpu_inputs=CUDA_CPU_INPUTS,
            cpu_outputs=CUDA_CPU_OUTPUTS,
            prefers_cpu_for_shape_nodes=False,
            nhwc_domain=None,
            evidence="approximation: CUDA's CPU-input slots; not verified on DirectML",
        ),
    )
)
"""Microsoft DirectML."""
