"""The ORT behaviour the sliding-window fusion relies on (fusion/attention.py).

``com.microsoft::GroupQueryAttention`` with ``local_window_size = W`` lets query ``i``
(absolute position ``past + i``) see key ``j`` exactly when ``past + i - W < j <= past + i``
(HF's window of ``W`` tokens); ``W - 1`` and ``W + 1`` do not. Checked against a numpy
reference on ORT's CPU EP and on the WebGPU plugin EP (GroupQueryAttention placed on it),
for prefill longer than the window and for decode and chunks with a past beyond it.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tests.e2e.helpers import run_on_webgpu

HEADS, KV_HEADS, HEAD = 4, 2, 16
WINDOW = 4
SIZES = [(10, 0), (11, 0), (1, 9), (3, 7), (4, 5)]  # (new tokens, past tokens)


def _gqa(window: int) -> onnx.ModelProto:
    def info(name: str, dtype: int, shape: list) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, dtype, shape)

    inputs = [
        info("q", TensorProto.FLOAT, [1, "s", HEADS * HEAD]),
        info("k", TensorProto.FLOAT, [1, "s", KV_HEADS * HEAD]),
        info("v", TensorProto.FLOAT, [1, "s", KV_HEADS * HEAD]),
        info("past_key", TensorProto.FLOAT, [1, KV_HEADS, "p", HEAD]),
        info("past_value", TensorProto.FLOAT, [1, KV_HEADS, "p", HEAD]),
        info("seqlens_k", TensorProto.INT32, [1]),
        info("total", TensorProto.INT32, []),
    ]
    node = helper.make_node(
        "GroupQueryAttention",
        [i.name for i in inputs],
        ["y", "present_key", "present_value"],
        domain="com.microsoft",
        num_heads=HEADS,
        kv_num_heads=KV_HEADS,
        local_window_size=window,
    )
    outputs = [info(n, TensorProto.FLOAT, None) for n in ("y", "present_key", "present_value")]
    graph = helper.make_graph([node], "gqa", inputs, outputs)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def _feeds(seq: int, past: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seq * 100 + past)
    shapes = {
        "q": (1, seq, HEADS * HEAD),
        "k": (1, seq, KV_HEADS * HEAD),
        "v": (1, seq, KV_HEADS * HEAD),
        "past_key": (1, KV_HEADS, past, HEAD),
        "past_value": (1, KV_HEADS, past, HEAD),
    }
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    feeds["seqlens_k"] = np.array([past + seq - 1], np.int32)
    feeds["total"] = np.array(past + seq, np.int32)
    return feeds


def _reference(feeds: dict[str, np.ndarray]) -> np.ndarray:
    """Attention where query ``i`` sees keys ``past + i - WINDOW < j <= past + i``."""
    seq, past = feeds["q"].shape[1], feeds["past_key"].shape[2]

    def heads(x: np.ndarray, count: int) -> np.ndarray:
        return x.reshape(1, seq, count, HEAD).transpose(0, 2, 1, 3)

    group = HEADS // KV_HEADS
    key = np.repeat(np.concatenate([feeds["past_key"], heads(feeds["k"], KV_HEADS)], 2), group, 1)
    val = np.repeat(np.concatenate([feeds["past_value"], heads(feeds["v"], KV_HEADS)], 2), group, 1)
    scores = heads(feeds["q"], HEADS) @ key.transpose(0, 1, 3, 2) / np.sqrt(HEAD)
    i = past + np.arange(seq)[:, None]
    j = np.arange(past + seq)[None, :]
    scores = np.where((j <= i) & (j > i - WINDOW), scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return (weights @ val).transpose(0, 2, 1, 3).reshape(1, seq, HEADS * HEAD)


def _matches(outputs: list[np.ndarray], feeds: dict[str, np.ndarray]) -> bool:
    return bool(np.allclose(outputs[0], _reference(feeds), rtol=1e-4, atol=1e-4))


def test_local_window_size_w_is_a_window_of_w_tokens_on_cpu() -> None:
    for window, expected in ((WINDOW, True), (WINDOW - 1, False), (WINDOW + 1, False)):
        session = ort.InferenceSession(
            _gqa(window).SerializeToString(), providers=["CPUExecutionProvider"]
        )
        for seq, past in SIZES:
            feeds = _feeds(seq, past)
            assert _matches(session.run(None, feeds), feeds) is expected, (window, seq, past)


@pytest.mark.webgpu
@pytest.mark.usefixtures("webgpu")
def test_local_window_size_w_is_a_window_of_w_tokens_on_webgpu() -> None:
    for seq, past in SIZES:
        feeds = _feeds(seq, past)
        run = run_on_webgpu(_gqa(WINDOW), feeds)
        assert not run.cpu_nodes, run.cpu_summary()
        assert _matches(run.outputs, feeds), (seq, past)
