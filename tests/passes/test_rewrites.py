"""The rewrites legalization makes and their replay (:mod:`onnxscript_ep_passes.passes.rewrites`):
a legalization's kept rewrites, replayed on another copy of the model, make the model it
made (byte for byte), including a rewrite of a node an earlier rewrite built (HardSwish's
body holds a HardSigmoid, itself a function op); the replayed model passes the full check
and computes what the original does. The search's own use (every candidate's kept
rewrites replayed) is in test_candidates.py."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import walk
from onnxscript_ep_passes.lowering.context import NameIndex
from onnxscript_ep_passes.passes.legalize import legalize
from onnxscript_ep_passes.passes.rewrites import (
    KeptRewrites,
    Rewrite,
    replay_rewrites,
    rewrite_node,
)
from tests.harness import make_model, run_model
from tests.passes import gelu_neg_model, no_gelu_table

FLOAT = onnx.TensorProto.FLOAT


def _hard_swish() -> onnx.ModelProto:
    return make_model(
        [
            oh.make_node("HardSwish", ["x"], ["h"], name="swish"),
            oh.make_node("Neg", ["h"], ["y"], name="neg"),
        ],
        [oh.make_tensor_value_info("x", FLOAT, [2, 5])],
        [oh.make_tensor_value_info("y", FLOAT, [2, 5])],
        22,
    )


def test_a_legalizations_kept_rewrites_replay_to_its_model() -> None:
    table = no_gelu_table()
    legalized = ir.from_proto(gelu_neg_model())
    result = legalize(legalized, table)
    assert [n.op_type for n in result.expanded] == ["Gelu"]
    assert result.rewrites == (Rewrite("model", 0),)  # the first node of the walk
    replayed = ir.from_proto(gelu_neg_model())
    replay_rewrites(replayed, result.opset, result.rewrites, table, [])
    assert ir.to_proto(replayed) == ir.to_proto(legalized)


def test_a_rewrite_of_a_built_node_is_found_again_and_replayed() -> None:
    table = no_gelu_table()
    model = ir.from_proto(_hard_swish())
    kept = KeptRewrites(model)
    kept.before_trial()
    swish = next(n for n in model.graph if n.op_type == "HardSwish")
    built = rewrite_node(swish, model, 22, table, NameIndex(model.graph))
    kept.keep(swish, built)
    sigmoid = next(n for n in walk(model.graph)[0] if n.op_type == "HardSigmoid")
    assert sigmoid in built
    kept.before_trial()  # the walk is read once, before the first trial
    kept.keep(sigmoid, rewrite_node(sigmoid, model, 22, table, NameIndex(model.graph)))
    assert kept.rewrites == [Rewrite("model", 0), Rewrite("built", built.index(sigmoid))]
    assert not any(n.op_type in ("HardSwish", "HardSigmoid") for n in walk(model.graph)[0])

    replayed = ir.from_proto(_hard_swish())
    replay_rewrites(replayed, 22, kept.rewrites, table, [])
    assert ir.to_proto(replayed) == ir.to_proto(model)
    proto = ir.to_proto(replayed)
    onnx.checker.check_model(proto, full_check=True)
    feeds = {"x": np.linspace(-4, 4, 10, dtype=np.float32).reshape(2, 5)}
    expected, _ = run_model(_hard_swish(), feeds)
    actual, how = run_model(proto, feeds)
    assert how == "onnxruntime"
    np.testing.assert_allclose(actual[0], expected[0], rtol=1e-6, atol=1e-6)
