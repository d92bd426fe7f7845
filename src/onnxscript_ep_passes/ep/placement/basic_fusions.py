"""The two fusions of ORT's basic optimizations that change what is placed.

Rules 5 and 6 of :mod:`.basic_optimizations` (its docstring states them): a chain of
reshapes with a static result becomes one ``Reshape``; a ``Transpose`` pair that cancels
goes.
"""

from __future__ import annotations

__all__ = ["cancel_transposes", "fuse_contiguous_reshapes"]

import onnx_ir as ir

from onnxscript_ep_passes.ep.placement.edits import ScopeEdits, static_shape
from onnxscript_ep_passes.ep.placement.graph import FlatNode, FlatValue

# -- 5. contiguous reshapes ------------------------------------------------------------------

_RESHAPES = frozenset({"Reshape", "Squeeze", "Unsqueeze"})


def _allows_zero(node: FlatNode) -> bool:
    """A ``Reshape`` with ``allowzero=1``: ORT neither starts nor extends a chain with it
    (measured on ORT 1.32: Reshape(allowzero=1) -> Unsqueeze -> Reshape stays three
    nodes; Reshape -> Unsqueeze -> Reshape(allowzero=1) fuses the first two)."""
    ir_node = node.node
    if node.op_type != "Reshape" or ir_node is None:
        return False
    attr = ir_node.attributes.get("allowzero")
    return isinstance(attr, ir.Attr) and not attr.is_ref() and attr.value == 1


def fuse_contiguous_reshapes(state: ScopeEdits) -> bool:
    changed = False
    for node in state.scope.nodes:
        if not state.optimizable(node) or node.domain != "" or node.op_type != "Reshape":
            continue
        if _allows_zero(node):
            continue
        if len(node.inputs) < 2 or node.inputs[0] is None or node.inputs[1] is None:
            continue
        chain = [node]
        while True:
            out = chain[-1].outputs[0] if chain[-1].outputs else None
            if out is None or out.is_output or len(out.consumers) != 1:
                break
            if any(o is not None and (o.consumers or o.is_output) for o in chain[-1].outputs[1:]):
                break
            following, slot = out.consumers.first()
            if (
                slot != 0
                or not state.optimizable(following)
                or following.domain != ""
                or following.op_type not in _RESHAPES
                or _allows_zero(following)
            ):
                break
            chain.append(following)
        last = chain[-1].outputs[0] if chain[-1].outputs else None
        if len(chain) < 2 or last is None:
            continue
        shape = static_shape(last)
        if shape is None:
            continue
        new_shape = state.scope.new_value(
            f"{node.name}_new_reshape_shape", "initializer", "tensor(int64)", len(shape)
        )
        state.rewire_input(node, 1, new_shape)
        for removed in chain[1:]:
            state.remove(removed, "reshape_fusion")
        state.rewire_output(node, 0, last)
        node.name = f"{node.name}_new_reshape"  # ORT's name; the record keeps the first node
        changed = True
    return changed


# -- 6. transpose pairs ----------------------------------------------------------------------


def _perm(node: FlatNode, rank: int | None) -> list[int] | None:
    ir_node = node.node
    if ir_node is None:
        return None
    attr = ir_node.attributes.get("perm")
    if isinstance(attr, ir.Attr) and not attr.is_ref() and attr.type == ir.AttributeType.INTS:
        return [int(p) for p in attr.value]
    return list(range(rank))[::-1] if rank is not None else None


def cancel_transposes(state: ScopeEdits) -> bool:
    changed = False
    for second in state.scope.nodes:
        if not state.optimizable(second) or second.domain != "" or second.op_type != "Transpose":
            continue
        middle = second.inputs[0] if second.inputs else None
        first = middle.producer if middle is not None else None
        out = second.outputs[0] if second.outputs else None
        if (
            first is None
            or out is None
            or out.is_output
            or not state.optimizable(first)
            or first.domain != ""
            or first.op_type != "Transpose"
            or first.inputs[0] is None
        ):
            continue
        shape = _static_rank(first.inputs[0])
        p1, p2 = _perm(first, shape), _perm(second, shape)
        if p1 is None or p2 is None or len(p1) != len(p2):
            continue
        if [p1[i] for i in p2] != list(range(len(p1))):
            continue
        state.replace(out, first.inputs[0])
        state.remove(second, "transpose_cancellation")
        assert middle is not None
        if not middle.consumers and not middle.is_output:
            state.remove(first, "transpose_cancellation")
        changed = True
    return changed


def _static_rank(value: FlatValue) -> int | None:
    if value.shape is not None:
        return len(value.shape)
    ir_value = value.ir_value
    shape = ir_value.shape if ir_value is not None else None
    return None if shape is None else len(shape)
