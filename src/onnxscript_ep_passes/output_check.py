"""The last check before an output model is moved into place: onnx's own checker.

Rules (:func:`check_output`, called by :class:`~onnxscript_ep_passes._atomic.Stage` on
every graph it writes, whichever path built it: the proto fast path, the IR save, the
early weights copy):

* The model must pass ``onnx.checker.check_model(full_check=True)`` (the structural
  checks and strict shape inference). Otherwise ValueError, one line: OUT, the checker's
  message, "nothing was written"; the caller's staged files are removed.
* The main graph's inputs and outputs must each have a type, and a tensor type a shape
  (its rank; dimensions may be unknown), as the checker requires; the message names the
  value (the checker's own does not).
* What the checker cannot judge is set aside, in a copy made only when needed, never in
  the model written: external data files (written and checked by this package; given
  bytes, the checker would look for them relative to the working directory) are replaced
  by graph inputs of the same type and shape (an initializer in a subgraph is read from
  the main graph, names being unique across scopes), and an external tensor in an
  attribute by zeros of its type and shape; nodes in the ai.onnx domain that onnx has no
  schema for (ORT's own ops there, such as SimplifiedLayerNormalization, which ORT
  registers in that domain) are checked as nodes of an unregistered domain.
* Cost: a few percent of a lowering (0.09 s on benchmarks/make_decoder.py's 5k-node
  model, whose ``lower --target-opset 23`` takes 0.6 s).
"""

from __future__ import annotations

__all__ = ["ORT_DEFAULT_DOMAIN_STANDIN", "check_output"]

import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import onnx
import onnx.helper

from onnxscript_ep_passes._onnx import get_schema, iter_graphs, iter_nodes

ORT_DEFAULT_DOMAIN_STANDIN = "onnxscript_ep_passes.ort_default_domain"
"""The domain the checked copy gives ai.onnx-domain nodes onnx has no schema for."""

_DEFAULT_DOMAINS = ("", "ai.onnx")


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _default_opset(imports: list[onnx.OperatorSetIdProto]) -> int | None:
    return next((o.version for o in imports if o.domain in _DEFAULT_DOMAINS), None)


def _unknown_to_onnx(nodes: list[onnx.NodeProto], opset: int | None) -> list[onnx.NodeProto]:
    if opset is None:
        return []
    return [
        n
        for n in nodes
        if n.domain in _DEFAULT_DOMAINS and get_schema(n.op_type, opset, "") is None
    ]


def _signature_problem(graph: onnx.GraphProto) -> str | None:
    for kind, values in (("input", graph.input), ("output", graph.output)):
        for value in values:
            label = f"{kind} '{value.name}' of graph '{graph.name}'"
            if not value.HasField("type"):
                return f"{label} has no type"
            if value.type.HasField("tensor_type") and not value.type.tensor_type.HasField("shape"):
                return f"{label} has no shape (the checker needs its rank at least)"
    return None


def _checkable(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto``, or a copy with what the checker cannot judge set aside (module rules)."""
    opset = _default_opset(list(proto.opset_import))
    graphs = list(iter_graphs(proto.graph))
    external = any(
        t.data_location == onnx.TensorProto.EXTERNAL for g in graphs for t in g.initializer
    ) or any(
        t.data_location == onnx.TensorProto.EXTERNAL
        for g in graphs
        for n in g.node
        for a in n.attribute
        for t in (a.t, *a.tensors)
    )
    unknown = _unknown_to_onnx([n for g in graphs for n in g.node], opset) or any(
        _unknown_to_onnx(list(_scope_nodes(f.node)), _default_opset(list(f.opset_import)))
        for f in proto.functions
    )
    if not external and not unknown:
        return proto
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    if external:
        _set_external_aside(copy)
    if unknown:
        _set_ort_ops_aside(copy, opset)
    return copy


def _set_external_aside(proto: onnx.ModelProto) -> None:
    main = proto.graph
    inputs = {i.name for i in main.input}
    for graph in iter_graphs(main):
        kept: list[onnx.TensorProto] = []
        external: list[onnx.TensorProto] = []
        for tensor in graph.initializer:
            (external if tensor.data_location == onnx.TensorProto.EXTERNAL else kept).append(tensor)
        if external:
            del graph.initializer[:]
            graph.initializer.extend(kept)
        for tensor in external:
            if tensor.name not in inputs:
                inputs.add(tensor.name)
                value = main.input.add(name=tensor.name)
                value.type.tensor_type.elem_type = tensor.data_type
                shape = value.type.tensor_type.shape
                for dim in tensor.dims:
                    shape.dim.add(dim_value=dim)
        for node in graph.node:
            for attr in node.attribute:
                for tensor in (attr.t, *attr.tensors):
                    if tensor.data_location == onnx.TensorProto.EXTERNAL:
                        size = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
                        tensor.data_location = onnx.TensorProto.DEFAULT
                        del tensor.external_data[:]
                        tensor.raw_data = bytes(math.prod(tensor.dims) * size)


def _scope_nodes(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.NodeProto]:
    """``nodes`` and the nodes of their subgraphs, at any depth."""
    for node in nodes:
        yield node
        for attr in node.attribute:
            for graph in (attr.g, *attr.graphs) if attr.HasField("g") else attr.graphs:
                yield from iter_nodes(graph)


def _set_ort_ops_aside(proto: onnx.ModelProto, opset: int | None) -> None:
    scopes: list[tuple[Iterable[onnx.NodeProto], int | None, Any]] = [
        (proto.graph.node, opset, proto.opset_import)
    ]
    scopes += [
        (f.node, _default_opset(list(f.opset_import)), f.opset_import) for f in proto.functions
    ]
    for nodes, version, imports in scopes:
        unknown = _unknown_to_onnx(list(_scope_nodes(nodes)), version)
        for node in unknown:
            node.domain = ORT_DEFAULT_DOMAIN_STANDIN
        if unknown:
            imports.append(onnx.helper.make_opsetid(ORT_DEFAULT_DOMAIN_STANDIN, 1))


def check_output(proto: onnx.ModelProto, out: Path, data: bytes | None = None) -> None:
    """Raise ValueError (one line) when ``proto`` (serialized as ``data`` when given), to
    be written to ``out``, fails the module's rules."""
    problem = _signature_problem(proto.graph)
    if problem is None:
        try:
            checked = _checkable(proto)
            if checked is proto and data is not None:
                onnx.checker.check_model(data, full_check=True)
            else:
                onnx.checker.check_model(checked, full_check=True)
        except Exception as error:  # ValidationError, InferenceError (the C++ checker)
            problem = _one_line(error)
    if problem is not None:
        raise ValueError(
            f"refusing to write '{out}': the result fails onnx's checker ({problem}); "
            "nothing was written"
        )
