"""The mask proof on the committed corpus of mask subgraphs cut from real exports.

Each file of tests/fusion/data/masks was cut by tools/cut_mask_fixtures.py from a tiny
torch export made with the transformers release in its name and metadata; its metadata's
``expected`` (``causal`` or ``window=W``) is what the exported model is. The proof must
give exactly that, so a change to the proof that loses a release's spelling fails here
without torch or that release installed.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.fusion.mask_proof import prove_causal_mask

CORPUS = sorted((Path(__file__).parent / "data" / "masks").glob("*.onnx"))


def test_the_corpus_covers_two_releases_and_every_case() -> None:
    metas = [{p.key: p.value for p in onnx.load(str(f)).metadata_props} for f in CORPUS]
    assert {m["transformers"] for m in metas} >= {"5.23.0", "5.24.0"}
    assert {m["case"] for m in metas} >= {"llama-mask", "qwen3-kv", "mistral-window4"}
    assert all(m["source"].startswith("tests/torch_models.py ") for m in metas)


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_each_mask_of_the_corpus_is_proven_as_its_model_is(path: Path) -> None:
    proto = onnx.load(str(path))
    meta = {p.key: p.value for p in proto.metadata_props}
    model = ir.from_proto(proto)
    (mask,) = model.graph.outputs
    window = prove_causal_mask(model, mask, max_length=4096)
    expected = meta["expected"]
    assert (f"window={window}" if window else "causal") == expected, meta
