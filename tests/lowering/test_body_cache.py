"""Memoized function-body expansions build exactly what expanding every node afresh builds.

Real models (the benchmark decoder: RMSNormalization, RotaryEmbedding and Attention in
every block; torch exports of tiny LLMs) are lowered with the cache off, cold and warm,
and the serialized protos compared byte for byte; the warm run must not ask ONNX for a
single body. Nodes of one op that differ only in what the key must hold (an attribute,
an input shape, an optional input, a constant's value that inference reads) get their
own bodies and types.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto, numpy_helper

from onnxscript_ep_passes.lowering import body_cache, function_body
from onnxscript_ep_passes.lowering.expansion import expand_node
from onnxscript_ep_passes.lowering.lower_opset import run_lowering
from tests.harness import benchmark_decoder, make_model, run_model, tensor_info
from tests.torch_models import llm_export

F, I64 = TensorProto.FLOAT, TensorProto.INT64


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    body_cache.clear()
    yield
    body_cache.clear()


@pytest.fixture
def bodies_asked(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """How often ONNX was asked for a body, per op (a cache miss)."""
    asked: collections.Counter[str] = collections.Counter()
    original = function_body.function_body

    def counting(ctx: Any, body_version: int | None = None) -> onnx.FunctionProto:
        asked[ctx.node.op_type] += 1
        return original(ctx, body_version)

    monkeypatch.setattr(function_body, "function_body", counting)
    return asked


def _lower(proto: onnx.ModelProto, target: int) -> ir.Model:
    model = ir.from_proto(proto)
    run_lowering(model, target)
    return model


def _lowered(proto: onnx.ModelProto, target: int) -> bytes:
    return ir.to_proto(_lower(proto, target)).SerializeToString()


def _uncached(proto: onnx.ModelProto, target: int) -> bytes:
    with body_cache.disabled():
        return _lowered(proto, target)


def _decoder(tmp_path: Path) -> onnx.ModelProto:
    return benchmark_decoder(tmp_path / "decoder.onnx")


MODELS: dict[str, Callable[[Path], onnx.ModelProto]] = {
    "decoder": _decoder,
    "llama": lambda _: llm_export("llama", 24),
    "gemma3_kv": lambda _: llm_export("gemma3", 24, kv_cache=True),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_cached_lowering_is_byte_identical(
    name: str, tmp_path: Path, bodies_asked: collections.Counter[str]
) -> None:
    proto = MODELS[name](tmp_path)
    expansions = collections.Counter(
        n.op_type
        for n in proto.graph.node
        if n.op_type in ("Attention", "RMSNormalization", "RotaryEmbedding")
    )
    assert expansions["Attention"] >= 2
    for target in (22, 18):
        body_cache.clear()
        expected = _uncached(proto, target)
        bodies_asked.clear()
        assert _lowered(proto, target) == expected, "cold cache"
        assert 0 < sum(bodies_asked.values()) < sum(expansions.values())  # layers share
        bodies_asked.clear()
        assert _lowered(proto, target) == expected, "warm cache"
        assert not bodies_asked, f"the warm run asked ONNX for bodies: {bodies_asked}"


def test_decoder_lowered_through_the_cache_runs_like_the_original(tmp_path: Path) -> None:
    proto = _decoder(tmp_path)
    _lowered(proto, 22)  # fills the cache
    lowered = ir.to_proto(_lower(proto, 22))
    onnx.checker.check_model(lowered, full_check=True)
    rng = np.random.default_rng(0)
    feeds = {
        "input_ids": rng.integers(0, 256, (2, 5)).astype(np.int64),
        "attention_mask": np.array([[1] * 5, [1, 1, 1, 0, 0]], np.int64),
        "position_ids": np.broadcast_to(np.arange(5), (2, 5)).astype(np.int64),
    }
    expected, actual = run_model(proto, feeds)[0], run_model(lowered, feeds)[0]
    for e, a in zip(expected, actual, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)


def _rms(name: str, x: str, scale: str, out: str, **attrs: Any) -> onnx.NodeProto:
    return oh.make_node("RMSNormalization", [x, scale], [out], name=name, **attrs)


def _attention(name: str, inputs: list[str], out: str) -> onnx.NodeProto:
    return oh.make_node("Attention", inputs, [out], name=name)


def _pair_model() -> onnx.ModelProto:
    """Pairs of one op differing only in an attribute, an input shape, an optional input."""
    nodes = [
        _rms("rms_a", "x", "s8", "ya"),
        _rms("rms_axis", "x", "s38", "yb", axis=1),  # attribute (and the scale's shape)
        _rms("rms_eps", "x", "s8", "yc", epsilon=1e-3),  # attribute only
        _rms("rms_short", "x4", "s4", "yd"),  # input shape only
        _attention("att_plain", ["q", "k", "v"], "oa"),
        _attention("att_mask", ["q", "k", "v", "mask"], "ob"),  # optional input
        _attention("att_short", ["q", "k2", "v2"], "oc"),  # input shape (kv length)
    ]
    inputs = [
        tensor_info("x", F, [2, 3, 8]),
        tensor_info("x4", F, [2, 3, 4]),
        tensor_info("q", F, [1, 2, 4, 8]),
        tensor_info("k", F, [1, 2, 6, 8]),
        tensor_info("v", F, [1, 2, 6, 8]),
        tensor_info("k2", F, [1, 2, 5, 8]),
        tensor_info("v2", F, [1, 2, 5, 8]),
        tensor_info("mask", F, [4, 6]),
    ]
    outputs = [
        tensor_info(n, F, s)
        for n, s in [
            ("ya", [2, 3, 8]),
            ("yb", [2, 3, 8]),
            ("yc", [2, 3, 8]),
            ("yd", [2, 3, 4]),
            ("oa", [1, 2, 4, 8]),
            ("ob", [1, 2, 4, 8]),
            ("oc", [1, 2, 4, 8]),
        ]
    ]
    rng = np.random.default_rng(0)
    scales = [
        numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
        for name, shape in [("s8", [8]), ("s38", [3, 8]), ("s4", [4])]
    ]
    return make_model(nodes, inputs, outputs, 23, initializers=scales)


def _bodies(model: ir.Model) -> dict[str, list[tuple[str, str, str]]]:
    """Per model node, the built nodes (op, attributes, output types) named after it."""
    bodies: dict[str, list[tuple[str, str, str]]] = collections.defaultdict(list)
    for node in model.graph:
        origin = node.name.split("/lowered_")[0] if node.name else ""
        attrs = ",".join(f"{a.name}={a.value!r}" for a in node.attributes.values())
        types = ",".join(f"{o.type}{o.shape}" for o in node.outputs)
        bodies[origin].append((node.op_type, attrs, types))
    return bodies


def test_nodes_differing_in_a_key_part_get_their_own_bodies(
    bodies_asked: collections.Counter[str],
) -> None:
    proto = _pair_model()
    expected = _uncached(proto, 22)
    bodies_asked.clear()
    assert _lowered(proto, 22) == expected
    # Every node differs from the others in a part of the key: none shares a body.
    assert bodies_asked == {"RMSNormalization": 4, "Attention": 3}
    model = _lower(proto, 22)  # warm: every body from the cache
    assert ir.to_proto(model).SerializeToString() == expected
    bodies = _bodies(model)
    assert bodies["rms_a"] != bodies["rms_axis"]
    assert bodies["rms_a"] != bodies["rms_eps"]  # the epsilon constant differs
    assert bodies["rms_a"] != bodies["rms_short"]  # the inferred shapes differ
    assert len(bodies["att_plain"]) < len(bodies["att_mask"])  # the mask is added
    assert bodies["att_plain"] != bodies["att_short"]


def _reduce_model() -> onnx.ModelProto:
    """Two ReduceLogSumExp nodes alike but for the value of their ``axes`` initializer."""
    nodes = [
        oh.make_node("ReduceLogSumExp", ["x", "axes1"], ["y1"], name="r1"),
        oh.make_node("ReduceLogSumExp", ["x", "axes2"], ["y2"], name="r2"),
    ]
    axes = [
        numpy_helper.from_array(np.array([1], np.int64), "axes1"),
        numpy_helper.from_array(np.array([2], np.int64), "axes2"),
    ]
    outputs = [onnx.ValueInfoProto(name="y1"), onnx.ValueInfoProto(name="y2")]
    return make_model(nodes, [tensor_info("x", F, [2, 3, 4])], outputs, 18, initializers=axes)


def _expanded_shapes(proto: onnx.ModelProto) -> tuple[bytes, list[str]]:
    model = ir.from_proto(proto)
    for node in list(model.graph):
        expand_node(model, node)
    shapes = [f"{n.op_type}:{n.outputs[0].shape}" for n in model.graph if n.op_type == "ReduceSum"]
    return ir.to_proto(model).SerializeToString(), shapes


def test_a_constant_that_inference_reads_is_inferred_again() -> None:
    """``axes`` is a small constant: ReduceSum reads its value, so the copy is inferred."""
    proto = _reduce_model()
    with body_cache.disabled():
        expected, shapes = _expanded_shapes(proto)
    assert shapes == ["ReduceSum:[2,1,4]", "ReduceSum:[2,3,1]"]
    assert _expanded_shapes(proto) == (expected, shapes)  # r2 copies r1's template
    assert _expanded_shapes(proto) == (expected, shapes)  # both from the cache


def test_exact_copies_are_lowered_once_per_template(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The nodes of an exact body copy are not lowered again once a copy of the same
    template was lowered and left as it was (lower_opset rule 2): on the decoder at 22
    the body nodes are lowered about once per template, not once per layer, and the
    model is byte for byte the one the uncached path (every body lowered) builds."""
    from onnxscript_ep_passes.lowering.lower_opset import _Lowering

    proto = _decoder(tmp_path)
    lowered: collections.Counter[str] = collections.Counter()
    original = _Lowering._lower_built

    def counting(self: Any, node: ir.Node, opset: int, scope: str) -> None:
        lowered["cached" if body_cache._enabled[0] else "uncached"] += 1
        original(self, node, opset, scope)

    monkeypatch.setattr(_Lowering, "_lower_built", counting)
    expected = _uncached(proto, 22)
    assert _lowered(proto, 22) == expected
    expansions = sum(
        n.op_type in ("Attention", "RMSNormalization", "RotaryEmbedding") for n in proto.graph.node
    )
    assert expansions >= 6
    # Uncached: every body node of every expansion; cached: the first copy's only.
    assert lowered["uncached"] > 2 * lowered["cached"] > 0, lowered
