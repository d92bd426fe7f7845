"""The mask proof on the committed corpus of mask subgraphs cut from real exports.

Each file of tests/fusion/data/masks was cut by tools/cut_mask_fixtures.py from a tiny
torch export made with the transformers release in its name and metadata; its metadata's
``expected`` (``causal``, ``window=W``, each ``+padding`` with ``attention_mask``) is what
the exported model's mask is, set from its config. Here, without torch or that release:

- every fixture is run on ORT over an exhaustive small domain (sequence 1-6, or 1-4 and past
  0-3 with a KV cache, every 0/1 ``attention_mask`` row of the total length as its own batch row)
  and must compute exactly the reference mask of ``expected``, so the metadata is true;
- the proof's verdict on every fixture is pinned (:data:`REFUSED`): proven as ``expected``
  (and that proven mask is then checked on ORT as above, so a pin cannot pass on a wrong
  proof), or refused with the pinned reason. A refusal of a mask that is in fact the
  standard one is an ``xfail(strict=True)``: it fails the run the day the proof learns
  that spelling, to move it to the proven side.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest

from onnxscript_ep_passes.fusion.attention_match import RefusedError
from onnxscript_ep_passes.fusion.mask_proof import prove_causal_mask

CORPUS = sorted((Path(__file__).parent / "data" / "masks").glob("*.onnx"))

REFUSED: dict[str, str] = {}
"""Fixture stem -> the refusal pinned for it (a regex searched in ``message | detail`` of the
RefusedError), a strict expected failure; the other fixtures are proven as their
``expected``. Empty: every fixture, 4.44 to 5.24, is proven."""


def _meta(proto: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in proto.metadata_props}


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:3])


def _reference(verdict: str, mask_rows: np.ndarray, seq: int, past: int) -> np.ndarray:
    """``[B, S, P + S]``: query ``i`` sees key ``j`` (module docstring of mask_proof)."""
    total = past + seq
    i = np.arange(seq)[:, None]
    j = np.arange(total)[None, :]
    allowed = j <= past + i
    found = re.fullmatch(r"window=(\d+)(\+padding)?|causal(\+padding)?", verdict)
    assert found is not None, verdict
    if found.group(1):
        allowed = allowed & (j > past + i - int(found.group(1)))
    if verdict.endswith("+padding"):
        return allowed[None] & (mask_rows[:, None, :] != 0)
    return np.broadcast_to(allowed[None], (mask_rows.shape[0], seq, total))


def _feeds(proto: onnx.ModelProto, rows: np.ndarray, seq: int, past: int) -> dict:
    batch = rows.shape[0]
    feeds = {}
    for value in proto.graph.input:
        dims = [
            d.dim_value if d.HasField("dim_value") else None
            for d in value.type.tensor_type.shape.dim
        ]
        if value.name == "attention_mask":
            feeds[value.name] = rows.astype(np.int64)
        elif value.name == "input_ids":
            feeds[value.name] = np.zeros((batch, seq), np.int64)
        elif "past" in value.name and len(dims) == 4:
            feeds[value.name] = np.zeros((batch, dims[1] or 2, past, dims[3] or 8), np.float32)
        else:
            raise AssertionError(f"input {value.name!r} has no role in the corpus check")
    return feeds


def _domain(proto: onnx.ModelProto):
    names = {v.name for v in proto.graph.input}
    kv = any("past" in n for n in names)
    for seq, past in itertools.product(range(1, 5 if kv else 7), range(4 if kv else 1)):
        total = seq + past
        if "attention_mask" in names:
            rows = np.array(list(itertools.product((0, 1), repeat=total)), np.int64)
        else:
            rows = np.ones((3, total), np.int64)
        yield seq, past, rows


def check_on_ort(proto: onnx.ModelProto, verdict: str) -> None:
    """The fixture's mask equals the reference of ``verdict`` on every input of the domain
    (in chunks of the batch where the export fixed it)."""
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    ids = next(v for v in proto.graph.input if v.name == "input_ids").type.tensor_type.shape
    static = ids.dim[0].dim_value if ids.dim[0].HasField("dim_value") else 0
    for seq, past, every_row in _domain(proto):
        chunk = static or len(every_row)
        for start in range(0, len(every_row), chunk):
            rows = every_row[start : start + chunk]
            rows = np.concatenate([rows, np.repeat(rows[:1], chunk - len(rows), 0)])
            _check_rows(session, proto, verdict, rows, seq, past)


def _check_rows(
    session: ort.InferenceSession,
    proto: onnx.ModelProto,
    verdict: str,
    rows: np.ndarray,
    seq: int,
    past: int,
) -> None:
    (out,) = session.run(None, _feeds(proto, rows, seq, past))
    if out.dtype == np.bool_:
        allowed = out
    else:
        allowed = out == 0
        assert np.all(allowed | (out <= np.finfo(np.float32).min / 2)), "not 0 / -inf"
    allowed = allowed.reshape((1,) * (4 - allowed.ndim) + allowed.shape)
    allowed = np.broadcast_to(allowed, (len(rows), allowed.shape[1], seq, seq + past))
    want = _reference(verdict, rows, seq, past)
    for head in range(allowed.shape[1]):
        bad = np.argwhere(allowed[:, head] != want)
        assert bad.size == 0, (
            f"{verdict}: sequence {seq}, past {past}: differs at (row, query, key) "
            f"{bad[:3].tolist()} (rows {rows[bad[:3, 0]].tolist()})"
        )


def test_the_corpus_covers_five_releases_both_attentions_masks_windows_and_caches() -> None:
    metas = [_meta(onnx.load(str(f))) for f in CORPUS]
    releases = {m["transformers"] for m in metas}
    assert len({r for r in releases if (4, 40) <= _release(r) <= (5, 24, 99)}) >= 5, releases
    assert any(_release(r) < (4, 50) for r in releases) and "5.24.0" in releases
    assert {m["attention"] for m in metas} == {"sdpa", "eager"}
    assert {m["attention_mask"] for m in metas} == {"true", "false"}
    assert {m["kv_cache"] for m in metas} == {"true", "false"}
    assert any(m["expected"].startswith("window=") for m in metas)
    assert all(m["source"] == "tools/cut_mask_fixtures.py" and m["torch"] for m in metas)
    assert set(REFUSED) <= {f.stem for f in CORPUS}


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_each_fixture_computes_the_mask_its_model_has(path: Path) -> None:
    proto = onnx.load(str(path))
    check_on_ort(proto, _meta(proto)["expected"])


def _proof_cases() -> list:
    cases = []
    for path in CORPUS:
        reason = REFUSED.get(path.stem)
        marks = (
            []
            if reason is None
            else [pytest.mark.xfail(strict=True, raises=RefusedError, reason=reason)]
        )
        cases.append(pytest.param(path, reason, id=path.stem, marks=marks))
    return cases


@pytest.mark.parametrize(("path", "refusal"), _proof_cases())
def test_the_proof_gives_each_fixture_its_pinned_verdict(path: Path, refusal: str | None) -> None:
    proto = onnx.load(str(path))
    meta = _meta(proto)
    model = ir.from_proto(proto)
    (mask,) = model.graph.outputs
    try:
        window = prove_causal_mask(model, mask, max_length=4096)
    except RefusedError as error:
        said = f"{error} | {error.detail}"
        if refusal is None or re.search(refusal, said) is None:
            raise AssertionError(f"refused, not as pinned ({refusal!r}): {said}") from error
        raise
    padding = "+padding" if any(v.name == "attention_mask" for v in model.graph.inputs) else ""
    verdict = (f"window={window}" if window else "causal") + padding
    assert verdict == meta["expected"], meta
    check_on_ort(proto, verdict)


@pytest.mark.parametrize("wrong", ["causal", "window=4+padding", "window=5+padding"])
def test_the_ort_check_tells_a_wrong_verdict(wrong: str) -> None:
    """The check a proven verdict gets is not vacuous: on a causal+padding mask it fails a
    verdict that drops the padding, or adds a window of 4 or 5 tokens (both bind in the
    domain)."""
    path = next(p for p in CORPUS if _meta(onnx.load(str(p)))["expected"] == "causal+padding")
    with pytest.raises(AssertionError, match="differs at"):
        check_on_ort(onnx.load(str(path)), wrong)
