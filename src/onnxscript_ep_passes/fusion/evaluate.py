"""Run parts of a model on ONNX Runtime's CPU EP, with generated inputs.

The fusions prove conditions numerically and check their results by running models:

- :func:`evaluate_values` runs the part of a graph that computes some values (their
  ancestors only, :func:`extract_model`) and returns them;
- :func:`generate_feeds` makes inputs for a decoder-style model from a few sizes (batch,
  sequence, past length, padding). Inputs are recognised by role: ``attention_mask`` (2-D,
  ones over past + current tokens; with ``padding`` ``"left"`` or ``"right"`` the last
  batch row has its first or last ``max(1, total // 3)`` tokens zero, at least one kept:
  :func:`padding_mask`), token ids (2-D integers: random ids below the embedding size of
  the ``Gather`` that reads them), past key/values (4-D floats: ``past`` tokens), anything
  else (random floats, zero integers, ``True`` booleans; symbolic dims that no role names
  get the sequence length).

Rules: nothing here changes the model; a graph whose values cannot be evaluated (nodes
with subgraphs, unknown input roles the generator cannot size) raises ``ValueError``.
"""

from __future__ import annotations

__all__ = [
    "PADDINGS",
    "Sizes",
    "cpu_session",
    "evaluate_values",
    "extract_model",
    "generate_feeds",
    "padding_mask",
    "run_model",
    "run_session",
]

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnxscript_ep_passes.ep.profiles import CPU

PADDINGS = ("none", "left", "right")
"""How :func:`generate_feeds` pads the last batch row of ``attention_mask``."""


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Sizes for generated inputs: batch, current tokens, past tokens (KV cache), and how
    the last batch row is padded (one of :data:`PADDINGS`)."""

    batch: int = 1
    seq: int = 8
    past: int = 0
    padding: str = "none"

    def __post_init__(self) -> None:
        if self.padding not in PADDINGS:
            raise ValueError(f"padding {self.padding!r} is not one of {PADDINGS}")

    @property
    def total(self) -> int:
        return self.past + self.seq

    def describe(self) -> str:
        """``batch 2, 8 tokens after 3 past, last row left-padded``."""
        text = f"batch {self.batch}, {self.seq} token{'s' if self.seq != 1 else ''}"
        if self.past:
            text += f" after {self.past} past"
        if self.padding != "none":
            text += f", last row {self.padding}-padded"
        return text


def padding_mask(sizes: Sizes, dtype: np.dtype | type = np.int64) -> np.ndarray:
    """The ``attention_mask`` ``[batch, total]`` of ``sizes`` (module docstring)."""
    mask = np.ones((sizes.batch, sizes.total), dtype)
    pad = min(max(1, sizes.total // 3), sizes.total - 1)
    if sizes.padding == "left" and pad:
        mask[-1, :pad] = 0
    elif sizes.padding == "right" and pad:
        mask[-1, sizes.total - pad :] = 0
    return mask


def _is_mask(value: ir.Value) -> bool:
    return (value.name or "") == "attention_mask"


def _is_past(value: ir.Value) -> bool:
    shape = value.shape
    return shape is not None and len(shape) == 4 and "past" in (value.name or "")


def _dtype(value: ir.Value) -> np.dtype:
    if value.dtype is None:
        raise ValueError(f"graph input {value.name!r} has no known type")
    return np.dtype(value.dtype.numpy())


def _token_range(value: ir.Value) -> int:
    """The embedding size of the Gather(s) that read ``value`` as indices (default 2)."""
    highs = []
    for user, index in value.uses():
        if user.op_type == "Gather" and user.domain == "" and index == 1:
            data = user.inputs[0]
            if data is not None and data.shape is not None and isinstance(data.shape[0], int):
                highs.append(data.shape[0])
    return min(highs) if highs else 2


def _symbols(inputs: Sequence[ir.Value], sizes: Sizes) -> dict[str, int]:
    """Symbolic dim names given a size by the role of the input that carries them."""
    known: dict[str, int] = {}

    def name(value: ir.Value, axis: int, size: int) -> None:
        shape = value.shape
        if shape is not None and len(shape) > axis and not isinstance(shape[axis], int):
            known.setdefault(str(shape[axis]), size)

    for value in inputs:
        shape = value.shape
        if shape is None or not shape:
            continue
        name(value, 0, sizes.batch)
        if _is_mask(value):
            name(value, 1, sizes.total)
        elif _is_past(value):
            name(value, 2, sizes.past)
        elif len(shape) >= 2:
            name(value, 1, sizes.seq)
    return known


def generate_feeds(
    inputs: Sequence[ir.Value], sizes: Sizes, *, seed: int = 0
) -> dict[str, np.ndarray]:
    """Inputs for ``inputs`` (graph inputs) at ``sizes`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    known = _symbols(inputs, sizes)
    feeds: dict[str, np.ndarray] = {}
    for value in inputs:
        if value.shape is None:
            raise ValueError(f"graph input {value.name!r} has no known rank")
        dims = [d if isinstance(d, int) else known.get(str(d), sizes.seq) for d in value.shape]
        dtype = _dtype(value)
        if _is_mask(value):
            array = np.ones(dims, dtype)
            if tuple(dims) == (sizes.batch, sizes.total):
                array = padding_mask(sizes, dtype)
        elif np.issubdtype(dtype, np.integer):
            array = rng.integers(0, _token_range(value), dims).astype(dtype)
        elif dtype == np.bool_:
            array = np.ones(dims, np.bool_)
        else:
            array = rng.standard_normal(dims).astype(dtype)
        feeds[str(value.name)] = array
    return feeds


def cpu_session(proto: onnx.ModelProto) -> Any:
    """An ORT session of ``proto`` on the CPU EP, graph optimizations off."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(proto.SerializeToString(), options, providers=[CPU.ort_name])


def run_session(session: Any, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """All outputs of ``session`` for ``feeds`` (feeds it has no input for are ignored)."""
    wanted = {i.name for i in session.get_inputs()}
    return [
        np.asarray(o) for o in session.run(None, {k: v for k, v in feeds.items() if k in wanted})
    ]


def run_model(proto: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """All outputs of ``proto`` on ORT's CPU EP, graph optimizations off."""
    return run_session(cpu_session(proto), feeds)


def _ancestors(targets: Sequence[ir.Value]) -> tuple[set[ir.Node], set[ir.Value]]:
    nodes: set[ir.Node] = set()
    leaves: set[ir.Value] = set()
    stack = list(targets)
    while stack:
        value = stack.pop()
        node = value.producer()
        if node is None:
            leaves.add(value)
            continue
        if node in nodes:
            continue
        if any(
            a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
            for a in node.attributes.values()
        ):
            raise ValueError(f"node {node.name!r} ({node.op_type}) has a subgraph")
        nodes.add(node)
        stack.extend(v for v in node.inputs if v is not None)
    return nodes, leaves


def extract_model(
    model: ir.Model, targets: Sequence[ir.Value], *, all_inputs: bool = False
) -> onnx.ModelProto:
    """The part of ``model``'s main graph that computes ``targets`` (its outputs): their
    ancestor nodes, the graph inputs they read (every graph input with ``all_inputs``,
    whose names and shapes give sizes their roles) and the constants they use."""
    graph = model.graph
    nodes, leaves = _ancestors(targets)
    graph_inputs = [v for v in graph.inputs if all_inputs or v in leaves]
    initializers = []
    for leaf in leaves:
        if leaf in graph_inputs:
            continue
        if leaf.const_value is None:
            raise ValueError(f"value {leaf.name!r} is neither an input nor a constant")
        initializers.append(ir.serde.serialize_tensor(leaf.const_value))
        initializers[-1].name = str(leaf.name)
    outputs = []
    for value in targets:
        if value.dtype is None:
            raise ValueError(f"value {value.name!r} has no known type")
        outputs.append(onnx.helper.make_tensor_value_info(str(value.name), value.dtype.value, None))
    proto_graph = onnx.helper.make_graph(
        [ir.serde.serialize_node(n) for n in graph if n in nodes],
        "evaluate",
        [ir.serde.serialize_value(v) for v in graph_inputs],
        outputs,
        initializer=initializers,
    )
    return onnx.helper.make_model(
        proto_graph,
        opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in model.opset_imports.items()],
        ir_version=model.ir_version,
    )


def evaluate_values(
    model: ir.Model, targets: Sequence[ir.Value], feeds: Mapping[str, np.ndarray]
) -> list[np.ndarray]:
    """Compute ``targets`` (values of the main graph) from ``feeds`` on ORT CPU."""
    return run_model(extract_model(model, targets), feeds)
