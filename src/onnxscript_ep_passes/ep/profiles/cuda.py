"""The CUDA EP's profile.

ORT name ``CUDAExecutionProvider``, compiled into onnxruntime-gpu (or a plugin bundled
with it): sessions select it through the ``providers`` list, its kernels are listed with
``get_all_opkernel_def()``, which needs a machine where its library loads (a GPU).

Traits, read in ORT's source (``onnxruntime/core/providers/cuda/**`` kernel registrations;
read: Pad 1-2, Resize 1-3, OneHot 1-2, Trilu 1, Clip 1-2, CumSum 1; the others follow the
same pattern in the CUDA tensor/reduction/generator kernels). CUDA's ``GetCapability``
calls ORT's ``GetCpuPreferredNodes``, so shape arithmetic stays on CPU. Not measured here
(no GPU).
"""

from __future__ import annotations

__all__ = ["CUDA", "CUDA_CPU_INPUTS", "CUDA_CPU_OUTPUTS"]

from onnxscript_ep_passes.ep.profiles.base import EpProfile, register
from onnxscript_ep_passes.ep.traits import REDUCE_OPS, EpTraits, slots

# CUDA kernel registrations (ORT source).
_CUDA_CPU_INPUTS = slots(
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
        *((op, [1]) for op in REDUCE_OPS),
    ]
)
_CUDA_CPU_OUTPUTS = slots([("Shape", [0]), ("Size", [0])])
CUDA_CPU_INPUTS = _CUDA_CPU_INPUTS
CUDA_CPU_OUTPUTS = _CUDA_CPU_OUTPUTS

CUDA = register(
    EpProfile(
        ort_name="CUDAExecutionProvider",
        display_name="CUDA",
        aliases=("cuda",),
        traits=EpTraits(
            ep="CUDAExecutionProvider",
            cpu_inputs=CUDA_CPU_INPUTS,
            cpu_outputs=CUDA_CPU_OUTPUTS,
            prefers_cpu_for_shape_nodes=True,
            nhwc_domain=None,
            evidence=(
                "ORT source: CUDA kernel registrations; CUDA GetCapability uses "
                "GetCpuPreferredNodes"
            ),
        ),
    )
)
"""NVIDIA CUDA."""
