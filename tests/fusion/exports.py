"""Tiny decoder exports with dynamic sequence, attention_mask and (optionally) a KV cache.

Random-weight Llama / Qwen3 / Gemma3 / Phi-3 from transformers configs (nothing
downloaded), exported with torch.onnx (dynamo) at a given opset: inputs ``input_ids``
(1, seq), ``attention_mask`` (1, past + seq) and, with ``kv=True``,
``past_key_values.{i}.key/value`` (1, 2, past, 16); outputs ``logits`` and, with a cache,
``present.{i}.key/value``. Cached per test session.
"""

from __future__ import annotations

__all__ = ["KINDS", "decoder_model", "decoder_proto"]

import functools
from typing import Any

import onnx
import pytest

KINDS = ("llama", "qwen3", "gemma3", "phi3")
LAYERS = 2


def decoder_model(kind: str) -> tuple[Any, Any]:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    common: dict[str, Any] = dict(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation="sdpa",
    )
    classes = {
        "llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig, {}),
        "qwen3": (transformers.Qwen3ForCausalLM, transformers.Qwen3Config, {"head_dim": 16}),
        "gemma3": (
            transformers.Gemma3ForCausalLM,
            transformers.Gemma3TextConfig,
            {"head_dim": 16},
        ),
        "phi3": (transformers.Phi3ForCausalLM, transformers.Phi3Config, {"pad_token_id": 0}),
    }
    model_class, config_class, extra = classes[kind]
    config = config_class(**common, **extra)
    return model_class(config).eval(), config


def _export(kind: str, opset: int, kv: bool) -> bytes:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model, config = decoder_model(kind)

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, input_ids: Any, attention_mask: Any, *past: Any) -> Any:
            if not kv:
                out = self.inner(
                    input_ids=input_ids, attention_mask=attention_mask, use_cache=False
                )
                return out.logits
            cache = transformers.DynamicCache(config=config)
            for i in range(LAYERS):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.inner(
                input_ids=input_ids,
                attention_mask=attention_mask,
                past_key_values=cache,
                use_cache=True,
            )
            present = [
                t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)
            ]
            return (out.logits, *present)

    past_len, seq = (3, 5) if kv else (0, 8)
    ids = torch.randint(0, 128, (1, seq))
    mask = torch.ones(1, past_len + seq, dtype=torch.int64)
    past = [torch.randn(1, 2, past_len, 16) for _ in range(2 * LAYERS)] if kv else []
    seq_dim = torch.export.Dim("seq", min=1 if kv else 2, max=64)
    names = ["input_ids", "attention_mask"]
    outputs = ["logits"]
    if kv:
        total_dim = torch.export.Dim("total", min=2, max=128)
        past_dim = torch.export.Dim("past", min=1, max=64)
        shapes: tuple[Any, ...] = (
            {1: seq_dim},
            {1: total_dim},
            tuple([{2: past_dim}] * (2 * LAYERS)),
        )
        for i in range(LAYERS):
            names += [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
            outputs += [f"present.{i}.key", f"present.{i}.value"]
    else:
        shapes = ({1: seq_dim}, {1: seq_dim})
    program = torch.onnx.export(
        Wrapper().eval(),
        (ids, mask, *past),
        dynamo=True,
        opset_version=opset,
        input_names=names,
        output_names=outputs,
        dynamic_shapes=shapes,
        verbose=False,
    )
    return program.model_proto.SerializeToString()


@functools.cache
def _cached(kind: str, opset: int, kv: bool) -> bytes:
    return _export(kind, opset, kv)


def decoder_proto(kind: str, opset: int, *, kv: bool = False) -> onnx.ModelProto:
    """A fresh copy of the export (see module docstring)."""
    proto = onnx.ModelProto()
    proto.ParseFromString(_cached(kind, opset, kv))
    return proto
