"""Names: how users may spell an execution provider, and how ORT spells domains and types.

A leaf module (it imports nothing from the package), so every other module can use it.
Rules:

- An EP is accepted by ORT's provider name or an alias, case-insensitively
  (:data:`EP_ALIASES`); :func:`canonical_ep_name` returns ORT's name.
- ``""`` and ``"ai.onnx"`` are the same domain, stored as ``""`` (:func:`normalize_domain`).
- Types are spelled as ORT's kernel defs spell them, ``"tensor(float)"``
  (:func:`normalize_type`).
"""

from __future__ import annotations

__all__ = [
    "CPU_EP",
    "EP_ALIASES",
    "WEBGPU_EP",
    "canonical_ep_name",
    "normalize_domain",
    "normalize_type",
]

from collections.abc import Mapping

CPU_EP = "CPUExecutionProvider"
WEBGPU_EP = "WebGpuExecutionProvider"

EP_ALIASES: Mapping[str, str] = {
    "cuda": "CUDAExecutionProvider",
    "cudaexecutionprovider": "CUDAExecutionProvider",
    "dml": "DmlExecutionProvider",
    "directml": "DmlExecutionProvider",
    "dmlexecutionprovider": "DmlExecutionProvider",
    "webgpu": WEBGPU_EP,
    "webgpuexecutionprovider": WEBGPU_EP,
    "cpu": CPU_EP,
    "cpuexecutionprovider": CPU_EP,
    "tensorrt": "TensorrtExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "qnn": "QNNExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "migraphx": "MIGraphXExecutionProvider",
}
"""Accepted spellings (case-insensitive) of each supported EP, mapped to ORT's name."""


def canonical_ep_name(ep: str) -> str:
    """Return ORT's provider name for ``ep`` ("webgpu", "cuda", "dml"/"directml", "cpu" ...).

    Any ``<Name>ExecutionProvider`` is accepted as ORT spells it (an EP without a shipped
    kernel table needs ``--kernel-table`` or ``--measure``).

    Raises:
        ValueError: ``ep`` is not a supported EP name or alias.
    """
    key = ep.strip().lower()
    if key in EP_ALIASES:
        return EP_ALIASES[key]
    if key.endswith("executionprovider") and key.isalnum():
        return ep.strip()  # any other EP, by ORT's own name
    raise ValueError(
        f"Unknown execution provider {ep!r}; expected ORT's name of an EP (like "
        f"{sorted(set(EP_ALIASES.values()))}) or an alias {sorted(k for k in EP_ALIASES if k.isalpha() and len(k) < 10)}"
    )


def normalize_domain(domain: str) -> str:
    """``"ai.onnx"`` and ``""`` name the same (default) domain; return ``""`` for both."""
    return "" if domain in ("", "ai.onnx") else domain


def normalize_type(type_str: str) -> str:
    """Spell a type as ORT's kernel defs do: ``"float"`` -> ``"tensor(float)"``.

    Strings that already carry a container (``tensor(...)``, ``seq(...)``, ``optional(...)``)
    are returned unchanged apart from surrounding whitespace and case of the element type
    name, which ONNX spells in lower case.
    """
    t = type_str.strip()
    if "(" in t:
        return t
    return f"tensor({t.lower()})"
