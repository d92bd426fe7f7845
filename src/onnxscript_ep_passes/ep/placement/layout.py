"""ORT's NHWC layout transformation, the fourth phase of placement (EPs with an NHWC domain).

Rules (a heuristic matching ORT's transpose optimizer on chains; WebGPU has such a domain):

- EP nodes that have a kernel in the EP's NHWC domain are converted (``nhwc=True``); the
  NHWC region grows forward through EP-placed layout-agnostic element-wise nodes
  (:data:`LAYOUT_AGNOSTIC_OPS`).
- One ``Transpose`` per distinct value entering the region (data input of an NHWC node)
  and one per distinct value leaving it (consumed outside, or a graph output), created
  *at the model's opset* and placed like any node (Transpose-25 has no WebGPU kernel: it
  runs on CPU); they are reported with ``inserted_by_ort=True``.
- Not modelled: the transpose optimizer that runs with this transformation also pushes the
  model's own Transposes through element-wise ops and merges or cancels them
  (``Transpose -> Relu -> Transpose`` becomes one Transpose), so models with such patterns
  can be placed differently from the prediction.
"""

from __future__ import annotations

__all__ = ["LAYOUT_AGNOSTIC_OPS", "apply_layout_transform"]

from onnxscript_ep_passes.core.onnx_utils import get_schema
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.placement.graph import FlatNode, FlatScope, FlatValue
from onnxscript_ep_passes.ep.placement.kernels import decide_kernel
from onnxscript_ep_passes.ep.traits import EpTraits

# Element-wise ops ORT's transpose optimizer pushes an NHWC<->NCHW Transpose through.
LAYOUT_AGNOSTIC_OPS = frozenset(
    {
        "Abs",
        "Add",
        "Cast",
        "Ceil",
        "Clip",
        "Div",
        "Elu",
        "Erf",
        "Exp",
        "Floor",
        "HardSigmoid",
        "HardSwish",
        "Identity",
        "LeakyRelu",
        "Log",
        "Max",
        "Min",
        "Mul",
        "Neg",
        "Pow",
        "PRelu",
        "Reciprocal",
        "Relu",
        "Sigmoid",
        "Sqrt",
        "Sub",
        "Sum",
        "Tanh",
    }
)


def apply_layout_transform(
    scope: FlatScope, table: KernelTable, traits: EpTraits
) -> list[FlatNode]:
    """Insert the Transposes ORT's NHWC layout transformation adds (module docstring).

    Returns the inserted Transposes (already placed and added to ``scope``).
    """
    nhwc = traits.nhwc_domain
    if nhwc is None:
        return []
    region: set[FlatNode] = set()
    for n in scope.nodes:
        if not n.on_ep or n.since_version is None:
            continue
        if n.domain == "" and table.match(nhwc, n.op_type, n.since_version) is not None:
            region.add(n)
            continue
        if n.domain == "" and n.op_type in LAYOUT_AGNOSTIC_OPS:
            data = [v for v in n.inputs if v is not None and v.kind != "initializer"]
            if data and all(v.producer is not None and v.producer in region for v in data):
                region.add(n)
    if not region:
        return []
    for n in scope.nodes:
        if n in region and n.op_type not in LAYOUT_AGNOSTIC_OPS:
            n.nhwc = True
    transpose_schema = get_schema("Transpose", scope.opset, "")
    since = transpose_schema.since_version if transpose_schema is not None else scope.opset
    new_nodes: list[FlatNode] = []
    # Values entering the region: data input 0 of each NHWC node.
    entering: dict[FlatValue, list[tuple[FlatNode, int]]] = {}
    for n in scope.nodes:
        if n not in region or n.op_type in LAYOUT_AGNOSTIC_OPS:
            continue
        val = n.inputs[0] if n.inputs else None
        if val is None or (val.producer is not None and val.producer in region):
            continue
        entering.setdefault(val, []).append((n, 0))
    for val, uses in entering.items():
        t = _transpose(scope, val, since, f"LayoutTranspose_to_nhwc({val.name})", "to_nhwc")
        _move_uses(val, uses, t)
        new_nodes.append(t)
    # Values leaving the region.
    for n in list(scope.nodes):
        if n not in region:
            continue
        for out in n.outputs:
            if out is None:
                continue
            outside = [(c, s) for c, s in out.consumers if c not in region]
            if not outside and not out.is_output:
                continue
            t = _transpose(scope, out, since, f"LayoutTranspose_to_nchw({out.name})", "to_nchw")
            moved = _move_uses(out, outside, t)
            if out.is_output:
                out.is_output, moved.is_output = False, True
            new_nodes.append(t)
    for t in new_nodes:
        decide_kernel(t, transpose_schema, table)
    scope.nodes.extend(new_nodes)
    return new_nodes


def _move_uses(
    value: FlatValue, uses: list[tuple[FlatNode, int]], transpose: FlatNode
) -> FlatValue:
    """Make ``uses`` of ``value`` read the output of ``transpose`` instead; return it."""
    moved = transpose.outputs[0]
    assert moved is not None
    for node, slot in uses:
        value.consumers.remove((node, slot))
        node.inputs[slot] = moved
        moved.consumers.append((node, slot))
    return moved


def _transpose(scope: FlatScope, src: FlatValue, since: int, name: str, role: str) -> FlatNode:
    t = FlatNode(
        name=name,
        op_type="Transpose",
        domain="",
        since_version=since,
        inputs=[src],
        outputs=[],
        scope=scope.name,
        inserted=True,
    )
    src.consumers.append((t, 0))
    out = scope.new_value(f"{src.name}_{role}", "node", src.dtype, ir_value=src.ir_value)
    out.producer, out.producer_slot = t, 0
    t.outputs.append(out)
    return t
