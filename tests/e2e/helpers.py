"""Helpers of the end-to-end tests: a real WebGPU session, and an honest fallback audit.

- :func:`run_on_webgpu` creates ONE real WebGPU session at ORT's *default* optimization
  level (``SessionOptions()`` as a user gets it), with ``optimized_model_filepath`` set, so
  the Memcpy nodes are counted in the optimized model ORT itself saves; it reads ORT's own
  record of the placement (``session.record_ep_graph_assignment_info``) and runs one
  forward pass. It is written independently of
  :func:`onnxscript_ep_passes.ep.measure_placement` (which defaults to a session with
  optimizations disabled), so the tests do not grade the package with its own code.
- :func:`audit_fallback` looks at every node the real session left on CPU and asks the
  live kernel table whether the EP could have run it at *any* opset the model can reach.
  A node is justified when the table has no kernel for its op at any since_version the
  op takes at those opsets (e.g. ai.onnx ``Attention`` on WebGPU, ``IsNaN``), or when a
  kernel matches the version but not the node's types (a type fallback, such as int64
  shape math). Everything else is a node the lowering should have moved to the EP.
"""

from __future__ import annotations

__all__ = [
    "EpRun",
    "FallbackVerdict",
    "audit_fallback",
    "count_memcpy",
    "default_opset_of",
    "run_on_webgpu",
]

import collections
import dataclasses
import tempfile
from collections.abc import Collection, Mapping
from pathlib import Path

import numpy as np
import onnx
import onnx.defs
import onnx_ir as ir
import onnxruntime as ort

from onnxscript_ep_passes.core.onnx_utils import get_schema, iter_nodes
from onnxscript_ep_passes.ep import KernelTable, make_webgpu_session_options

WEBGPU = "WebGpuExecutionProvider"
_MEMCPY = ("MemcpyFromHost", "MemcpyToHost")
_NHWC_DOMAIN = "com.ms.internal.nhwc"


@dataclasses.dataclass(frozen=True)
class EpNode:
    name: str
    op_type: str
    domain: str
    provider: str


@dataclasses.dataclass(frozen=True)
class EpRun:
    """One real session: its providers, ORT's placement, Memcpy counts, one forward."""

    providers: tuple[str, ...]
    nodes: tuple[EpNode, ...]  # ORT's placement record (made before Memcpy insertion)
    memcpy_from_host: int
    memcpy_to_host: int
    outputs: list[np.ndarray]

    @property
    def memcpy(self) -> int:
        return self.memcpy_from_host + self.memcpy_to_host

    @property
    def cpu_nodes(self) -> list[EpNode]:
        return [n for n in self.nodes if n.provider != WEBGPU]

    @property
    def ep_nodes(self) -> list[EpNode]:
        return [n for n in self.nodes if n.provider == WEBGPU]

    def cpu_summary(self) -> dict[str, int]:
        return dict(collections.Counter(n.op_type for n in self.cpu_nodes))


def count_memcpy(model: onnx.ModelProto) -> tuple[int, int]:
    """(MemcpyFromHost, MemcpyToHost) nodes in every graph of ``model``."""
    counts = collections.Counter(n.op_type for n in iter_nodes(model.graph))
    return counts["MemcpyFromHost"], counts["MemcpyToHost"]


def run_on_webgpu(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> EpRun:
    """Create one WebGPU session at ORT's default optimization level and run it once."""
    options = ort.SessionOptions()
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    make_webgpu_session_options(session_options=options)
    with tempfile.TemporaryDirectory(prefix="e2e_webgpu_") as tmp:
        optimized = Path(tmp) / "optimized.onnx"
        options.optimized_model_filepath = str(optimized)
        session = ort.InferenceSession(model.SerializeToString(), options)
        saved = onnx.load(str(optimized), load_external_data=False)
    providers = tuple(session.get_providers())
    if WEBGPU not in providers:
        raise AssertionError(f"the session has no WebGPU EP (providers {providers})")
    assigned = [
        EpNode(n.name, n.op_type, n.domain, sub.ep_name)
        for sub in session.get_provider_graph_assignment_info()
        for n in sub.get_nodes()
    ]
    nodes = tuple(n for n in assigned if n.op_type not in _MEMCPY)
    if not any(n.provider == WEBGPU for n in nodes):
        raise AssertionError("the WebGPU EP received no node: not an EP measurement")
    from_host, to_host = count_memcpy(saved)
    names = [o.name for o in session.get_outputs()]
    outputs = [np.asarray(o) for o in session.run(names, dict(feeds))]
    return EpRun(
        providers=providers,
        nodes=nodes,
        memcpy_from_host=from_host,
        memcpy_to_host=to_host,
        outputs=outputs,
    )


def default_opset_of(model: onnx.ModelProto) -> int:
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    assert len(versions) == 1, model.opset_import
    return versions[0]


# -- the fallback audit ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FallbackVerdict:
    """Why one CPU node of the real session is (or is not) acceptable.

    ``kind`` is ``"no_kernel"`` (no kernel at any reachable since_version), ``"type"``
    (kernels match a version but not the node's types) or ``"avoidable"`` (the EP has a
    kernel for it at a reachable opset: the lowering missed it).
    """

    node: str
    op_type: str
    domain: str
    kind: str
    detail: str


def _type_name(value: ir.Value | None) -> str | None:
    if value is None or value.type is None or not isinstance(value.type, ir.TensorType):
        return None
    return f"tensor({value.type.dtype.name.lower()})"


def _bindings(node: ir.Node, schema: onnx.defs.OpSchema) -> dict[str, str]:
    """Actual types per schema type parameter and formal name (``{"T": "tensor(float)"}``)."""
    out: dict[str, str] = {}
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    for formals, values in ((schema.inputs, node.inputs), (schema.outputs, node.outputs)):
        for i, value in enumerate(values):
            if i < len(formals):
                formal = formals[i]
            elif formals and formals[-1].option == variadic:
                formal = formals[-1]
            else:
                continue
            t = _type_name(value)
            if t is not None:
                out.setdefault(formal.type_str, t)
                out.setdefault(formal.name, t)
    return out


def _model_nodes(model: ir.Model) -> dict[str, ir.Node]:
    """Model nodes by the name ORT gives them (inlined function nodes: ``_inlfunc_...``)."""
    found: dict[str, ir.Node] = {}
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.name:
            found.setdefault(node.name, node)
    for fn in model.functions.values():
        for node in ir.traversal.RecursiveGraphIterator(fn):
            if node.name:
                found.setdefault(f"_inlfunc_{fn.name}_{node.name}", node)
    return found


def audit_fallback(
    cpu_nodes: Collection[EpNode],
    model: ir.Model,
    table: KernelTable,
    reachable_opsets: Collection[int],
) -> list[FallbackVerdict]:
    """Judge every node the real session put on CPU (see the module docstring).

    ``model`` is the model the session ran; ``reachable_opsets`` the ai.onnx opsets the
    lowering can reach for it. Types come from the model's value types (unknown types are
    not checked, so a node of unknown type whose version has a kernel counts as avoidable).
    ORT-made nodes (layout Transposes, fusions) are judged by op and version only.
    """
    by_name = _model_nodes(model)
    verdicts = []
    for measured in cpu_nodes:
        domain = "" if measured.domain in ("", "ai.onnx") else measured.domain
        op = measured.op_type
        if domain == _NHWC_DOMAIN:  # an NHWC node ORT converted: the ai.onnx op decides
            domain = ""
        name = measured.name
        if measured.domain == _NHWC_DOMAIN and "_token_" in name:
            name = name.rsplit("_token_", 1)[0]
        model_node = by_name.get(name)
        if model_node is not None and model_node.op_type != op:
            model_node = None  # a node ORT rewrote under the same name: no trusted types
        tried: list[str] = []
        avoidable: str | None = None
        type_problem: str | None = None
        if domain == "":
            opsets = sorted(set(reachable_opsets))
        else:
            # Contrib domains (com.microsoft ...) have a single opset, version 1, in ORT.
            opsets = [model.opset_imports.get(domain, 1)]
        for opset in opsets:
            schema = get_schema(op, opset, domain) if domain == "" else None
            if domain == "" and schema is None:
                continue  # the op does not exist at this opset (e.g. Attention below 23)
            since = schema.since_version if schema is not None else opset
            types = _bindings(model_node, schema) if model_node and schema else None
            kernel, reason = table.explain(domain, op, since, types)
            tried.append(f"opset {opset} -> {op}-{since}: {reason}")
            if kernel is not None:
                avoidable = f"at opset {opset} {reason}"
                break
            if table.match(domain, op, since) is not None:
                type_problem = reason
        if avoidable is not None:
            kind, detail = "avoidable", avoidable
        elif type_problem is not None:
            kind, detail = "type", type_problem
        else:
            kind, detail = "no_kernel", "; ".join(tried) or f"no schema for {op}"
        verdicts.append(FallbackVerdict(measured.name, op, domain, kind, detail))
    return verdicts
