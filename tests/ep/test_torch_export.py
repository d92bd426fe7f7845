"""A real torch.onnx (dynamo) export: a tiny random Llama, predicted vs measured on WebGPU."""

from __future__ import annotations

import collections

import onnx
import pytest

from onnxscript_ep_passes.ep import KernelTable, measure_placement, predict_placement

pytestmark = [
    pytest.mark.webgpu,
    pytest.mark.torch,
    pytest.mark.usefixtures("webgpu"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),  # torch.export internals
]


@pytest.fixture(scope="module")
def tiny_llama_exports() -> dict[int, onnx.ModelProto]:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 128, (1, 8))
    exports = {}
    for opset in (23, 24):
        program = torch.onnx.export(
            model, (ids,), kwargs={"use_cache": False}, dynamo=True, opset_version=opset
        )
        exports[opset] = program.model_proto
    return exports


@pytest.mark.parametrize("opset", [23, 24])
def test_tiny_llama_prediction_matches_session(
    opset: int, tiny_llama_exports: dict[int, onnx.ModelProto], webgpu_table: KernelTable
) -> None:
    model = tiny_llama_exports[opset]
    pred = predict_placement(model, webgpu_table)
    meas = measure_placement(model, "webgpu")
    assert meas.ep_node_count > 0
    predicted_cpu = collections.Counter(n.name for n in pred.nodes if n.placement == "cpu")
    measured_cpu = collections.Counter(n.source_name for n in meas.cpu_nodes)
    assert predicted_cpu == measured_cpu, (str(pred), meas.summary())
    assert len(pred.nodes) == len(meas.nodes)
    assert (pred.memcpy_from_host, pred.memcpy_to_host) == (
        meas.memcpy_from_host,
        meas.memcpy_to_host,
    )
