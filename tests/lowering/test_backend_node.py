"""ONNX's own backend node tests, lowered to every opset from 18 to just below their own.

The cases come from ``onnx.backend.test.case.node.collect_testcases()`` (about 1,100
models; those whose ai.onnx opset is above 18 give about 6,800 source -> target pairs).
Every pair is lowered; each must end in one of two ways, never a traceback:

* a lowered model that declares the target opset and passes ``onnx.checker`` full_check
  there, with the caller's proto untouched; or
* a DowngradeError whose every refusal names the op, its versions and a reason.

Outputs are compared for one target per case (to stay in the CI budget): the lowest the
case reaches; with ``ONNXSCRIPT_EP_PASSES_EVERY_TARGET=1`` at every target (about 10 CPU
minutes; 0 wrong outputs at every target, last run for issue 24). Tolerances are the
cases' own, for the half types too (no loosening: an adapter that rounds a bfloat16 or
float16 result twice where the op rounds once, as the Celu-28 expansion did, fails). The lowered model runs in ORT when ORT can run it and ORT ran the
original; its outputs must then equal the original's in ORT. Otherwise (ORT lacks a
kernel for the original at its opset, or inputs ORT's Python API cannot feed) the
lowered model runs in onnx.reference and must match ONNX's recorded outputs with the
backend's tolerance. The cases are split into chunks by a hash of their name, so a
failing chunk names every offending case at once.
"""

from __future__ import annotations

import collections
import os
import warnings
import zlib
from collections.abc import Sequence

import numpy as np
import onnx
import onnx.reference
import pytest
from onnx.backend.test.case.test_case import TestCase

from onnxscript_ep_passes import DowngradeError, lower_opset
from onnxscript_ep_passes.lowering.lower_opset import MIN_TARGET_OPSET
from tests.harness import check_refusals, run_model
from tests.lowering.backend_cases import RANDOM_OPS, all_testcases

CHUNKS = 6
EVERY_TARGET = os.environ.get("ONNXSCRIPT_EP_PASSES_EVERY_TARGET") == "1"

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _source_opset(model: onnx.ModelProto) -> int | None:
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    return versions[0] if versions else None


def _cases(chunk: int) -> list[TestCase]:
    return [
        case
        for case in all_testcases()
        if case.model is not None
        and (_source_opset(case.model) or 0) > MIN_TARGET_OPSET
        and zlib.crc32(case.name.encode()) % CHUNKS == chunk
    ]


def _feeds(case: TestCase, model: onnx.ModelProto) -> dict[str, object] | None:
    if not case.data_sets:
        return None
    inputs = [_array(value) for value in case.data_sets[0][0]]
    names = [value.name for value in model.graph.input]
    if len(names) != len(inputs):
        return None
    return dict(zip(names, inputs))


def _array(value: object) -> object:
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, list):
        return [_array(item) for item in value]
    return value


def _ort_feedable(feeds: dict[str, object]) -> bool:
    return all(
        isinstance(v, np.ndarray) and v.dtype.isbuiltin == 1 and v.dtype.kind in "biufcUSO"
        for v in feeds.values()
    )


def _close(expected: object, actual: object, rtol: float, atol: float, what: str) -> None:
    if isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), what
        for e, a in zip(expected, actual):
            _close(e, a, rtol, atol, what)
        return
    e, a = np.asarray(expected), np.asarray(actual)
    assert e.shape == a.shape, f"{what}: shape {a.shape} != {e.shape}"
    if e.dtype.kind in "OUSbiu":
        np.testing.assert_array_equal(a, e, err_msg=what)
        return
    np.testing.assert_allclose(
        a.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol, err_msg=what
    )


def _all_close(
    expected: Sequence[object], actual: Sequence[object], rtol: float, atol: float, what: str
) -> None:
    assert len(expected) == len(actual), f"{what}: {len(actual)} outputs, not {len(expected)}"
    for index, (e, a) in enumerate(zip(expected, actual)):
        _close(e, a, rtol, atol, f"{what} output {index}")


def _reference_or_error(
    model: onnx.ModelProto, feeds: dict[str, object]
) -> tuple[list[object] | None, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return list(onnx.reference.ReferenceEvaluator(model).run(None, feeds)), ""
        except Exception as error:
            return None, str(error)


def _reference(model: onnx.ModelProto, feeds: dict[str, object]) -> list[object] | None:
    return _reference_or_error(model, feeds)[0]


def _compare(case: TestCase, lowered: onnx.ModelProto, target: int) -> str:
    """Run the lowered model and compare; return how the outputs were obtained.

    ORT against ORT when ORT runs the original (exact up to float rounding). Where ORT's
    kernel for the original disagrees with ONNX's own reference (Attention-23's
    ``qk_matmul_output`` under a causal mask keeps the masked scores finite in ORT 1.32),
    the lowered model must agree with the reference instead. Otherwise the lowered
    model (ORT if it loads, else onnx.reference) is compared with onnx.reference on the
    original, or with ONNX's recorded outputs where the reference cannot run it.
    """
    assert case.model is not None
    feeds = _feeds(case, case.model)
    op_types = {node.op_type for node in case.model.graph.node}
    if feeds is None or op_types & RANDOM_OPS:
        return "not run"
    what = f"{case.name} -> {target}"
    reference = _reference(case.model, feeds)
    expected = reference if reference is not None else list(case.data_sets[0][1])
    if _ort_feedable(feeds):
        try:
            original, how = run_model(case.model, feeds)  # type: ignore[arg-type]
        except Exception:
            how = "failed"
        if how == "onnxruntime":
            actual, how_lowered = run_model(lowered, feeds)  # type: ignore[arg-type]
            assert how_lowered == "onnxruntime", f"{what}: ORT ran the original only"
            try:
                _all_close(original, actual, 1e-5, 1e-6, f"{what} (ORT)")
                return "onnxruntime"
            except AssertionError:
                _all_close(expected, actual, case.rtol, max(case.atol, 1e-6), f"{what} (ORT)")
                return "onnxruntime, ORT's kernel differs from ONNX's reference"
    if _ort_feedable(feeds):
        try:
            actual, how_lowered = run_model(lowered, feeds, strict=False)  # type: ignore[arg-type]
        except Exception:
            how_lowered = "failed"
        if how_lowered == "onnxruntime":
            _all_close(expected, actual, case.rtol, max(case.atol, 1e-6), f"{what} (ORT)")
            return "onnxruntime (lowered only), against onnx.reference"
    lowered_outputs, error = _reference_or_error(lowered, feeds)
    if lowered_outputs is None:
        if reference is None:
            return "not run"  # onnx.reference cannot run the op at all
        # onnx.reference 1.23 lacks some old versions (DequantizeLinear-13 ...).
        assert "No implementation for operator" in error, f"{what}: onnx.reference: {error}"
        return "not run: onnx.reference lacks the target's version"
    _all_close(
        expected, lowered_outputs, case.rtol, max(case.atol, 1e-6), f"{what} (onnx.reference)"
    )
    return "onnx.reference"


def lower_case(case: TestCase, tally: collections.Counter[str]) -> None:
    """Lower ``case`` to every target below its opset; compare outputs at the lowest."""
    assert case.model is not None
    source = _source_opset(case.model)
    assert source is not None
    before = case.model.SerializeToString()
    lowest: tuple[int, onnx.ModelProto] | None = None
    for target in range(source - 1, MIN_TARGET_OPSET - 1, -1):
        tally["pairs"] += 1
        try:
            lowered = lower_opset(case.model, target)
        except DowngradeError as error:
            check_refusals(error, target)
            for refusal in error.refusals:
                tally[f"refused: {refusal.op_type}"] += 1
            tally["refused"] += 1
            continue
        assert case.model.SerializeToString() == before, f"{case.name}: input changed"
        assert _source_opset(lowered) == target
        onnx.checker.check_model(lowered, full_check=True)
        tally["lowered"] += 1
        if EVERY_TARGET:
            tally[f"run: {_compare(case, lowered, target)}"] += 1
            continue
        lowest = (target, lowered)
    if lowest is not None:
        tally[f"run: {_compare(case, lowest[1], lowest[0])}"] += 1


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_backend_node_cases_lower_or_refuse_clearly(chunk: int) -> None:
    tally: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    cases = _cases(chunk)
    assert cases
    for case in cases:
        try:
            lower_case(case, tally)
        except Exception as error:  # every offending case at once
            failures.append(f"{case.name}: {type(error).__name__}: {str(error)[:300]}")
    assert not failures, "\n".join(failures)
    assert tally["lowered"] > 0 and tally["run: onnxruntime"] > 0


def _fed_as_float(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each half-type input and output behind a Cast from and to float
    (ORT's Python API feeds no bfloat16; the backend inputs are exact in float)."""
    wrapped = onnx.ModelProto()
    wrapped.CopyFrom(model)
    graph = wrapped.graph
    casts = []
    for value in [*graph.input, *graph.output]:
        tensor = value.type.tensor_type
        half = tensor.elem_type
        tensor.elem_type = onnx.TensorProto.FLOAT
        inner = f"{value.name}__half"
        is_input = value in graph.input
        for node in graph.node:
            names = node.input if is_input else node.output
            for index, name in enumerate(names):
                if name == value.name:
                    names[index] = inner
        if is_input:
            casts.insert(0, onnx.helper.make_node("Cast", [value.name], [inner], to=half))
        else:
            casts.append(onnx.helper.make_node("Cast", [inner], [value.name], to=1))
    nodes = [*casts[: len(graph.input)], *graph.node, *casts[len(graph.input) :]]
    del graph.node[:]
    graph.node.extend(nodes)
    return wrapped


@pytest.mark.parametrize("name", ["test_celu_bfloat16", "test_celu_float16", "test_swiglu_float16"])
def test_half_type_activations_lowered_from_28_match_onnx_exactly(name: str) -> None:
    """Celu-28 and SwiGLU-28 on bfloat16/float16 compute in float32 and round once:
    lowered to every opset from 27 down to 18 they give ONNX's recorded outputs bit for
    bit, in ORT and in onnx.reference (their function bodies in the half type rounded
    after each op: Celu one bfloat16 ulp off, -0.4453 for -0.4434; SwiGLU one float16
    ulp)."""
    (case,) = [c for c in all_testcases() if c.name == name]
    assert case.model is not None and _source_opset(case.model) == 28
    inputs, (expected,) = case.data_sets[0]
    names = [value.name for value in case.model.graph.input]
    for target in range(27, MIN_TARGET_OPSET - 1, -1):
        lowered = lower_opset(case.model, target)
        reference = onnx.reference.ReferenceEvaluator(lowered).run(None, dict(zip(names, inputs)))
        np.testing.assert_array_equal(np.asarray(reference[0]), expected, f"{target}")
        feeds = {n: np.asarray(x).astype(np.float32) for n, x in zip(names, inputs)}
        outputs, how = run_model(_fed_as_float(lowered), feeds)
        assert how == "onnxruntime", how
        np.testing.assert_array_equal(outputs[0], expected.astype(np.float32), f"{target}")
