"""Profiles for the ORT EPs this package has no data on, by their accepted aliases.

Each is a generic profile (no memory traits, the default cost rates) that users may name
by a short alias; placement for them needs ``--kernel-table FILE`` or ``--measure``. Any
other ``<Name>ExecutionProvider`` gets the same kind of profile on demand
(:func:`~onnxscript_ep_passes.ep.profiles.base.resolve_ep`).
"""

from __future__ import annotations

__all__ = ["OTHER_EPS"]

import dataclasses

from onnxscript_ep_passes.ep.profiles.base import EpProfile, generic_profile, register

_KNOWN_BY_NAME = (  # ORT's name, its alias, its display name
    ("TensorrtExecutionProvider", "tensorrt", "TensorRT"),
    ("QNNExecutionProvider", "qnn", "QNN"),
    ("CoreMLExecutionProvider", "coreml", "CoreML"),
    ("ROCMExecutionProvider", "rocm", "ROCm"),
    ("MIGraphXExecutionProvider", "migraphx", "MIGraphX"),
)

OTHER_EPS: tuple[EpProfile, ...] = tuple(
    register(dataclasses.replace(generic_profile(name), aliases=(alias,), display_name=shown))
    for name, alias, shown in _KNOWN_BY_NAME
)
"""TensorRT, QNN, CoreML, ROCm and MIGraphX: names known, no data."""
