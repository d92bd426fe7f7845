"""Real torch.onnx (dynamo) exports of tiny random-initialised models, for tests.

Llama-, Qwen- and Gemma-style decoders from transformers configs (random weights, never
downloaded) and a small CNN (Conv, BatchNorm, MaxPool, Flatten, Gemm). ``attention``
selects the decoders' attention implementation: "sdpa" exports ONNX ``Attention`` at
opset >= 23, "eager" plain MatMul/Softmax. These have static shapes.

Dynamic-shape LLM exports (:func:`llm_export`, what deployments ship): tiny 4-layer
Llama, Qwen3, Gemma3 and Phi-3 ``*ForCausalLM`` models with inputs ``input_ids``
``[batch, sequence_length]`` and ``attention_mask`` ``[batch, sequence_length]``, output
``logits``; with ``kv_cache=True`` also ``past_key_values.<i>.key|value``
``[batch, kv_heads, past_sequence_length, head_dim]`` inputs, ``attention_mask`` over
``total_sequence_length`` and ``present.<i>.key|value`` outputs. Rules:

- torch 2.13 exports opsets up to 25 (above, it falls back to 18): a model at opset 25,
  26, 27 or 28 is the opset-24 export up-converted by ``onnx.version_converter`` (exact:
  no op the exports use changed meaning in 25..28; the result passes ``onnx.checker``
  full check). For 25 this is what torch itself exports: its opset-25 export of the
  dynamic Qwen3 had the same nodes (op types, names, inputs, attributes) and the same
  initializers as the up-converted 24 one (checked 2026-11-30, torch 2.13), and reusing
  the 24 export saves a torch export per model in CI.
- ``gemma3_wide`` is Gemma3 with its config's default sliding window (4096 tokens)
  instead of 64: the window cannot bind below 4096 tokens, so its attention is provably
  causal (the fusion tests need one Gemma3 whose attention fuses; ``gemma3``'s 64-token
  window must be refused). ``gemma3_w4`` has a 4-token window: it binds at test sizes
  (sequence 8-12, a past longer than the window), for the fused sliding-window attention.
- Exports are cached per test session, and on disk under ``.pytest_cache/torch_exports``
  (keyed by the text of the functions that build them and the torch/transformers versions; set
  ``ONNXSCRIPT_EP_PASSES_EXPORT_CACHE=0`` to disable the disk cache).
"""

from __future__ import annotations

__all__ = [
    "DECODERS",
    "LLMS",
    "export_dynamic_seq_proto",
    "export_program",
    "export_proto",
    "llm_export",
    "llm_inputs",
    "llm_model",
    "sample_inputs",
]

import functools
import hashlib
import inspect
import os
from pathlib import Path
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


# -- dynamic-shape LLM exports -----------------------------------------------------------

LLMS = ("llama", "qwen3", "gemma3", "phi3")
LLM_LAYERS = 4
TORCH_MAX_OPSET = 25
_BASE_OPSET = 24  # exported by torch; higher opsets are up-converted from it
_VOCAB = 128
_ROOT = Path(__file__).resolve().parent.parent


def llm_model(kind: str) -> Any:
    """The random-weight ``*ForCausalLM`` behind :func:`llm_export` (seeded: the same
    weights each call)."""
    return _llm(kind)


def _llm(kind: str) -> Any:
    torch = _torch()
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    common: dict[str, Any] = dict(
        vocab_size=_VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=LLM_LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        attn_implementation="sdpa",
    )
    if kind == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
    if kind == "qwen3":
        return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(head_dim=16, **common))
    if kind in ("gemma3", "gemma3_wide", "gemma3_w4"):
        window = {"gemma3": 64, "gemma3_wide": 4096, "gemma3_w4": 4}[kind]
        config = transformers.Gemma3TextConfig(head_dim=16, sliding_window=window, **common)
        return transformers.Gemma3ForCausalLM(config)
    if kind == "phi3":
        config = transformers.Phi3Config(pad_token_id=0, eos_token_id=1, **common)
        return transformers.Phi3ForCausalLM(config)
    if kind == "mistral_w4":
        config = transformers.MistralConfig(head_dim=16, sliding_window=4, **common)
        return transformers.MistralForCausalLM(config)
    raise ValueError(f"unknown LLM {kind!r}; one of {LLMS}, gemma3_wide, gemma3_w4 or mistral_w4")


def _llm_module(kind: str, kv_cache: bool) -> Any:
    torch = _torch()
    transformers = pytest.importorskip("transformers")
    model = _llm(kind).eval()
    config = model.config

    class CausalLM(torch.nn.Module):
        """Flat tensors in and out: logits (and the present keys/values)."""

        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, input_ids: Any, attention_mask: Any, *past: Any) -> Any:
            if not kv_cache:
                return self.inner(
                    input_ids=input_ids, attention_mask=attention_mask, use_cache=False
                ).logits
            cache = transformers.DynamicCache(config=config)
            for layer in range(LLM_LAYERS):
                cache.update(past[2 * layer], past[2 * layer + 1], layer)
            out = self.inner(
                input_ids=input_ids,
                attention_mask=attention_mask,
                past_key_values=cache,
                use_cache=True,
            )
            present = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    return CausalLM().eval(), config


def _llm_proto(kind: str, opset: int, kv_cache: bool) -> bytes:
    torch = _torch()
    module, config = _llm_module(kind, kv_cache)
    batch, seq, past = 2, 3, 5
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // 4
    kv_heads = config.num_key_value_heads
    dim = torch.export.Dim
    batch_dim = dim("batch", min=1, max=64)
    seq_dim = dim("sequence_length", min=1, max=256)
    ids = torch.randint(0, _VOCAB, (batch, seq))
    names = ["input_ids", "attention_mask"]
    outputs = ["logits"]
    if kv_cache:
        pasts = tuple(torch.randn(batch, kv_heads, past, head_dim) for _ in range(2 * LLM_LAYERS))
        args: tuple[Any, ...] = (ids, torch.ones(batch, past + seq, dtype=torch.int64), *pasts)
        past_dim = dim("past_sequence_length", min=1, max=256)
        total_dim = dim("total_sequence_length", min=1, max=512)
        shapes: tuple[Any, ...] = (
            {0: batch_dim, 1: seq_dim},
            {0: batch_dim, 1: total_dim},
            tuple({0: batch_dim, 2: past_dim} for _ in pasts),
        )
        kv = [f"{i}.{side}" for i in range(LLM_LAYERS) for side in ("key", "value")]
        names += [f"past_key_values.{n}" for n in kv]
        outputs += [f"present.{n}" for n in kv]
    else:
        args = (ids, torch.ones(batch, seq, dtype=torch.int64))
        shapes = ({0: batch_dim, 1: seq_dim}, {0: batch_dim, 1: seq_dim})
    program = torch.onnx.export(
        module,
        args,
        dynamo=True,
        opset_version=opset,
        input_names=names,
        output_names=outputs,
        dynamic_shapes=shapes,
        verbose=False,
    )
    return program.model_proto.SerializeToString()


def _disk_cache_path(key: str) -> Path | None:
    if os.environ.get("ONNXSCRIPT_EP_PASSES_EXPORT_CACHE") == "0":
        return None
    import torch
    import transformers

    digest = hashlib.sha256()
    for recipe in (_llm, _llm_module, _llm_proto):
        digest.update(inspect.getsource(recipe).encode())
    digest.update(f"{torch.__version__}|{transformers.__version__}|{key}".encode())
    return _ROOT / ".pytest_cache" / "torch_exports" / f"{key}-{digest.hexdigest()[:16]}.onnx"


@functools.cache
def _cached_llm(kind: str, opset: int, kv_cache: bool) -> bytes:
    if opset > _BASE_OPSET:
        import onnx.version_converter

        base = onnx.ModelProto()
        base.ParseFromString(_cached_llm(kind, _BASE_OPSET, kv_cache))
        return onnx.version_converter.convert_version(base, opset).SerializeToString()
    _torch()
    path = _disk_cache_path(f"{kind}-{opset}-{'kv' if kv_cache else 'dynamic'}")
    if path is not None and path.is_file():
        return path.read_bytes()
    data = _llm_proto(kind, opset, kv_cache)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return data


def llm_export(kind: str, opset: int, *, kv_cache: bool = False) -> onnx.ModelProto:
    """A dynamic-shape export of the tiny LLM ``kind`` at ``opset`` (module docstring).

    Cached; each call returns a fresh copy.
    """
    proto = onnx.ModelProto()
    proto.ParseFromString(_cached_llm(kind, opset, kv_cache))
    return proto


LLM_DIMS = {"batch": 2, "sequence_length": 3, "past_sequence_length": 5}


def llm_inputs(
    model: onnx.ModelProto, dims: dict[str, int] | None = None, *, seed: int = 0
) -> dict[str, np.ndarray]:
    """Inputs for an :func:`llm_export` model: random token ids, a mask of ones, random
    past keys/values; symbolic dims from ``dims`` (default :data:`LLM_DIMS`;
    ``total_sequence_length`` is past + sequence)."""
    sizes = dict(LLM_DIMS if dims is None else dims)
    sizes.setdefault(
        "total_sequence_length", sizes["past_sequence_length"] + sizes["sequence_length"]
    )
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        shape = [
            d.dim_value if d.HasField("dim_value") else sizes[d.dim_param]
            for d in value.type.tensor_type.shape.dim
        ]
        if value.name == "input_ids":
            feeds[value.name] = rng.integers(0, _VOCAB, shape).astype(np.int64)
        elif value.name == "attention_mask":
            feeds[value.name] = np.ones(shape, np.int64)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


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


FAMILIES = ("gpt2", "stablelm", "bert")
"""Other architectures than the decoders above (:func:`family_export`)."""


def _family(kind: str) -> Any:
    torch = _torch()
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    sizes: dict[str, Any] = dict(vocab_size=_VOCAB, attn_implementation="sdpa")
    layers = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=LLM_LAYERS)
    if kind == "gpt2":  # LayerNorm, learned positions, no rotary, gelu_new (tanh) written out
        config = transformers.GPT2Config(
            n_embd=64, n_layer=LLM_LAYERS, n_head=4, n_positions=256, **sizes
        )
        return transformers.GPT2LMHeadModel(config)
    if kind == "stablelm":  # LayerNorm, partial rotary
        config = transformers.StableLmConfig(
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            partial_rotary_factor=0.25,
            **layers,
            **sizes,
        )
        return transformers.StableLmForCausalLM(config)
    if kind == "bert":  # bidirectional encoder, padding mask, exact Gelu
        config = transformers.BertConfig(
            num_attention_heads=4, max_position_embeddings=256, **layers, **sizes
        )
        return transformers.BertModel(config)
    raise ValueError(f"unknown family {kind!r}; one of {FAMILIES}")


def family_outputs(kind: str, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """What the torch model behind :func:`family_export` computes for ``feeds`` (the same
    seeded weights): the reference where ORT's CPU EP cannot run the export."""
    torch = _torch()
    model = _family(kind).eval()
    ids, mask = (torch.from_numpy(feeds[n]) for n in ("input_ids", "attention_mask"))
    with torch.no_grad():
        if kind == "bert":
            return model(input_ids=ids, attention_mask=mask)[0].numpy()
        return model(input_ids=ids, attention_mask=mask, use_cache=False).logits.numpy()


@functools.cache
def _cached_family(kind: str, opset: int) -> bytes:
    torch = _torch()
    inner = _family(kind).eval()

    class Flat(torch.nn.Module):
        """input_ids and attention_mask in; logits (an encoder: its last hidden state) out."""

        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            if kind == "bert":
                return self.inner(input_ids=input_ids, attention_mask=attention_mask)[0]
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False
            ).logits

    dim = torch.export.Dim
    batch, seq = dim("batch", min=1, max=64), dim("sequence_length", min=1, max=256)
    program = torch.onnx.export(
        Flat().eval(),
        (torch.randint(0, _VOCAB, (2, 5)), torch.ones(2, 5, dtype=torch.int64)),
        dynamo=True,
        opset_version=opset,
        input_names=["input_ids", "attention_mask"],
        output_names=["logits"],
        dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}),
        verbose=False,
    )
    return program.model_proto.SerializeToString()


def family_export(kind: str, opset: int) -> onnx.ModelProto:
    """A dynamic batch/sequence export of the tiny ``kind`` of :data:`FAMILIES`
    (random init; cached, a fresh copy each call)."""
    proto = onnx.ModelProto()
    proto.ParseFromString(_cached_family(kind, opset))
    return proto
