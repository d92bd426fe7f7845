"""Attention-24 -> 23 beyond what ORT can check, plus TensorScatter against the reference.

ORT's Attention kernels reject masks whose key axis is shorter than the keys (which
Attention-24 pads with -inf) or whose query axis broadcasts, and ORT's Attention-24
writes the dtype's lowest value instead of -inf into the mode-2 ``qk_matmul_output`` at
padded keys. These tests therefore take ONNX's own definitions as the ground truth for
the original model: Attention-24's context-dependent function body (run op by op with
``onnx.reference``) and the ``onnx.reference`` Attention kernel. The lowered model is
run with both the reference and ORT.

The reference kernel applies ``is_causal`` with the query length of the *mask* (1 for a
mask that broadcasts over queries) instead of Q's, unlike the spec and the function
body; the case that hits this compares with the function body only.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.reference
import pytest
from onnx import TensorProto

from onnxscript_ep_passes import lower_opset
from tests.harness import run_model
from tests.lowering.adapters import cases_opset24
from tests.lowering.adapters.cases_opset24 import _attention_model

# The reference's softmax computes -inf - -inf on fully masked rows before zeroing them.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

_F, _B = TensorProto.FLOAT, TensorProto.BOOL
_Q4, _KV4 = [3, 2, 4, 8], [3, 2, 6, 8]


def _feeds(model: onnx.ModelProto, nonpad: list[int] | None, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        tensor_type = value.type.tensor_type
        shape = [d.dim_value for d in tensor_type.shape.dim]
        if value.name == "nonpad":
            assert nonpad is not None
            feeds["nonpad"] = np.array(nonpad, dtype=np.int64)
        elif tensor_type.elem_type == _B:
            feeds[value.name] = rng.random(shape) > 0.3
        else:
            array = rng.standard_normal(shape).astype(np.float32)
            if value.name == "mask":
                array[rng.random(shape) < 0.2] = -np.inf
            feeds[value.name] = array
    return feeds


def _function_body_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """The one-node model with its node replaced by the ONNX function body (opset 24)."""
    (node,) = model.graph.node
    schema = onnx.defs.get_schema(node.op_type, 24)
    declared = {v.name: v.type for v in model.graph.input}
    types = [(declared[n] if n else onnx.TypeProto()).SerializeToString() for n in node.input]
    body = onnx.FunctionProto()
    body.ParseFromString(
        schema.get_context_dependent_function_with_opset_version(
            24, node.SerializeToString(), types
        )
    )
    names = dict(zip(body.input, node.input)) | dict(zip(body.output, node.output))
    attributes = {a.name: a for a in node.attribute}

    def rename(name: str) -> str:
        if name in names:
            return names[name]
        return "" if not name or name in body.input else f"body/{name}"

    nodes = []
    for inner in body.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.input[:] = [rename(n) for n in inner.input]
        copy.output[:] = [rename(n) for n in inner.output]
        bound = []
        for attr in inner.attribute:
            if not attr.ref_attr_name:
                bound.append(attr)
            elif attr.ref_attr_name in attributes:
                actual = onnx.AttributeProto()
                actual.CopyFrom(attributes[attr.ref_attr_name])
                actual.name = attr.name
                bound.append(actual)
        del copy.attribute[:]
        copy.attribute.extend(bound)
        nodes.append(copy)
    graph = onnx.helper.make_graph(nodes, "body", list(model.graph.input), list(model.graph.output))
    return onnx.helper.make_model(graph, opset_imports=list(body.opset_import))


def _run_reference(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return [np.asarray(r) for r in onnx.reference.ReferenceEvaluator(model).run(None, feeds)]


def _assert_close(expected: list[np.ndarray], actual: list[np.ndarray], what: str) -> None:
    assert len(actual) == len(expected), what
    for index, (e, a) in enumerate(zip(expected, actual)):
        assert e.shape == a.shape and e.dtype == a.dtype, (what, index)
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5, err_msg=f"{what}, output {index}")


def _check_against_onnx(
    model: onnx.ModelProto, feeds: dict, *, reference_kernel: bool = True
) -> onnx.ModelProto:
    onnx.checker.check_model(model, full_check=True)
    lowered = lower_opset(model, 23)
    onnx.checker.check_model(lowered, full_check=True)
    truths = {"function body": _run_reference(_function_body_model(model), feeds)}
    if reference_kernel:
        truths["reference kernel"] = _run_reference(model, feeds)
    actual, how = run_model(lowered, feeds)
    assert how == "onnxruntime"
    results = {"reference": _run_reference(lowered, feeds), "onnxruntime": actual}
    for truth, expected in truths.items():
        for how, outputs in results.items():
            _assert_close(expected, outputs, f"lowered by {how} vs original by {truth}")
    return lowered


ATTENTION = {
    # Attention-24 pads a short mask with -inf; a last dim of 1 is padded, not broadcast.
    "short_float_mask": (lambda: _attention_model(_Q4, _KV4, mask=(_F, [4, 3])), None),
    "last_dim_1_mask_is_padded": (
        lambda: _attention_model(_Q4, _KV4, mask=(_F, [4, 1]), is_causal=1),
        None,
    ),
    "short_bool_mask_with_past": (
        lambda: _attention_model(
            _Q4, _KV4, mask=(_B, [3, 1, 4, 7]), past=[3, 2, 3, 8], outputs=3, is_causal=1
        ),
        None,
    ),
    "nonpad_short_bool_mask_causal": (
        lambda: _attention_model(_Q4, _KV4, mask=(_B, [4, 5]), nonpad=[3], is_causal=1),
        [5, 3, 0],
    ),
    "nonpad_short_float_mask_gqa_3d": (
        lambda: _attention_model(
            [3, 4, 16],
            [3, 6, 8],
            mask=(_F, [4, 4]),
            nonpad=[3],
            q_num_heads=4,
            kv_num_heads=2,
        ),
        [4, 2, 1],
    ),
    "nonpad_query_broadcast_mask": (
        lambda: _attention_model(_Q4, _KV4, mask=(_F, [3, 1, 1, 6]), nonpad=[3], is_causal=1),
        [6, 4, 2],
    ),
    "nonpad_query_broadcast_bool_mask_no_causal": (
        lambda: _attention_model(_Q4, _KV4, mask=(_B, [3, 1, 1, 6]), nonpad=[3]),
        [6, 4, 2],
    ),
    "nonpad_qk_mode2": (
        lambda: _attention_model(
            _Q4,
            _KV4,
            mask=(_F, [4, 6]),
            nonpad=[3],
            outputs=2,
            qk_matmul_output_mode=2,
            is_causal=1,
        ),
        [6, 3, 0],
    ),
    "nonpad_longer_than_keys_causal": (
        lambda: _attention_model(_Q4, _KV4, nonpad=[3], is_causal=1),
        [9, 6, 1],
    ),
}


@pytest.mark.parametrize("name", sorted(ATTENTION))
def test_attention_24_matches_reference(name: str) -> None:
    build, nonpad = ATTENTION[name]
    model = build()
    kernel_ok = name != "nonpad_query_broadcast_mask"  # see the module docstring
    for seed in range(3):
        feeds = _feeds(model, nonpad, seed)
        lowered = _check_against_onnx(model, feeds, reference_kernel=kernel_ok)
    attention = [n for n in lowered.graph.node if n.op_type == "Attention"]
    assert len(attention) == 1, "the lowering must keep a single Attention node"
    assert len(attention[0].input) <= 6
    if nonpad is not None:
        assert all(a.name != "is_causal" for a in attention[0].attribute)


def test_attention_24_full_mask_is_left_alone() -> None:
    model = _attention_model(_Q4, _KV4, mask=(_F, [3, 2, 4, 6]), empty_nonpad=True)
    lowered = _check_against_onnx(model, _feeds(model, None))
    assert [n.op_type for n in lowered.graph.node] == ["Attention"]
    assert list(lowered.graph.node[0].input) == ["q", "k", "v", "mask"]


@pytest.mark.parametrize(
    "case",
    [c for c in cases_opset24.CASES if c.op_type == "TensorScatter" and c.refuse is None],
    ids=lambda c: c.name,
)
def test_tensorscatter_24_matches_reference(case: cases_opset24.AdapterCase) -> None:
    model = case.build()
    assert case.feeds is not None
    feeds = case.feeds(np.random.default_rng(1))
    lowered = lower_opset(model, 23)
    expected = onnx.reference.ReferenceEvaluator(model).run(None, feeds)
    actual, how = run_model(lowered, feeds)
    assert how == "onnxruntime"
    np.testing.assert_array_equal(actual[0], expected[0])
