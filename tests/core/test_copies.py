"""Copies related to their original by structure: pairing, composing, refusing a mismatch."""

from __future__ import annotations

import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.core.copies import adopt, align, copy_with_origins
from tests.harness import make_model

F = onnx.TensorProto.FLOAT


def _model() -> ir.Model:
    return ir.from_proto(
        make_model(
            [
                oh.make_node("Relu", ["x"], ["a"], name="same"),
                oh.make_node("Neg", ["a"], ["b"], name="same"),  # names need not be unique
                oh.make_node("Abs", ["b"], ["y"]),  # nor present
            ],
            [oh.make_tensor_value_info("x", F, [2])],
            [oh.make_tensor_value_info("y", F, [2])],
            21,
        )
    )


def test_copy_pairs_every_node_with_its_original() -> None:
    model = _model()
    copy, origin = copy_with_origins(model)
    pairs = list(origin.nodes.items())
    assert [(c.op_type, o.op_type) for c, o in pairs] == [
        ("Relu", "Relu"),
        ("Neg", "Neg"),
        ("Abs", "Abs"),
    ]
    assert all(c is not o and c.graph is copy.graph and o.graph is model.graph for c, o in pairs)


def test_align_refuses_models_that_differ() -> None:
    model = _model()
    copy = model.clone()
    copy.graph.remove(copy.graph.node(2), safe=False)
    with pytest.raises(ValueError, match="2 nodes against 3"):
        align(copy, model)
    other = model.clone()
    other.graph.node(0).op_type = "Sigmoid"
    with pytest.raises(ValueError, match="Sigmoid"):
        align(other, model)


def test_adopt_moves_the_graph_into_the_model_object() -> None:
    model, other = _model(), _model()
    other.graph.node(2).op_type = "Sigmoid"
    graph = other.graph
    adopt(model, other)
    assert model.graph is graph and model.graph.node(2).op_type == "Sigmoid"
