"""The dynamic-shape LLM exports of :mod:`tests.torch_models` are what they claim to be:
symbolic batch/sequence (and past) dimensions, and ORT runs them at more than one size."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.torch_models import LLM_LAYERS, llm_export, llm_inputs

pytestmark = [
    pytest.mark.torch,
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]


def _dims(model: onnx.ModelProto, name: str) -> list[str | int]:
    (value,) = (v for v in [*model.graph.input, *model.graph.output] if v.name == name)
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def test_dynamic_llama_export_runs_at_two_sizes() -> None:
    model = llm_export("llama", 24)
    assert _dims(model, "input_ids") == ["batch", "sequence_length"]
    assert _dims(model, "attention_mask") == ["batch", "sequence_length"]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch, seq in ((1, 7), (3, 2)):
        feeds = llm_inputs(
            model, {"batch": batch, "sequence_length": seq, "past_sequence_length": 1}
        )
        (logits,) = session.run(["logits"], feeds)
        assert logits.shape == (batch, seq, 128)
        assert np.isfinite(logits).all()


def test_kv_cache_qwen3_export_has_past_and_present() -> None:
    model = llm_export("qwen3", 24, kv_cache=True)
    assert _dims(model, "past_key_values.0.key") == ["batch", 2, "past_sequence_length", 16]
    assert _dims(model, "attention_mask") == ["batch", "total_sequence_length"]
    outputs = [o.name for o in model.graph.output]
    assert outputs[0] == "logits" and len(outputs) == 1 + 2 * LLM_LAYERS
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = llm_inputs(model, {"batch": 2, "sequence_length": 1, "past_sequence_length": 6})
    results = dict(zip(outputs, session.run(outputs, feeds)))
    assert results["logits"].shape == (2, 1, 128)
    assert results["present.3.value"].shape == (2, 2, 7, 16)
