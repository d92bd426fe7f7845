"""What ONNX Runtime runs: a CPU kernel for a node the lowering builds; default-domain
ops ORT defines that ONNX does not (SimplifiedLayerNormalization).

Rules:

* The CPU EP is the fallback of every ORT session: a node it has no kernel for, and no
  other EP takes, makes the model fail to load, unless ORT inlines it. Measured on ORT
  1.32: a context-dependent function body (CastLike, Attention, Gelu) is built for the
  model's opset and always inlined; a static body only when its opset is the model's
  (Swish-24 runs at opset 24, not at 25 or 27; Elu's opset-18 body never rescues Elu-22).
* The kernels are those the installed ``onnxruntime`` registers for its fallback EP, read
  once (``get_all_opkernel_def``). The fallback is found, not named: ORT lists the EPs it
  knows by priority (``get_all_providers``), its CPU EP last; plugin EPs are not in that
  list (they follow the CPU EP in ``get_available_providers``, which is why that list is
  not read). A node matches a kernel as ORT matches it: the since
  version of the node's schema equals the kernel's start version, or lies inside a
  closed range; and its first input's tensor type is one the kernel lists.
* When the listing is unavailable (an ORT build that cannot create one of its EPs on
  this machine), every node is taken as runnable: the lowering then builds what it
  built before.
"""

from __future__ import annotations

__all__ = ["cpu_has_kernel", "host_provider", "ort_defines", "ort_inlines", "ort_only"]

import functools
import logging
from typing import Any

import onnx

from onnxscript_ep_passes.lowering import schemas

logger = logging.getLogger(__name__)

_OPEN_END = 2**31 - 1

_Kernel = tuple[int, int, frozenset[str]]  # start, end, every type string it accepts


@functools.cache
def _kernel_definitions() -> tuple[Any, ...] | None:
    try:
        from onnxruntime.capi import _pybind_state

        return tuple(_pybind_state.get_all_opkernel_def())
    except Exception as error:  # pragma: no cover - depends on the ORT build
        logger.debug("ORT's kernel listing is unavailable: %s", error)
        return None


def _domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


@functools.cache
def host_provider() -> str | None:
    """ORT's name for the EP every session falls back to: the last EP ORT lists by priority
    (None when ORT cannot be imported)."""
    try:
        import onnxruntime as ort

        return str(ort.get_all_providers()[-1])
    except Exception as error:  # pragma: no cover - onnxruntime is a dependency
        logger.debug("ORT's provider list is unavailable: %s", error)
        return None


@functools.cache
def _cpu_kernels() -> dict[tuple[str, str], tuple[_Kernel, ...]] | None:
    definitions = _kernel_definitions()
    host = host_provider()
    if definitions is None or host is None:
        return None
    kernels: dict[tuple[str, str], list[_Kernel]] = {}
    for definition in definitions:
        if definition.provider != host:
            continue
        domain = _domain(definition.domain)
        start, end = definition.version_range
        constraints = definition.type_constraints
        types = frozenset(t for allowed in constraints.values() for t in allowed)
        kernels.setdefault((domain, definition.op_name), []).append((start, end, types))
    return {key: tuple(found) for key, found in kernels.items()}


def cpu_has_kernel(op_type: str, domain: str, since_version: int, type_str: str | None) -> bool:
    """Whether ORT's CPU EP runs ``op_type`` at schema ``since_version`` on ``type_str``
    (the node's first input type, e.g. ``tensor(double)``; None: any type)."""
    kernels = _cpu_kernels()
    if kernels is None:
        return True
    domain = _domain(domain)
    for start, end, types in kernels.get((domain, op_type), ()):
        matches = start == since_version or (end != _OPEN_END and start <= since_version <= end)
        if matches and (type_str is None or not types or type_str in types):
            return True
    return False


@functools.cache
def ort_defines(op_type: str, domain: str) -> bool:
    """Whether some EP of the installed ORT registers a kernel for ``op_type`` in ``domain``
    (False when the listing is unavailable: the op is then treated as unknown)."""
    definitions = _kernel_definitions()
    if definitions is None:
        return False
    key = (_domain(domain), op_type)
    return any((_domain(d.domain), d.op_name) == key for d in definitions)


def ort_only(op_type: str, domain: str) -> bool:
    """A default-domain op ONNX defines at no opset and ONNX Runtime registers
    (SimplifiedLayerNormalization); ops of other domains are never "ORT-only" here."""
    if _domain(domain):
        return False
    latest = onnx.defs.onnx_opset_version()
    return schemas.since_version(op_type, latest, domain) is None and ort_defines(op_type, domain)


def ort_inlines(op_type: str, domain: str, opset: int) -> bool:
    """Whether ORT inlines ``op_type`` in a model at ``opset`` through its ONNX function body."""
    schema: Any = schemas.get_schema(op_type, opset, domain)  # the stubs lack the body lists
    if schema is None:
        return False
    if any(v <= opset for v in schema.context_dependent_function_opset_versions):
        return True
    static = [v for v in schema.function_opset_versions if v <= opset]
    return bool(static) and max(static) == opset
