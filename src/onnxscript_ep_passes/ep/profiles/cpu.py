"""The CPU EP's profile: the host every other EP falls back to.

ORT name ``CPUExecutionProvider``, in every ORT build; its kernels are listed with
``get_all_opkernel_def()``. Nothing is placed or lowered for it (``is_host``); a session
cannot measure placement on it.
"""

from __future__ import annotations

__all__ = ["CPU"]

from collections.abc import Mapping
from typing import Any

from onnxscript_ep_passes.ep.profiles.base import CPU_ORT_NAME, EpProfile, register
from onnxscript_ep_passes.ep.traits import EpTraits


def _select(so: Any, provider_options: Mapping[str, str]) -> list[Any] | None:
    raise ValueError("Measuring placement needs a non-CPU EP")


CPU = register(
    EpProfile(
        ort_name=CPU_ORT_NAME,
        display_name="CPU",
        aliases=("cpu",),
        traits=EpTraits(ep=CPU_ORT_NAME, cpu_inputs={}, cpu_outputs={}, evidence="the host"),
        select_session=_select,
        is_host=True,
    )
)
"""ORT's CPU EP."""
