"""Real torch.onnx (dynamo) exports of tiny random-initialised models, for tests.

Llama-, Qwen- and Gemma-style decoders from transformers configs (random weights, never
downloaded) and a small CNN (Conv, BatchNorm, MaxPool, Flatten, Gemm). ``attention``
selects the decoders' attention implementation: "sdpa" exports ONNX ``Attention`` at
opset >= 23, "eager" plain MatMul/Softmax.
"""

from __future__ import annotations

__all__ = [
    "DECODERS",
    "export_dynamic_seq_proto",
    "export_program",
    "export_proto",
    "sample_inputs",
]

import functools
from typing import Any

import numpy as np
import onnx
import pytest

DECODERS = ("llama", "qwen", "gemma")
SEQ = 8


def _torch() -> Any:
    return pytest.importorskip("torch", reason="torch is needed for real exports")


def _decoder(kind: str, attention: str) -> Any:
    torch = _torch()
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    common: dict[str, Any] = dict(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation=attention,
    )
    if kind == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
    elif kind == "qwen":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common))
    elif kind == "gemma":
        model = transformers.GemmaForCausalLM(transformers.GemmaConfig(head_dim=16, **common))
    else:
        raise ValueError(kind)

    class Logits(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any) -> Any:
            return self.inner(input_ids=input_ids, use_cache=False).logits

    return Logits(model.eval()).eval()


def _cnn() -> Any:
    torch = _torch()
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * 4 * 4, 10),
    )
    with torch.no_grad():  # non-trivial BatchNorm statistics
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 1.5)
    return model.eval()


def sample_inputs(kind: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    if kind == "cnn":
        return {"x": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)}
    return {"input_ids": rng.integers(0, 128, (1, SEQ)).astype(np.int64)}


def export_program(kind: str, opset: int, attention: str = "sdpa") -> Any:
    """A fresh ``torch.onnx.ONNXProgram`` of the tiny model ``kind`` at ``opset``."""
    torch = _torch()
    if kind == "cnn":
        module, args, names = _cnn(), (torch.randn(2, 3, 16, 16),), ["x"]
    else:
        module, args, names = (
            _decoder(kind, attention),
            (torch.randint(0, 128, (1, SEQ)),),
            ["input_ids"],
        )
    program = torch.onnx.export(
        module, args, dynamo=True, opset_version=opset, input_names=names, verbose=False
    )
    return program


@functools.cache
def _cached(kind: str, opset: int, attention: str) -> bytes:
    return export_program(kind, opset, attention).model_proto.SerializeToString()


def export_proto(kind: str, opset: int, attention: str = "sdpa") -> onnx.ModelProto:
    """The exported ModelProto (cached per test session; a fresh copy each call)."""
    proto = onnx.ModelProto()
    proto.ParseFromString(_cached(kind, opset, attention))
    return proto


@functools.cache
def _cached_dynamic_seq(kind: str, opset: int, attention: str) -> bytes:
    torch = _torch()
    seq = torch.export.Dim("seq", min=2, max=64)
    program = torch.onnx.export(
        _decoder(kind, attention),
        (torch.randint(0, 128, (1, SEQ)),),
        dynamo=True,
        opset_version=opset,
        input_names=["input_ids"],
        dynamic_shapes=({1: seq},),
        verbose=False,
    )
    return program.model_proto.SerializeToString()


def export_dynamic_seq_proto(kind: str, opset: int, attention: str = "sdpa") -> onnx.ModelProto:
    """A decoder exported with a dynamic sequence length: its rotary tables (Cos, Sin,
    RotaryEmbedding) are computed in the graph, not folded (cached; a fresh copy)."""
    proto = onnx.ModelProto()
    proto.ParseFromString(_cached_dynamic_seq(kind, opset, attention))
    return proto
