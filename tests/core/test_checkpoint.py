"""Checkpoints and edit logs: a model edited in place and restored is saved byte for byte
as before."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.core.checkpoint import EditLog, checkpoint
from onnxscript_ep_passes.ep.table_choice import get_table
from onnxscript_ep_passes.lowering.expansion import expand_node
from onnxscript_ep_passes.lowering.lower_opset import run_lowering
from onnxscript_ep_passes.passes.legalize import legalize
from tests.harness import gelu_in_if, make_model
from tests.torch_models import llm_export

F = onnx.TensorProto.FLOAT


def _saved(model: ir.Model) -> bytes:
    return ir.serde.serialize_model(model).SerializeToString()


def _assert_uses_consistent(model: ir.Model) -> None:
    """Every input of every node lists that node among its uses, and only nodes in the model."""
    nodes = set(ir.traversal.RecursiveGraphIterator(model.graph))
    for node in nodes:
        for index, value in enumerate(node.inputs):
            if value is not None:
                assert (node, index) in list(value.uses()), (node.name, index)
                assert all(user in nodes for user, _ in value.uses()), value.name


def _gelu_model() -> ir.Model:
    """``y = If(c, then: Neg(Gelu(x)), else: Neg(x)) + Gelu(x)`` at opset 24."""
    out = oh.make_tensor_value_info
    proto = make_model(
        [
            gelu_in_if("if", "i"),
            oh.make_node("Gelu", ["x"], ["h"], name="main_gelu"),
            oh.make_node("Add", ["i", "h"], ["y"], name="add"),
        ],
        [out("x", F, [2, 5]), out("c", onnx.TensorProto.BOOL, [])],
        [out("y", F, [2, 5])],
        24,
    )
    return ir.from_proto(proto)


def test_restore_undoes_expansions_in_graphs_and_subgraphs_and_graph_edits() -> None:
    model = _gelu_model()
    before = _saved(model)
    mark = checkpoint(model)
    main_gelu = next(n for n in model.graph if n.op_type == "Gelu")
    if_node = next(n for n in model.graph if n.op_type == "If")
    branch = if_node.attributes["then_branch"].as_graph()
    branch_gelu = next(n for n in branch if n.op_type == "Gelu")
    expand_node(model, main_gelu)
    expand_node(model, branch_gelu)
    # Graph-level edits too: an initializer, a renamed value, a new graph output.
    extra = ir.Value(name="extra", const_value=ir.tensor(np.ones(3, np.float32)))
    model.graph.initializers.add(extra)
    model.graph.inputs[0].name = "renamed"
    model.graph.outputs.append(extra)
    model.graph.node(0).outputs[0].shape = ir.Shape([7])
    assert _saved(model) != before
    mark.restore()
    assert _saved(model) == before
    assert model.graph.node(1) is main_gelu and branch.node(0) is branch_gelu
    _assert_uses_consistent(model)
    with pytest.raises(RuntimeError, match="at most once"):
        mark.restore()


def test_names_given_after_a_restore_are_those_given_without_it() -> None:
    model, twin = _gelu_model(), _gelu_model()
    mark = checkpoint(model)
    expand_node(model, next(n for n in model.graph if n.op_type == "Gelu"))
    model.graph.append(ir.node("Relu", [model.graph.inputs[0]]))  # named by the graph
    mark.restore()
    for m in (model, twin):
        m.graph.append(ir.node("Relu", [m.graph.inputs[0]]))
    assert _saved(model) == _saved(twin)


def test_restore_refuses_a_changed_function_set() -> None:
    model = _gelu_model()
    mark = checkpoint(model)
    model.opset_imports["custom"] = 1
    with pytest.raises(RuntimeError, match="opset imports"):
        mark.restore()


def test_an_edit_log_undoes_its_edits_newest_first() -> None:
    model = _gelu_model()
    before = _saved(model)
    log = EditLog()
    gelu = next(n for n in model.graph if n.op_type == "Gelu")
    add = next(n for n in model.graph if n.op_type == "Add")
    relu = ir.node("Relu", [model.graph.inputs[0]], name="new_relu")
    log.insert_before(model.graph, gelu, relu)
    log.replace_all_uses_with(gelu.outputs[0], relu.outputs[0])
    log.rename(gelu.outputs[0], None)
    log.rename(relu.outputs[0], "h")
    log.remove(model.graph, gelu)  # unused now
    if_node = model.graph.node(0)  # first in the graph
    log.replace_all_uses_with(if_node.outputs[0], model.graph.inputs[0])
    log.remove(model.graph, if_node)
    assert add.inputs[1] is relu.outputs[0]
    log.replace_all_uses_with(relu.outputs[0], model.graph.inputs[0])
    log.remove(model.graph, relu)  # made by the log, removed again
    assert _saved(model) != before
    log.restore()
    assert _saved(model) == before
    assert model.graph.node(1) is gelu and add.inputs[1] is gelu.outputs[0]
    assert relu.graph is None and not relu.outputs  # let go: no cycle left to collect
    _assert_uses_consistent(model)
    with pytest.raises(RuntimeError, match="at most once"):
        log.restore()


def test_an_edit_log_refuses_a_graph_with_nodes_it_did_not_make() -> None:
    model = _gelu_model()
    log = EditLog()
    log.rename(model.graph.node(1).outputs[0], "renamed")
    model.graph.append(ir.node("Relu", [model.graph.inputs[0]]))  # not through the log
    with pytest.raises(RuntimeError, match="did not make"):
        log.restore()


@pytest.mark.parametrize("logged", [False, True], ids=["checkpoint", "edit_log"])
@pytest.mark.parametrize("ep", ["webgpu", "cuda"])
def test_a_real_legalization_is_undone_and_lowering_goes_on_as_without_it(
    ep: str, logged: bool
) -> None:
    """The EP search's use: legalize the working copy at 22, restore, lower on to 21.

    Recorded by a checkpoint, or undone by an edit log (the folding logged, the first kept
    rewrite's trial checkpoint nested in it)."""
    proto = llm_export("gemma3", 24, kv_cache=True)
    work, twin = ir.from_proto(proto), ir.from_proto(proto)
    built = set(run_lowering(work, 22).built)
    run_lowering(twin, 22)
    before = _saved(work)
    assert before == _saved(twin)
    mark = EditLog() if logged else checkpoint(work)
    order = [n for n in ir.traversal.RecursiveGraphIterator(work.graph) if n in built]
    table = get_table(ep, "1.24" if ep == "cuda" else None)
    result = legalize(work, table, built=order, log=mark if isinstance(mark, EditLog) else None)
    assert result.modified  # folding and expansions changed it
    assert result.folded and (ep == "cuda" or result.expanded or result.widened)
    assert _saved(work) != before
    mark.restore()
    assert _saved(work) == before
    _assert_uses_consistent(work)
    run_lowering(work, 21)
    run_lowering(twin, 21)
    assert _saved(work) == _saved(twin)
