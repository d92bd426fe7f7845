"""prove_causal_mask: causal (+ padding) masks proven from the graph, others refused.

Real torch exports (the mask subgraphs torch 2.13 emits: Range / LessOrEqual / GatherND
of attention_mask, Gemma3's sliding window) and hand-built masks in the other forms the
proof reads (Trilu, Where to an additive float mask) and non-causal ones it must refuse.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxscript_ep_passes.fusion.attention_match import RefusedError
from onnxscript_ep_passes.fusion.mask_proof import prove_causal_mask
from tests.torch_models import llm_export

torch_export = [pytest.mark.torch, pytest.mark.filterwarnings("ignore::FutureWarning")]


def _masks(model: ir.Model) -> list[ir.Value]:
    masks = {
        n.inputs[3]
        for n in model.graph
        if n.op_type == "Attention" and len(n.inputs) > 3 and n.inputs[3] is not None
    }
    assert masks
    return sorted(masks, key=lambda v: str(v.name))


@pytest.mark.parametrize(
    ("kind", "opset", "kv"),
    [("llama", 24, False), ("qwen3", 24, True), ("gemma3_wide", 25, False)],
    ids=["llama-24", "qwen3-24-kv", "gemma3-wide-25"],
)
@pytest.mark.torch
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_torch_export_masks_are_proven_causal(kind: str, opset: int, kv: bool) -> None:
    model = ir.from_proto(llm_export(kind, opset, kv_cache=kv))
    for mask in _masks(model):
        prove_causal_mask(model, mask, max_length=4096)


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_gemma3s_sliding_window_is_proven_with_its_size() -> None:
    # Gemma3 with a 64-token window: j > P + i - 64, which binds above 64 tokens.
    model = ir.from_proto(llm_export("gemma3", 24))
    (mask,) = _masks(model)
    assert prove_causal_mask(model, mask, max_length=4096) == 64
    assert prove_causal_mask(model, mask, max_length=64) is None  # cannot bind: causal


def _model(
    nodes: list[onnx.NodeProto],
    inits: list[onnx.TensorProto],
    extra: tuple[onnx.ValueInfoProto, ...] = (),
) -> ir.Model:
    """q/k/v [1, 4, s, 16] and attention_mask [1, s] (and ``extra`` inputs); ``nodes``
    compute ``mask``."""
    qkv = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, "s", 16]) for n in "qkv"]
    am = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, "s"])
    attention = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"])
    graph = helper.make_graph(
        [*nodes, attention],
        "g",
        [*qkv, am, *extra],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    return ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)]))


def _i64(name: str, values: list[int] | int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _positions(compare: str, window: int | None = None) -> tuple[list, list]:
    """mask = compare(key j, query i) AND padding, from Range over attention_mask's length."""
    nodes = [
        helper.make_node("Shape", ["attention_mask"], ["len1"], start=1, end=2),
        helper.make_node("Squeeze", ["len1"], ["len"]),
        helper.make_node("Range", ["zero", "len", "one"], ["pos"]),
        helper.make_node("Unsqueeze", ["pos", "axes_kv"], ["kv"]),  # [1, 1, 1, T]
        helper.make_node("Unsqueeze", ["pos", "axes_q"], ["q_pos"]),  # [1, 1, S, 1]
        helper.make_node(compare, ["kv", "q_pos"], ["causal"]),
        helper.make_node("Cast", ["attention_mask"], ["am_bool"], to=TensorProto.BOOL),
        helper.make_node("Unsqueeze", ["am_bool", "axes_pad"], ["pad"]),  # [1, 1, 1, T]
        helper.make_node("And", ["causal", "pad"], ["mask" if window is None else "both"]),
    ]
    inits = [
        _i64("zero", 0),
        _i64("one", 1),
        _i64("axes_kv", [0, 1, 2]),
        _i64("axes_q", [0, 1, 3]),
        _i64("axes_pad", [1, 2]),
    ]
    if window is not None:
        nodes += [
            helper.make_node("Sub", ["q_pos", "window"], ["lowest"]),
            helper.make_node("Greater", ["kv", "lowest"], ["inside"]),
            helper.make_node("And", ["both", "inside"], ["mask"]),
        ]
        inits.append(_i64("window", window))
    return nodes, inits


def test_the_causal_form_torch_emits_is_proven_and_an_anti_causal_one_refused() -> None:
    model = _model(*_positions("LessOrEqual"))
    prove_causal_mask(model, model.graph.node(-1).inputs[3], max_length=4096)  # type: ignore[arg-type]
    model = _model(*_positions("GreaterOrEqual"))  # j >= i: the future, not the past
    anti = r"not causal attention .*: a query also sees later keys"
    with pytest.raises(RefusedError, match=anti):
        prove_causal_mask(model, model.graph.node(-1).inputs[3], max_length=4096)  # type: ignore[arg-type]
    model = _model(*_positions("Less"))  # j < i: not even the token itself
    with pytest.raises(RefusedError, match=r"it also requires -?i? ?.*j.* >= 0 \(i: query"):
        prove_causal_mask(model, model.graph.node(-1).inputs[3], max_length=4096)  # type: ignore[arg-type]


def test_a_window_is_returned_where_it_can_bind_and_an_empty_one_refused() -> None:
    model = _model(*_positions("LessOrEqual", window=16))
    mask = model.graph.node(-1).inputs[3]
    assert mask is not None
    assert prove_causal_mask(model, mask, max_length=16) is None
    assert prove_causal_mask(model, mask, max_length=17) == 16
    model = _model(*_positions("LessOrEqual", window=0))  # j > i: not even the token itself
    mask = model.graph.node(-1).inputs[3]
    assert mask is not None
    with pytest.raises(RefusedError, match=r"-i \+ j - 1 >= 0"):
        prove_causal_mask(model, mask, max_length=17)


def _proven_or_refused(model: ir.Model, attention: ir.Node, proven: bool, reason: str) -> None:
    mask = attention.inputs[3]
    assert mask is not None
    if proven:
        prove_causal_mask(model, mask, max_length=4096)
    else:
        with pytest.raises(RefusedError, match=reason):
            prove_causal_mask(model, mask, max_length=4096)


def _trilu_float(upper: int, k: int) -> tuple[list, list]:
    """An additive mask: Where(Trilu(ones) and padding, 0, -inf)."""
    nodes = [
        helper.make_node("Shape", ["q"], ["sizes"], start=2, end=3),
        helper.make_node("Concat", ["sizes", "sizes"], ["square"], axis=0),
        helper.make_node(
            "ConstantOfShape",
            ["square"],
            ["ones"],
            value=numpy_helper.from_array(np.array([True]), "v"),
        ),
        helper.make_node("Trilu", ["ones", "k"], ["tri"], upper=upper),
        helper.make_node("Cast", ["attention_mask"], ["am_bool"], to=TensorProto.BOOL),
        helper.make_node("Unsqueeze", ["am_bool", "axes_pad"], ["pad"]),
        helper.make_node("And", ["tri", "pad"], ["allowed"]),
        helper.make_node("Where", ["allowed", "zero_f", "ninf"], ["mask"]),
    ]
    inits = [
        _i64("k", k),
        _i64("axes_pad", [1, 2]),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero_f"),
        numpy_helper.from_array(np.array(-np.inf, np.float32), "ninf"),
    ]
    return nodes, inits


@pytest.mark.parametrize(
    ("upper", "k", "proven"),
    [(0, 0, True), (1, 0, False), (0, 1, False), (0, -1, False)],
    ids=["tril", "triu", "tril+1", "tril-1"],
)
def test_trilu_and_where_masks(upper: int, k: int, proven: bool) -> None:
    model = _model(*_trilu_float(upper, k))
    _proven_or_refused(model, model.graph.node(-1), proven, "mask not proven causal")


def test_a_mask_given_as_an_input_or_from_an_unknown_op_is_refused() -> None:
    nodes = [helper.make_node("RandomUniformLike", ["q"], ["mask"])]
    model = _model(nodes, [])
    with pytest.raises(
        RefusedError,
        match=r"computed by RandomUniformLike node .* in a way the proof cannot follow",
    ):
        prove_causal_mask(model, model.graph.node(-1).inputs[3], max_length=4096)  # type: ignore[arg-type]


@pytest.mark.parametrize(("tril", "proven"), [(True, True), (False, False)], ids=["tril", "triu"])
def test_a_constant_mask_of_a_static_export_is_checked_element_by_element(
    tril: bool, proven: bool
) -> None:
    ones = np.ones((4, 4), np.bool_)
    constant = (np.tril(ones) if tril else np.triu(ones))[None, None]
    qkv = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 4, 16]) for n in "qkv"]
    graph = helper.make_graph(
        [helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"])],
        "g",
        qkv,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(constant, "mask")],
    )
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)]))
    _proven_or_refused(model, model.graph.node(0), proven, "a constant mask that is not causal")


def _packed(source: str) -> tuple[list, list, tuple]:
    """transformers 5.24's packed-sequence detection, ANDed with the causal mask: sequence
    ids ``CumSum(diff(positions, prepend=positions[:, :1] - 1) != 1)``, keys allowed only
    in the query's sequence. ``source``: the positions are ``Range`` (``"range"``), a
    running sum of ones minus one (``"cumsum"``) or a ``position_ids`` input (``"input"``:
    packed sequences, a different mask)."""
    nodes, inits = _positions("LessOrEqual")
    nodes[-1] = helper.make_node("And", ["causal", "pad"], ["causal_pad"])
    extra: tuple = ()
    if source == "cumsum":
        nodes += [
            helper.make_node("ConstantOfShape", ["len1"], ["ones"], value=_i64("v", [1])),
            helper.make_node("CumSum", ["ones", "zero"], ["count"]),
            helper.make_node("Sub", ["count", "one"], ["pos_c"]),
            helper.make_node("Unsqueeze", ["pos_c", "axes0"], ["pos2"]),
        ]
    elif source == "input":
        extra = (helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, "s"]),)
        nodes.append(helper.make_node("Identity", ["position_ids"], ["pos2"]))
    else:
        nodes.append(helper.make_node("Unsqueeze", ["pos", "axes0"], ["pos2"]))
    nodes += [
        helper.make_node("Slice", ["pos2", "zero1", "one1", "one1"], ["first"]),
        helper.make_node("Sub", ["first", "one"], ["dummy"]),
        helper.make_node("Concat", ["dummy", "pos2"], ["cat"], axis=-1),
        helper.make_node("Slice", ["cat", "one1", "end1", "one1"], ["later"]),
        helper.make_node("Slice", ["cat", "zero1", "minus1", "one1"], ["earlier"]),
        helper.make_node("Sub", ["later", "earlier"], ["diff"]),
        helper.make_node("Equal", ["diff", "one"], ["step"]),
        helper.make_node("Not", ["step"], ["jump"]),
        helper.make_node("Cast", ["jump"], ["jumps"], to=TensorProto.INT64),
        helper.make_node("CumSum", ["jumps", "minus1"], ["sequence"]),
        helper.make_node("Unsqueeze", ["sequence", "axes13"], ["q_seq"]),  # [1, 1, S, 1]
        helper.make_node("Unsqueeze", ["sequence", "axes_pad"], ["kv_seq"]),  # [1, 1, 1, T]
        helper.make_node("Equal", ["q_seq", "kv_seq"], ["same"]),
        helper.make_node("And", ["causal_pad", "same"], ["mask"]),
    ]
    inits += [
        _i64("axes0", [0]),
        _i64("axes13", [1, 3]),
        _i64("zero1", [0]),
        _i64("one1", [1]),
        _i64("minus1", [-1]),
        _i64("end1", [2**63 - 1]),
    ]
    return nodes, inits, extra


@pytest.mark.parametrize("source", ["range", "cumsum"])
def test_packed_sequence_detection_is_proven_by_what_it_computes(source: str) -> None:
    # Slice/Concat/CumSum are read by what they compute: positions 0..T-1 have no jump,
    # so every token is in sequence 0 and the extra condition always holds.
    model = _model(*_packed(source))
    attention = model.graph.node(-1)
    _proven_or_refused(model, attention, True, "")
    numeric = model.graph.node(-1).inputs[3]
    assert numeric is not None and prove_causal_mask(model, numeric, max_length=64) is None


def test_packed_sequences_given_as_position_ids_are_refused() -> None:
    model = _model(*_packed("input"))
    reason = "it depends on the values of input 'position_ids', not only on sizes and padding"
    _proven_or_refused(model, model.graph.node(-1), False, reason)


@pytest.mark.parametrize(
    ("target", "proven"),
    [
        ("batch_minus1", True),
        ("zero_minus1", True),
        ("minus1_batch", False),
        ("two_minus1", False),
    ],
)
def test_a_reshape_that_keeps_the_masks_shape_is_read_as_a_no_op(
    target: str, proven: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # GPT-2 spells ``attention_mask.view(batch, -1)``: Reshape to [B, -1] of a [B, T]
    # mask keeps it as it is (so does [0, -1]). [-1, B] (B = 1 here) makes it a column,
    # followed as such: a mask over the query, refused for what it computes. [2, -1] is a
    # Reshape the proof cannot follow: refused naming the node, its reason at -v.
    pieces = {
        "batch_minus1": ["batch", "minus1"],
        "zero_minus1": ["zero1", "minus1"],
        "minus1_batch": ["minus1", "batch"],
        "two_minus1": ["two", "minus1"],
    }[target]
    nodes, inits = _positions("LessOrEqual")
    nodes = [
        helper.make_node("Shape", ["attention_mask"], ["batch"], start=0, end=1),
        helper.make_node("Concat", pieces, ["target"], axis=0),
        helper.make_node("Reshape", ["attention_mask", "target"], ["am_view"]),
        *(
            helper.make_node(n.op_type, ["am_view"], list(n.output), to=TensorProto.BOOL)
            if n.op_type == "Cast"
            else n
            for n in nodes
        ),
    ]
    inits += [_i64("minus1", [-1]), _i64("zero1", [0]), _i64("two", [2])]
    model = _model(nodes, inits)
    mask = model.graph.node(-1).inputs[3]
    assert mask is not None
    caplog.set_level(logging.DEBUG, logger="onnxscript_ep_passes.fusion.mask_proof")
    if proven:
        prove_causal_mask(model, mask, max_length=4096)
    elif target == "minus1_batch":
        with pytest.raises(RefusedError, match=r"it ignores attention_mask \(the padding\)"):
            prove_causal_mask(model, mask, max_length=4096)
    else:
        with pytest.raises(RefusedError, match=r"computed by Reshape node .* cannot follow") as e:
            prove_causal_mask(model, mask, max_length=4096)
        assert e.value.detail == "Reshape other than a no-op or to a 1-element vector"
        assert "a 1-element vector" not in str(e.value)  # the interpreter's words: at -v
        assert "a 1-element vector" in caplog.text


def _float_built(
    compare: str, add_padding: bool, fill: float = float(np.finfo(np.float32).min)
) -> tuple[list, list]:
    """transformers 4.44-4.48's float mask: ``full(fill) * Cast(compare(j, i))``, then
    ``+ attention_mask``, ``== 0`` and a masked fill with ``fill`` (the lowest float)."""
    lowest = numpy_helper.from_array(np.array(fill, np.float32), "lowest")
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "fzero")
    nodes = [
        helper.make_node("Shape", ["attention_mask"], ["len1"], start=1, end=2),
        helper.make_node("Squeeze", ["len1"], ["len"]),
        helper.make_node("Range", ["zero", "len", "one"], ["pos"]),
        helper.make_node("Concat", ["len1", "len1"], ["square"], axis=0),
        helper.make_node("Expand", ["lowest", "square"], ["full"]),
        helper.make_node("Reshape", ["pos", "column"], ["q_pos"]),
        helper.make_node(compare, ["pos", "q_pos"], ["hidden"]),  # j > i: masked
        helper.make_node("Cast", ["hidden"], ["hidden_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["full", "hidden_f"], ["causal"]),
        helper.make_node("Unsqueeze", ["causal", "axes01"], ["causal4"]),
    ]
    if add_padding:
        nodes += [
            helper.make_node("Unsqueeze", ["attention_mask", "axes_pad"], ["am4"]),
            helper.make_node("Cast", ["am4"], ["am4_f"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["causal4", "am4_f"], ["summed"]),
            helper.make_node("Equal", ["summed", "fzero"], ["padded"]),
            helper.make_node("Where", ["padded", "lowest", "causal4"], ["mask"]),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["causal4"], ["mask"]))
    inits = [
        _i64("zero", 0),
        _i64("one", 1),
        _i64("column", [-1, 1]),
        _i64("axes01", [0, 1]),
        _i64("axes_pad", [1, 2]),
        lowest,
        zero,
    ]
    return nodes, inits


@pytest.mark.parametrize(
    ("compare", "add_padding", "fill", "reason"),
    [
        ("Greater", True, float(np.finfo(np.float32).min), None),
        ("Less", True, float(np.finfo(np.float32).min), "a query also sees later keys"),
        ("Greater", False, float(np.finfo(np.float32).min), "it ignores attention_mask"),
        ("Greater", True, -np.inf, "-inf times a 0/1 condition"),  # -inf * 0 is NaN
    ],
    ids=["standard", "anti_causal", "no_padding", "minus_inf_times_zero"],
)
def test_a_mask_built_in_float_arithmetic_is_read_by_what_it_computes(
    compare: str, add_padding: bool, fill: float, reason: str | None
) -> None:
    model = _model(*_float_built(compare, add_padding, fill))
    mask = model.graph.node(-1).inputs[3]
    assert mask is not None
    if reason is None:
        assert prove_causal_mask(model, mask, max_length=4096) is None
    else:
        with pytest.raises(RefusedError, match=reason):
            prove_causal_mask(model, mask, max_length=4096)
