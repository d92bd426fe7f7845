"""EP profiles: one module per execution provider, each registering an :class:`EpProfile`.

An EP is a value (:mod:`~onnxscript_ep_passes.ep.profiles.base`, rules 1-4): its ORT name,
aliases, display name, memory traits, cost rates, how a session selects it and how its
kernels are listed live. Nothing outside this package spells an EP's name or branches on
it; code asks :func:`resolve_ep` (what a user typed) or :func:`profile_for` (a table's EP).

- :mod:`~onnxscript_ep_passes.ep.profiles.cpu` -- ORT's CPU EP, the host.
- :mod:`~onnxscript_ep_passes.ep.profiles.cuda` -- CUDA.
- :mod:`~onnxscript_ep_passes.ep.profiles.dml` -- DirectML.
- :mod:`~onnxscript_ep_passes.ep.profiles.webgpu` -- the WebGPU plugin EP, and the plugin.
- :mod:`~onnxscript_ep_passes.ep.profiles.openvino` -- OpenVINO (host memory; a table
  transcribed from ORT's docs).
- :mod:`~onnxscript_ep_passes.ep.profiles.generic` -- EPs known by name only.

Adding an EP: one module here (its profile, registered), its import below, a kernel-table
snapshot under ``ep/data`` and a test.
"""

from onnxscript_ep_passes.ep.profiles.base import (
    CostRates,
    EpProfile,
    canonical_ep_name,
    profile_for,
    registered_profiles,
    resolve_ep,
    traits_for,
)
from onnxscript_ep_passes.ep.profiles.cpu import CPU
from onnxscript_ep_passes.ep.profiles.cuda import CUDA
from onnxscript_ep_passes.ep.profiles.dml import DML
from onnxscript_ep_passes.ep.profiles.generic import OTHER_EPS
from onnxscript_ep_passes.ep.profiles.openvino import OPENVINO
from onnxscript_ep_passes.ep.profiles.webgpu import WEBGPU

__all__ = [
    "CPU",
    "CUDA",
    "DML",
    "OPENVINO",
    "OTHER_EPS",
    "WEBGPU",
    "CostRates",
    "EpProfile",
    "canonical_ep_name",
    "profile_for",
    "registered_profiles",
    "resolve_ep",
    "traits_for",
]
