"""Types the lowering infers: from the model as written, never from a half-lowered one."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnx.reference
import pytest
from onnx.backend.test.case.test_case import TestCase

from onnxscript_ep_passes import lower_opset
from tests.harness import run_model
from tests.lowering.backend_cases import all_testcases
from tests.torch_models import export_dynamic_seq_proto, sample_inputs


@pytest.mark.torch
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_llama_opset23_dynamic_seq_lowers_to_21(
    attention: str, caplog: pytest.LogCaptureFixture
) -> None:
    """RMSNormalization-23 is expanded before the rotary Cos/Sin are typed: inference must
    have run on the model as exported (it used to run on the half-lowered one, fail with
    "Output 0 is out of bounds" and leave Cos/Sin/RotaryEmbedding untyped: refused)."""
    model = export_dynamic_seq_proto("llama", 23, attention)
    ops = {node.op_type for node in model.graph.node}
    assert {"RMSNormalization", "Cos", "Sin", "RotaryEmbedding"} <= ops
    with caplog.at_level(logging.WARNING, logger="onnxscript_ep_passes"):
        lowered = lower_opset(model, 21)
    ours = [r for r in caplog.records if r.name.startswith("onnxscript_ep_passes")]
    assert not [r.getMessage() for r in ours if r.levelno >= logging.WARNING]
    assert [o.version for o in lowered.opset_import if o.domain == ""] == [21]
    onnx.checker.check_model(lowered, full_check=True)
    feeds = sample_inputs("llama")
    (expected,), _ = run_model(model, feeds)
    (actual,), how = run_model(lowered, feeds)
    assert how == "onnxruntime"
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


def _backend_case(name: str) -> TestCase:
    return next(case for case in all_testcases() if case.name == name)


def test_subgraph_of_another_domains_op_is_typed() -> None:
    """FlexAttention (ai.onnx.preview) holds an ai.onnx ``score_mod`` subgraph that ONNX's
    inference does not enter: its Range over Shape/Gather is still known to be int64, so
    the Reshape-25/Range nodes in it lower to 18 instead of being refused as unknown."""
    case = _backend_case("test_flexattention_causal_mask")
    assert case.model is not None
    (inputs, expected), *_ = case.data_sets
    lowered = lower_opset(case.model, 18)
    onnx.checker.check_model(lowered, full_check=True)
    (score_mod,) = (a.g for a in lowered.graph.node[0].attribute if a.name == "score_mod")
    assert "Reshape" in {node.op_type for node in score_mod.node}
    names = [value.name for value in lowered.graph.input]
    (actual,) = onnx.reference.ReferenceEvaluator(lowered).run(None, dict(zip(names, inputs)))
    np.testing.assert_allclose(actual, expected[0], rtol=1e-5, atol=1e-6)
