"""Real torch.onnx (dynamo) exports of tiny random-initialised encoders without a mask.

- ``vit``: transformers ``ViTModel`` without its pooler (8x8 patches of a square image:
  ``tokens = (side / 8) ** 2 + 1`` with the CLS token; 17 tokens: 32x32 images, 37: 48x48),
  input ``pixel_values`` ``[batch, 3, side, side]``;
- ``whisper_encoder``: transformers ``WhisperEncoder`` (16 mel bins; ``tokens`` positions,
  ``2 * tokens`` frames in), input ``input_features`` ``[batch, 16, 2 * tokens]``.

Both have a dynamic batch, output ``last_hidden_state`` and random weights (seeded, never
downloaded); their sequence length is fixed by the architecture (``tokens``: below 32 and
from 32 on, where lavapipe's MultiHeadAttention was measured wrong). Exports are cached per
test session (:func:`encoder_export` returns a fresh copy).
"""

from __future__ import annotations

__all__ = ["ENCODERS", "encoder_export", "encoder_inputs", "encoder_outputs"]

import functools
from typing import Any

import numpy as np
import onnx
import pytest

ENCODERS = ("vit", "whisper_encoder")
LAYERS = 2
_INPUTS = {"vit": "pixel_values", "whisper_encoder": "input_features"}


def _shape(kind: str, tokens: int) -> tuple[int, ...]:
    if kind == "vit":
        side = 8 * round((tokens - 1) ** 0.5)
        if (side // 8) ** 2 + 1 != tokens:
            raise ValueError(f"a ViT has a square number of patches + 1 tokens, not {tokens}")
        return (3, side, side)
    return (16, 2 * tokens)


def _model(kind: str, tokens: int) -> Any:
    torch = pytest.importorskip("torch", reason="torch is needed for real exports")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    common: dict[str, Any] = dict(attn_implementation="sdpa")
    if kind == "vit":
        config = transformers.ViTConfig(
            hidden_size=64,
            num_hidden_layers=LAYERS,
            num_attention_heads=4,
            intermediate_size=128,
            image_size=_shape(kind, tokens)[-1],
            patch_size=8,
            **common,
        )
        return transformers.ViTModel(config, add_pooling_layer=False).eval()
    if kind == "whisper_encoder":
        config = transformers.WhisperConfig(
            d_model=64,
            encoder_layers=LAYERS,
            decoder_layers=1,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            num_mel_bins=16,
            max_source_positions=tokens,
            vocab_size=128,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=3,
            **common,
        )
        return transformers.models.whisper.modeling_whisper.WhisperEncoder(config).eval()
    raise ValueError(f"unknown encoder {kind!r}; one of {ENCODERS}")


def encoder_inputs(kind: str, tokens: int, batch: int = 2, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float inputs of ``kind`` with ``tokens`` tokens for a batch of ``batch``."""
    rng = np.random.default_rng(seed)
    shape = (batch, *_shape(kind, tokens))
    return {_INPUTS[kind]: rng.standard_normal(shape).astype(np.float32)}


def encoder_outputs(kind: str, tokens: int, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """What the torch model behind :func:`encoder_export` computes (``last_hidden_state``)."""
    import torch

    with torch.no_grad():
        return _model(kind, tokens)(torch.from_numpy(feeds[_INPUTS[kind]]))[0].numpy()


@functools.cache
def _cached(kind: str, tokens: int, opset: int) -> bytes:
    torch = pytest.importorskip("torch", reason="torch is needed for real exports")
    inner = _model(kind, tokens)

    class Flat(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: Any) -> Any:
            return self.inner(x)[0]

    name = _INPUTS[kind]
    example = torch.from_numpy(encoder_inputs(kind, tokens)[name])
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.onnx.export(
        Flat().eval(),
        (example,),
        dynamo=True,
        opset_version=opset,
        input_names=[name],
        output_names=["last_hidden_state"],
        dynamic_shapes=({0: batch},),
        verbose=False,
    )
    return program.model_proto.SerializeToString()


def encoder_export(kind: str, tokens: int, opset: int = 23) -> onnx.ModelProto:
    """A dynamic-batch export of the tiny ``kind`` of :data:`ENCODERS` with ``tokens``
    tokens (a fresh copy)."""
    proto = onnx.ModelProto()
    proto.ParseFromString(_cached(kind, tokens, opset))
    return proto
