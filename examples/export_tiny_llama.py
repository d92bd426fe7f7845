"""Export a tiny Llama decoder (random weights, 2 layers) with torch.onnx at opset 24.

What torch 2.13's dynamo exporter emits for a real decoder at opset 24 (Reshape,
Transpose, Unsqueeze, Cast and Attention at schema version 24), small enough to try every
command on. The weights are random (a transformers config, nothing downloaded).

Usage: python examples/export_tiny_llama.py OUT.onnx   (needs the torch extra; ``--help``
answers before torch is imported and writes nothing)
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def _arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("out", nargs="?", default="llama24.onnx", help="the model to write")
    return parser.parse_args(argv)


def _logits(inner: Any) -> Any:
    """``inner`` (a ``*ForCausalLM``) as a module from token ids to logits, no cache."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.inner(input_ids=input_ids, use_cache=False).logits

    return Logits()


def main(argv: list[str] | None = None) -> None:
    out = Path(_arguments(argv).out)
    import torch
    import transformers

    out.parent.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation="sdpa",
    )
    model = _logits(transformers.LlamaForCausalLM(config).eval()).eval()
    program = torch.onnx.export(
        model,
        (torch.randint(0, 128, (1, 8)),),
        dynamo=True,
        opset_version=24,
        input_names=["input_ids"],
        verbose=False,
    )
    program.save(str(out))
    print(f"wrote {out} (opset 24)")


if __name__ == "__main__":
    main()
