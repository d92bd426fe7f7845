"""What a placement prediction says: one record per placed node, and the Memcpy nodes.

Rules:

- Every record points at the model's IR node it is about (:attr:`NodePlacement.node`),
  the model-local function holding it (:attr:`NodePlacement.function`) and whether ORT
  inlines it from a schema function body (:attr:`NodePlacement.inlined_by_ort`). Callers
  decide from these fields and :attr:`NodePlacement.reason_code`, never from the
  human-readable ``name``, ``scope`` or ``reason``.
- A node is a *fallback* when it is on CPU for lack of a kernel; ORT's choice to keep small
  shape computations on CPU (``reason_code == "shape_computation"``) is not one.
- A CPU node is *shape math* (:attr:`NodePlacement.is_shape_math`) when ORT keeps it on
  CPU by choice, or when it falls back and every tensor it reads and writes is an integer
  or bool tensor of the model (int64 shape arithmetic, masks: WebGPU has no int64
  kernels). Reports count it apart from the fallbacks that compute on real data. Nodes
  of a function body ORT inlines and nodes ORT inserts are never shape math (their
  tensors are not the model's to inspect).
"""

from __future__ import annotations

__all__ = [
    "SHAPE_COMPUTATION_REASON",
    "NodePlacement",
    "OptimizationLevel",
    "Placement",
    "PlacementPrediction",
    "ReasonCode",
    "RemovedNode",
    "Transfer",
]

import collections
import dataclasses
import enum
from typing import Any, Literal

import onnx_ir as ir

Placement = Literal["ep", "cpu"]

ReasonCode = Literal["kernel", "no_kernel_op", "no_kernel_version", "type", "shape_computation"]
"""Why a node is placed where it is: an EP kernel matched (``"kernel"``); the EP registers
no kernel for the op (``"no_kernel_op"``), none at this since_version
(``"no_kernel_version"``), none for these types (``"type"``); or ORT keeps a shape
computation on CPU (``"shape_computation"``)."""

SHAPE_COMPUTATION_REASON = "shape computation (ORT prefers CPU)"


def _integer_or_bool(value: ir.Value) -> bool:
    dtype = value.dtype
    return dtype is not None and (dtype == ir.DataType.BOOL or dtype.is_integer())


@dataclasses.dataclass(frozen=True, slots=True)
class NodePlacement:
    """The predicted placement of one node.

    Attributes:
        name: The node's name as ORT will report it (inlined function nodes:
            ``_inlfunc_<function>_<node>``; inserted layout Transposes get a descriptive
            name of ours, ORT generates its own).
        op_type: The operator.
        domain: ``""`` for ai.onnx.
        since_version: The since_version of the node's schema at its opset (for ops without
            a known schema, the domain's opset version).
        placement: ``"ep"`` or ``"cpu"``.
        reason: Why, in words.
        is_shape_computation: On CPU because ORT prefers CPU for small shape computations
            (not a fallback).
        reason_code: Why, as a :data:`ReasonCode`.
        scope: Where the node lives, for people to read: ``"graph 'main'"``,
            ``"subgraph 'If_0/then_branch'"``, with `` / function 'dom::f'`` appended for
            inlined function nodes. No decision is made from it: use the fields below.
        inserted_by_ort: A node ORT adds (layout-transformation Transpose), not in the model.
        nhwc: ORT's layout transformation converts the node to the EP's NHWC domain
            (ORT then names it ``<name>_token_<n>``).
        node: The model's node this placement is about: the node itself, or, for a node
            of a schema function body ORT inlines (``inlined_by_ort``), the model's node
            whose body it is. None for nodes ORT inserts. The ``Reshape`` ORT's basic
            optimizations fuse a chain of reshapes into points at the chain's first node
            (its ``name`` is ORT's, ``<first>_new_reshape``).
        function: The model-local function whose body holds ``node`` (the innermost one;
            its nodes are shared by every call site), or None for a node of the main
            graph or of its subgraphs.
        inlined_by_ort: The node belongs to the ONNX function body of an op no EP (CPU
            included) has a kernel for, which ORT inlines itself; ``node`` is that op's node.
    """

    name: str
    op_type: str
    domain: str
    since_version: int | None
    placement: Placement
    reason: str
    is_shape_computation: bool = False
    reason_code: ReasonCode = "kernel"
    scope: str = ""
    inserted_by_ort: bool = False
    nhwc: bool = False
    node: ir.Node | None = dataclasses.field(default=None, compare=False, repr=False)
    function: ir.Function | None = dataclasses.field(default=None, compare=False, repr=False)
    inlined_by_ort: bool = False

    @property
    def is_fallback(self) -> bool:
        """On CPU for lack of a kernel (not by ORT's shape-computation preference)."""
        return self.placement == "cpu" and not self.is_shape_computation

    @property
    def is_shape_math(self) -> bool:
        """On CPU by ORT's choice, or falling back on integer and bool tensors only
        (module docstring)."""
        if self.placement != "cpu":
            return False
        if self.is_shape_computation:
            return True
        node = self.node
        if node is None or self.inserted_by_ort or self.inlined_by_ort:
            return False
        values = [v for v in (*node.inputs, *node.outputs) if v is not None]
        return bool(values) and all(_integer_or_bool(v) for v in values)


class OptimizationLevel(enum.IntEnum):
    """ORT's graph optimization levels (``onnxruntime.GraphOptimizationLevel``'s values).

    Placement is predicted for the graph ORT partitions at the level: the graph as written
    at ``DISABLE_ALL``; from ``ENABLE_BASIC`` up, after the basic optimizations of this
    module. The higher levels' fusions run after partitioning, on nodes already placed.
    """

    DISABLE_ALL = 0
    ENABLE_BASIC = 1
    ENABLE_EXTENDED = 2
    ENABLE_LAYOUT = 3
    ENABLE_ALL = 99

    @classmethod
    def of(cls, level: Any) -> OptimizationLevel:
        """The level of an ``OptimizationLevel``, an ``onnxruntime.GraphOptimizationLevel``
        or its number.

        Raises:
            ValueError: not one of ORT's levels.
        """
        if isinstance(level, cls):
            return level
        number = getattr(level, "value", level)
        try:
            return cls(int(number))
        except (TypeError, ValueError):
            raise ValueError(
                f"not an ORT graph optimization level: {level!r} "
                f"(one of {', '.join(f'{m.name}={m.value}' for m in cls)})"
            ) from None

    @property
    def folds(self) -> bool:
        """ORT runs its basic optimizations before partitioning at this level."""
        return self >= OptimizationLevel.ENABLE_BASIC


@dataclasses.dataclass(frozen=True, slots=True)
class RemovedNode:
    """A node ORT's basic optimizations remove before placing the graph.

    Attributes:
        name: The node's name as ORT reports it.
        op_type: The operator.
        domain: ``""`` for ai.onnx.
        rule: Which rule removed it (one of :data:`~onnxscript_ep_passes.ep.placement.basic_optimizations.RULES`).
        scope: Where the node lives, for people to read.
        node: The model's IR node (None when unknown).
    """

    name: str
    op_type: str
    domain: str
    rule: str
    scope: str
    node: ir.Node | None = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True, slots=True)
class Transfer:
    """One predicted Memcpy node: the value copied and the direction.

    ``ir_value`` is the model's IR value whose data is copied (its type and shape say how
    many bytes; for the output of a Transpose ORT inserts, the Transpose's input), or None.
    ``host_side`` names the nodes that hold the value in host memory, as ``(op_type,
    node name)``: for a MemcpyToHost the consumers reading it on the host (CPU nodes, or EP
    nodes' CPU-input slots), for a MemcpyFromHost its producer (a CPU node or an EP
    CPU-output slot), or, for a graph input read in both memories, its host readers; an EP
    node's slot is named with it (``"Reshape (CPU input 1)"``). It is why the copy exists
    (:meth:`PlacementPrediction.memcpy_sources`).
    """

    value: str
    direction: Literal["MemcpyFromHost", "MemcpyToHost"]
    scope: str
    ir_value: ir.Value | None = dataclasses.field(default=None, compare=False, repr=False)
    host_side: tuple[tuple[str, str], ...] = dataclasses.field(default=(), compare=False)

    @property
    def host_ops(self) -> str:
        """The op types on the host side, sorted and joined by ``+`` (``GridSample``)."""
        return "+".join(sorted({op for op, _ in self.host_side})) or "?"


@dataclasses.dataclass(frozen=True)
class PlacementPrediction:
    """Predicted placement of every node, and the Memcpy nodes ORT would insert.

    Attributes:
        ep: The EP the table describes.
        table_source: Provenance of the kernel table.
        ort_version: The table's ORT version.
        nodes: One record per placed node (main graph, subgraphs, inlined functions,
            inserted layout Transposes), in graph order.
        transfers: The predicted Memcpy nodes.
        optimization_level: The session's graph optimization level predicted for.
        removed: The nodes ORT's basic optimizations remove (fold, merge, eliminate)
            before it places the graph, with the rule that removes each; not in ``nodes``.
    """

    ep: str
    table_source: str
    ort_version: str
    nodes: tuple[NodePlacement, ...]
    transfers: tuple[Transfer, ...]
    optimization_level: OptimizationLevel = OptimizationLevel.ENABLE_ALL
    removed: tuple[RemovedNode, ...] = ()

    def memcpy_sources(self) -> dict[str, int]:
        """Where the Memcpy nodes come from: ``host ops -> count`` (:attr:`Transfer.host_ops`,
        e.g. ``{"GridSample": 54, "Resize": 4}``), most first, then by name."""
        counts = collections.Counter(t.host_ops for t in self.transfers)
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def removed_by_rule(self) -> dict[str, int]:
        """``rule -> number of nodes`` ORT's basic optimizations remove (non-zero only)."""
        return dict(sorted(collections.Counter(r.rule for r in self.removed).items()))

    @property
    def memcpy_from_host(self) -> int:
        return sum(1 for t in self.transfers if t.direction == "MemcpyFromHost")

    @property
    def memcpy_to_host(self) -> int:
        return sum(1 for t in self.transfers if t.direction == "MemcpyToHost")

    @property
    def memcpy(self) -> int:
        """Estimated number of Memcpy nodes (both directions)."""
        return len(self.transfers)

    @property
    def ep_nodes(self) -> list[NodePlacement]:
        return [n for n in self.nodes if n.placement == "ep"]

    @property
    def cpu_nodes(self) -> list[NodePlacement]:
        """Every node on CPU: fallback and shape computation."""
        return [n for n in self.nodes if n.placement == "cpu"]

    @property
    def fallback_nodes(self) -> list[NodePlacement]:
        """Nodes on CPU for lack of an EP kernel (excludes ORT's shape-computation choice)."""
        return [n for n in self.nodes if n.is_fallback]

    @property
    def shape_computation_nodes(self) -> list[NodePlacement]:
        return [n for n in self.nodes if n.is_shape_computation]

    @property
    def version_fallback_nodes(self) -> list[NodePlacement]:
        """Fallback nodes whose op has EP kernels, only not at this since_version."""
        return [n for n in self.nodes if n.is_fallback and n.reason_code == "no_kernel_version"]

    @property
    def fully_on_ep(self) -> bool:
        """No fallback node and no Memcpy."""
        return not self.fallback_nodes and not self.transfers

    def summary(self) -> dict[str, dict[str, int]]:
        """``op_type -> {"ep": n, "cpu": n, "shape": n}`` (only non-zero entries)."""
        out: dict[str, collections.Counter[str]] = {}
        for n in self.nodes:
            label = "shape" if n.is_shape_computation else n.placement
            out.setdefault(n.op_type, collections.Counter())[label] += 1
        return {k: dict(v) for k, v in sorted(out.items())}

    def __str__(self) -> str:
        lines = [
            f"{self.ep} ({self.table_source}, ORT {self.ort_version}): "
            f"{len(self.ep_nodes)} on EP, {len(self.fallback_nodes)} fallback, "
            f"{len(self.shape_computation_nodes)} shape computation on CPU, "
            f"~{self.memcpy} Memcpy ({self.memcpy_from_host} from host, "
            f"{self.memcpy_to_host} to host)"
        ]
        lines.extend(
            f"  - {n.name or '<unnamed>'} ({n.op_type}): {n.reason}" for n in self.fallback_nodes
        )
        return "\n".join(lines)
