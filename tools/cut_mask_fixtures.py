"""Cut the attention-mask subgraphs of real torch exports into small ONNX fixtures.

    PYTHONPATH=src:. python tools/cut_mask_fixtures.py [OUT_DIR]

For each case of :data:`CASES` (tiny random-initialised models of tests/torch_models.py,
never downloaded weights) this exports the model with the installed torch and
transformers, takes the mask input of its ``Attention`` nodes (each distinct mask value),
and writes the part of the graph that computes it (``extract_model``: its ancestors, every
graph input, the constants it reads) to ``OUT_DIR/<case>-tf<transformers version>.onnx``
(default ``tests/fusion/data/masks``). The file's metadata records the case, the export
(``source``), the torch and transformers versions, the opset and the verdict the case is
known to have (``expected``: ``causal`` or ``window=W``), set here from what the model is,
not from the proof; tests/fusion/test_mask_corpus.py checks the proof against it. Run it
once per transformers release to add that release's spellings (install one next to the
venv: ``pip install --no-deps --target DIR transformers==X`` and put DIR first on
PYTHONPATH).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import onnx
import onnx_ir as ir

from onnxscript_ep_passes.fusion.evaluate import extract_model

OUT = Path(__file__).resolve().parent.parent / "tests" / "fusion" / "data" / "masks"


def _cases() -> dict[str, tuple[str, Callable[[], onnx.ModelProto], str]]:
    from tests.torch_models import export_dynamic_seq_proto, llm_export

    return {
        "llama-mask": ("llm_export('llama', 24)", lambda: llm_export("llama", 24), "causal"),
        "qwen3-kv": (
            "llm_export('qwen3', 24, kv_cache=True)",
            lambda: llm_export("qwen3", 24, kv_cache=True),
            "causal",
        ),
        "mistral-window4": (
            "llm_export('mistral_w4', 24)",
            lambda: llm_export("mistral_w4", 24),
            "window=4",
        ),
        "llama-nomask": (
            "export_dynamic_seq_proto('llama', 24)",
            lambda: export_dynamic_seq_proto("llama", 24),
            "causal",
        ),
    }


CASES = ("llama-mask", "qwen3-kv", "mistral-window4", "llama-nomask")
"""The cases: a decoder with attention_mask, with a KV cache, with a 4-token sliding
window, and without attention_mask (transformers 5.24 detects packed sequences there)."""


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


def cut(proto: onnx.ModelProto) -> list[onnx.ModelProto]:
    """One model per distinct mask of ``proto``'s Attention nodes."""
    model = ir.from_proto(proto)
    masks: dict[ir.Value, None] = {}
    for node in model.graph:
        if node.op_type == "Attention" and len(node.inputs) > 3 and node.inputs[3] is not None:
            masks[node.inputs[3]] = None
    return [extract_model(model, [mask], all_inputs=True) for mask in masks]


def main(out: Path) -> list[Path]:
    import torch
    import transformers

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in CASES:
        source, export, expected = _cases()[name]
        proto = export()
        opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
        for index, piece in enumerate(cut(proto)):
            meta = {
                "case": name,
                "source": f"tests/torch_models.py {source}",
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "opset": str(opset),
                "expected": expected,
            }
            strip_provenance_of_nodes(piece)
            onnx.helper.set_model_props(piece, meta)
            suffix = f"-{index}" if index else ""
            path = out / f"{name}{suffix}-tf{transformers.__version__}.onnx"
            onnx.save(piece, path)
            written.append(path)
            print(f"{path} ({path.stat().st_size} bytes, expected {expected})")
    return written


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
