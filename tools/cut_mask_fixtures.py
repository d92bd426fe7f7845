"""Cut the attention-mask subgraphs of real torch exports into small ONNX fixtures.

    PYTHONPATH=src python tools/cut_mask_fixtures.py [OUT_DIR]

Run it once per transformers release, with that release first on ``PYTHONPATH``
(``pip install --target DIR transformers==X``, then ``PYTHONPATH=DIR:src``; torch stays the
venv's), to add that release's spellings of the mask. For each case of :data:`CASES` it
builds a tiny random-initialised model from a config (2 layers, hidden 32; never downloaded
weights or configs), exports it with ``torch.onnx.export(..., dynamo=True)`` at opset
:data:`OPSET` with a dynamic batch and sequence (and past), finds the masks its attention
reads and writes the part of the graph that computes each (``extract_model``: its
ancestors, every graph input, the constants it reads) to
``OUT_DIR/<case>[-<n>]-tf<transformers version>.onnx`` (default ``tests/fusion/data/masks``).

- The mask of an sdpa export is input 3 of each ONNX ``Attention`` node; of an eager export,
  the addend of the ``Add`` (through a ``Cast``) that feeds each ``Softmax`` that is not the
  ``MatMul`` of queries and keys. An sdpa export whose ``Attention`` has no mask (``is_causal``
  only) has nothing to cut: the case is reported as such and no file is written.
- Each file's metadata records the case, the model family, the attention implementation,
  whether the model had ``attention_mask`` and a KV cache, the torch and transformers
  versions, the opset and ``expected``: what the model's mask is (``causal``,
  ``causal+padding``, ``window=W`` or ``window=W+padding``), set here from the config and
  the release (:meth:`Case.expected`), not from any proof. tests/fusion/test_mask_corpus.py checks that by running the fixture on
  ORT, and pins the proof's verdict on each.
- Node and value metadata (torch's stack traces name the exporting machine's paths) and doc
  strings are stripped.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir

from onnxscript_ep_passes.fusion.evaluate import extract_model

logger = logging.getLogger("cut_mask_fixtures")

OUT = Path(__file__).resolve().parent.parent / "tests" / "fusion" / "data" / "masks"
OPSET = 24
LAYERS = 2
VOCAB = 64
WINDOW = 4


@dataclass(frozen=True)
class Case:
    """One tiny export: ``family`` (llama or mistral), ``attention`` (sdpa or eager),
    whether it takes ``attention_mask`` and a KV cache."""

    name: str
    family: str
    attention: str
    mask: bool
    kv: bool

    def expected(self, release: tuple[int, ...]) -> str:
        """The mask the model has: its config's, except that Qwen2's sdpa path before
        transformers 4.53 ignores the sliding window (it warns "Sliding Window Attention is
        enabled but not implemented for `sdpa`"; measured: the 4.44.2 and 4.48.3 exports
        are causal, the 4.53.3 one has the window)."""
        window = self.family != "llama"
        if self.family == "qwen2" and self.attention == "sdpa" and release < (4, 53):
            window = False
        base = f"window={WINDOW}" if window else "causal"
        return base + ("+padding" if self.mask else "")


CASES = (
    Case("llama-sdpa-mask", "llama", "sdpa", mask=True, kv=False),
    Case("llama-sdpa-nomask", "llama", "sdpa", mask=False, kv=False),
    Case("llama-sdpa-kv", "llama", "sdpa", mask=True, kv=True),
    Case("llama-eager-mask", "llama", "eager", mask=True, kv=False),
    Case("llama-eager-kv", "llama", "eager", mask=True, kv=True),
    Case("mistral-sdpa-window4", "mistral", "sdpa", mask=True, kv=False),
    Case("mistral-eager-window4", "mistral", "eager", mask=True, kv=False),
    Case("mistral-sdpa-window4-kv", "mistral", "sdpa", mask=True, kv=True),
    Case("qwen2-sdpa-window4", "qwen2", "sdpa", mask=True, kv=False),
)
"""Llama (causal), Mistral and Qwen2 (a 4-token sliding window), sdpa and eager attention,
with and without ``attention_mask``, with and without a KV cache."""


def strip_provenance_of_nodes(piece: onnx.ModelProto) -> None:
    """Drop what the exporter attached to each node and value (torch's stack traces name
    the paths of the machine that exported), keeping the model's own metadata."""
    graphs = [piece.graph]
    while graphs:
        graph = graphs.pop()
        for value in [*graph.input, *graph.output, *graph.value_info, *graph.initializer]:
            del value.metadata_props[:]
        for node in graph.node:
            del node.metadata_props[:]
            node.doc_string = ""
            graphs.extend(a.g for a in node.attribute if a.HasField("g"))
            graphs.extend(g for a in node.attribute for g in a.graphs)
        del graph.metadata_props[:]


def _model(case: Case) -> Any:
    import torch
    import transformers

    torch.manual_seed(0)
    common: dict[str, Any] = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    if case.family == "llama":
        config = transformers.LlamaConfig(**common)
        cls = transformers.LlamaForCausalLM
    elif case.family == "qwen2":
        config = transformers.Qwen2Config(
            use_sliding_window=True, sliding_window=WINDOW, max_window_layers=0, **common
        )
        cls = transformers.Qwen2ForCausalLM
    else:
        config = transformers.MistralConfig(sliding_window=WINDOW, **common)
        cls = transformers.MistralForCausalLM
    config._attn_implementation = case.attention
    model = cls(config).eval()
    model.config._attn_implementation = case.attention
    return model


def _new_cache(config: Any) -> Any:
    import transformers

    try:
        return transformers.DynamicCache()
    except TypeError:
        return transformers.DynamicCache(config=config)


def _module(case: Case) -> Any:
    import torch

    model = _model(case)

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, input_ids: Any, *rest: Any) -> Any:
            mask = rest[0] if case.mask else None
            past = rest[1:] if case.mask else rest
            kwargs: dict[str, Any] = dict(input_ids=input_ids, attention_mask=mask)
            if case.kv:
                cache = _new_cache(model.config)
                for layer in range(LAYERS):
                    cache.update(past[2 * layer], past[2 * layer + 1], layer)
                kwargs.update(past_key_values=cache, use_cache=True)
            else:
                kwargs.update(use_cache=False)
            return self.inner(**kwargs).logits

    return Logits().eval()


def export(case: Case) -> onnx.ModelProto:
    """The dynamic-shape export of ``case`` (batch 2, sequence 3, past 5 as examples)."""
    import torch

    module = _module(case)
    batch, seq, past, kv_heads, head_dim = 2, 3, 5, 2, 8
    dim = torch.export.Dim
    batch_dim = dim("batch", min=1, max=64)
    seq_dim = dim("sequence_length", min=1, max=128)
    args: list[Any] = [torch.randint(0, VOCAB, (batch, seq))]
    names = ["input_ids"]
    shapes: list[Any] = [{0: batch_dim, 1: seq_dim}]
    total = past + seq if case.kv else seq
    if case.mask:
        args.append(torch.ones(batch, total, dtype=torch.int64))
        names.append("attention_mask")
        total_dim = dim("total_sequence_length", min=1, max=256) if case.kv else seq_dim
        shapes.append({0: batch_dim, 1: total_dim})
    if case.kv:
        past_dim = dim("past_sequence_length", min=1, max=128)
        for layer in range(LAYERS):
            for side in ("key", "value"):
                args.append(torch.randn(batch, kv_heads, past, head_dim))
                names.append(f"past_key_values.{layer}.{side}")
                shapes.append({0: batch_dim, 2: past_dim})
    program = torch.onnx.export(
        module,
        tuple(args),
        dynamo=True,
        opset_version=OPSET,
        input_names=names,
        output_names=["logits"],
        dynamic_shapes=(shapes[0], tuple(shapes[1:])) if shapes[1:] else (shapes[0],),
        verbose=False,
    )
    return program.model_proto


def _has_attention_matmul(value: ir.Value) -> bool:
    """Whether ``value`` depends on a MatMul of two computed values (queries by keys)."""
    stack, seen = [value], set()
    while stack:
        node = stack.pop().producer()
        if node is None or node in seen:
            continue
        seen.add(node)
        inputs = [v for v in node.inputs if v is not None]
        if node.op_type == "MatMul" and all(v.producer() is not None for v in inputs):
            return True
        stack.extend(inputs)
    return False


def masks_of(model: ir.Model) -> list[ir.Value]:
    """The distinct masks the attention of ``model`` reads (module docstring)."""
    masks: dict[ir.Value, None] = {}
    for node in model.graph:
        if node.op_type == "Attention" and len(node.inputs) > 3 and node.inputs[3] is not None:
            masks[node.inputs[3]] = None
        if node.op_type != "Softmax" or node.inputs[0] is None:
            continue
        add = node.inputs[0].producer()
        while add is not None and add.op_type == "Cast" and add.inputs[0] is not None:
            add = add.inputs[0].producer()
        if add is None or add.op_type != "Add":
            continue
        addends = [v for v in add.inputs if v is not None and not _has_attention_matmul(v)]
        if len(addends) == 1:
            masks[addends[0]] = None
    return list(masks)


def cut(proto: onnx.ModelProto) -> list[onnx.ModelProto]:
    """One model per distinct mask of ``proto``'s attention."""
    model = ir.from_proto(proto)
    return [extract_model(model, [mask], all_inputs=True) for mask in masks_of(model)]


def main(out: Path, names: Sequence[str] = ()) -> list[Path]:
    import torch
    import transformers

    out.mkdir(parents=True, exist_ok=True)
    written = []
    release = transformers.__version__
    numbers = tuple(int(part) for part in release.split(".")[:3] if part.isdigit())
    for case in CASES:
        if names and case.name not in names:
            continue
        try:
            proto = export(case)
        except Exception as error:  # a release that cannot export: say why
            cause = error.__cause__ or error
            why = " ".join(str(cause).split())[:400]
            logger.warning(
                "%s tf%s: export failed: %s: %s", case.name, release, type(cause).__name__, why
            )
            continue
        pieces = cut(proto)
        if not pieces:
            logger.warning(
                "%s tf%s: no mask to cut (Attention with is_causal only)", case.name, release
            )
            continue
        for index, piece in enumerate(pieces):
            meta = {
                "case": case.name,
                "family": case.family,
                "attention": case.attention,
                "attention_mask": str(case.mask).lower(),
                "kv_cache": str(case.kv).lower(),
                "source": "tools/cut_mask_fixtures.py",
                "torch": torch.__version__,
                "transformers": release,
                "opset": str(OPSET),
                "expected": case.expected(numbers),
            }
            strip_provenance_of_nodes(piece)
            onnx.helper.set_model_props(piece, meta)
            suffix = f"-{index}" if index else ""
            path = out / f"{case.name}{suffix}-tf{release}.onnx"
            onnx.save(piece, path)
            written.append(path)
            logger.info(
                "%s (%d bytes, expected %s)", path.name, path.stat().st_size, meta["expected"]
            )
    return written


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT, sys.argv[2:])
