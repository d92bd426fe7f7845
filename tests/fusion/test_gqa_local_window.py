"""The ORT behaviour the sliding-window fusion relies on (fusion/attention.py).

``com.microsoft::GroupQueryAttention`` with ``local_window_size = W`` lets query ``i``
(absolute position ``past + i``) see key ``j`` exactly when ``past + i - W < j <= past + i``
(HF's window of ``W`` tokens); ``W - 1`` and ``W + 1`` do not. Checked against a numpy
reference on ORT's CPU EP and on the WebGPU plugin EP (GroupQueryAttention placed on it),
for prefill longer than the window and for decode and chunks with a past beyond it.

WebGPU's kernel is wrong for a first prompt of 32 tokens or more when no window binds (the
reason fusion/verify.py checks a 40-token prompt); exact with a binding window there.

The padding goes in as ``attention_bias`` (0 / lowest float over ``[B, 1, S, total]``) with
``seqlens_k = total - 1`` on every row: then a left-padded row equals the reference at
every query that sees a key, with and without the window, prefill, chunk and decode.
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


def _gqa(window: int, bias: bool = False) -> onnx.ModelProto:
    def info(name: str, dtype: int, shape: list) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, dtype, shape)

    inputs = [
        info("q", TensorProto.FLOAT, ["b", "s", HEADS * HEAD]),
        info("k", TensorProto.FLOAT, ["b", "s", KV_HEADS * HEAD]),
        info("v", TensorProto.FLOAT, ["b", "s", KV_HEADS * HEAD]),
        info("past_key", TensorProto.FLOAT, ["b", KV_HEADS, "p", HEAD]),
        info("past_value", TensorProto.FLOAT, ["b", KV_HEADS, "p", HEAD]),
        info("seqlens_k", TensorProto.INT32, ["b"]),
        info("total", TensorProto.INT32, []),
    ]
    names = [i.name for i in inputs]
    if bias:  # inputs 7-9 (cos, sin, position_ids) absent
        inputs.append(info("attention_bias", TensorProto.FLOAT, ["b", 1, "s", "t"]))
        names += ["", "", "", "attention_bias"]
    node = helper.make_node(
        "GroupQueryAttention",
        names,
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


def _feeds(seq: int, past: int, batch: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seq * 100 + past)
    shapes = {
        "q": (batch, seq, HEADS * HEAD),
        "k": (batch, seq, KV_HEADS * HEAD),
        "v": (batch, seq, KV_HEADS * HEAD),
        "past_key": (batch, KV_HEADS, past, HEAD),
        "past_value": (batch, KV_HEADS, past, HEAD),
    }
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    feeds["seqlens_k"] = np.full([batch], past + seq - 1, np.int32)
    feeds["total"] = np.array(past + seq, np.int32)
    return feeds


def _padded(seq: int, past: int, batch: int, window: int) -> tuple[dict, np.ndarray, np.ndarray]:
    """Feeds with the last row's first 3 tokens padded (as attention_bias), the
    reference and which queries see a key."""
    feeds = _feeds(seq, past, batch)
    mask = np.ones((batch, past + seq), bool)
    mask[-1, :3] = False
    bias = np.where(mask, 0, np.finfo(np.float32).min).astype(np.float32)
    feeds["attention_bias"] = np.ascontiguousarray(
        np.broadcast_to(bias[:, None, None, :], (batch, 1, seq, past + seq))
    )
    expected, sees = _reference(feeds, window, mask)
    return feeds, expected, sees


def _reference(
    feeds: dict[str, np.ndarray], window: int = WINDOW, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Attention where query ``i`` sees keys ``past + i - window < j <= past + i`` (no window
    when ``window <= 0``) with ``mask[b, j]``; and which queries see any key."""
    batch, seq = feeds["q"].shape[:2]
    past = feeds["past_key"].shape[2]

    def heads(x: np.ndarray, count: int) -> np.ndarray:
        return x.reshape(batch, seq, count, HEAD).transpose(0, 2, 1, 3)

    group = HEADS // KV_HEADS
    key = np.repeat(np.concatenate([feeds["past_key"], heads(feeds["k"], KV_HEADS)], 2), group, 1)
    val = np.repeat(np.concatenate([feeds["past_value"], heads(feeds["v"], KV_HEADS)], 2), group, 1)
    scores = heads(feeds["q"], HEADS) @ key.transpose(0, 1, 3, 2) / np.sqrt(HEAD)
    i = past + np.arange(seq)[:, None]
    j = np.arange(past + seq)[None, :]
    allowed = (j <= i) & ((j > i - window) if window > 0 else True)
    allowed = allowed[None, None] & (True if mask is None else mask[:, None, None, :])
    sees = allowed.any(-1)[:, 0]  # [batch, seq]
    scores = np.where(allowed, scores, -np.inf)
    with np.errstate(invalid="ignore"):  # queries that see no key: NaN, not compared
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
    out = (weights @ val).transpose(0, 2, 1, 3).reshape(batch, seq, HEADS * HEAD)
    return out, sees


def _matches(outputs: list[np.ndarray], feeds: dict[str, np.ndarray]) -> bool:
    return bool(np.allclose(outputs[0], _reference(feeds)[0], rtol=1e-4, atol=1e-4))


PADDED = [(8, 0, 2), (12, 0, 2), (3, 6, 1), (1, 9, 2)]  # (new tokens, past, batch)


@pytest.mark.parametrize("window", [-1, WINDOW])
def test_padding_as_attention_bias_is_exact_at_queries_that_see_a_key_on_cpu(
    window: int,
) -> None:
    session = ort.InferenceSession(
        _gqa(window, bias=True).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    for seq, past, batch in PADDED:
        feeds, expected, sees = _padded(seq, past, batch, window)
        (actual, *_) = session.run(None, feeds)
        np.testing.assert_allclose(actual[sees], expected[sees], rtol=1e-4, atol=1e-4)


@pytest.mark.webgpu
@pytest.mark.usefixtures("webgpu")
@pytest.mark.parametrize("window", [-1, WINDOW])
def test_padding_as_attention_bias_is_exact_at_queries_that_see_a_key_on_webgpu(
    window: int,
) -> None:
    for seq, past, batch in PADDED:
        feeds, expected, sees = _padded(seq, past, batch, window)
        run = run_on_webgpu(_gqa(window, bias=True), feeds)
        assert not run.cpu_nodes, run.cpu_summary()
        np.testing.assert_allclose(run.outputs[0][sees], expected[sees], rtol=1e-4, atol=1e-4)


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


@pytest.mark.webgpu
@pytest.mark.usefixtures("webgpu")
def test_webgpu_first_prompts_of_32_tokens_are_exact_only_with_a_binding_window() -> None:
    for window, seq, exact in ((-1, 31, True), (-1, 40, False), (64, 40, False), (4, 40, True)):
        feeds = _feeds(seq, 0)
        run = run_on_webgpu(_gqa(window), feeds)
        close = np.allclose(run.outputs[0], _reference(feeds, window)[0], rtol=1e-4, atol=1e-4)
        assert close is exact, (window, seq)
