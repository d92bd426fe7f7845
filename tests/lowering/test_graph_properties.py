"""Property-based tests: random well-formed graphs over the ops that change between
opsets 18 and 28, with random attributes and element types, lowered to random targets.

Each example is checked as the adapter tests check one case: the original passes
``onnx.checker`` full_check at its opset; lowering either raises a DowngradeError whose
every refusal names an op and a reason, or returns a model that declares the target,
passes full_check there and gives the original's outputs (ORT, or onnx.reference where
ORT has no kernel for the original); the caller's proto is never changed. Examples are
derandomized and bounded (``max_examples``), so CI runs the same graphs every time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto

from onnxscript_ep_passes import DowngradeError, lower_opset
from onnxscript_ep_passes.lowering import schemas
from tests.harness import check_refusals, make_model, run_model

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

_DTYPES = {
    TensorProto.FLOAT: "float",
    TensorProto.FLOAT16: "float16",
    TensorProto.DOUBLE: "double",
    TensorProto.BFLOAT16: "bfloat16",
}


@dataclasses.dataclass
class _Value:
    name: str
    dtype: int
    shape: list[int]


@dataclasses.dataclass
class _Graph:
    nodes: list[onnx.NodeProto] = dataclasses.field(default_factory=list)
    initializers: list[onnx.TensorProto] = dataclasses.field(default_factory=list)
    side_outputs: list[onnx.ValueInfoProto] = dataclasses.field(default_factory=list)
    count: int = 0
    opset: int = 28

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, array: np.ndarray) -> str:
        name = self.name("c")
        self.initializers.append(onnx.numpy_helper.from_array(array, name))
        return name

    def add(self, op: str, inputs: list[str], n_out: int = 1, **attrs: object) -> list[str]:
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(oh.make_node(op, inputs, outs, name=self.name(f"n_{op}"), **attrs))
        return outs


_Build = Callable[[st.DrawFn, _Graph, _Value], _Value]


@dataclasses.dataclass(frozen=True)
class _Op:
    op: str
    since: int  # the opset from which the graph may use it
    build: _Build
    min_rank: int = 1
    max_rank: int = 4


def _same(op: str, **fixed: object) -> _Build:
    def build(draw: st.DrawFn, g: _Graph, x: _Value) -> _Value:
        (out,) = g.add(op, [x.name], **fixed)
        return _Value(out, x.dtype, x.shape)

    return build


def _with_alpha(op: str, low: float, high: float) -> _Build:
    def build(draw: st.DrawFn, g: _Graph, x: _Value) -> _Value:
        alpha = draw(st.sampled_from([low, (low + high) / 2, high]))
        (out,) = g.add(op, [x.name], alpha=alpha)
        return _Value(out, x.dtype, x.shape)

    return build


def _gelu(draw: st.DrawFn, g: _Graph, x: _Value) -> _Value:
    (out,) = g.add("Gelu", [x.name], approximate=draw(st.sampled_from(["none", "tanh"])))
    return _Value(out, x.dtype, x.shape)


def _swiglu(draw: st.DrawFn, g: _Graph, x: _Value) -> _Value:
    (out,) = g.add("SwiGLU", [x.name, x.name], alpha=draw(st.sampled_from([1.0, 1.702])))
    return _Value(out, x.dtype, x.shape)


def _mod(draw: st.DrawFn, g: _Graph, x: _Value) -> _Value:
    divisor = g.const(np.array(draw(st.sampled_from([0.75, -1.5, 2.0])), _np(x.dtype)))
    (out,) = g.add(
        "Mod", [x.name, divisor], fmod=draw(st.sampled_from([0, 1])) if g.opset >= 28 else 1
    )
    return _Value(out, x.dtype, x.shape)


def _reshape(draw: st.DrawFn, g: _Graph, x: _Value) -> _Value:
    size = int(np.prod(x.shape))
    shape = draw(st.sampled_from([[size], [1, size], [-1, 1], [size, 1, 1]]))
    (out,) = g.add("Reshape", [x.name, g.const(np.array(shape, np.int64))])
    return _Value(out, x.dtype, [size if d == -1 else d for d in shape])


def _transpose(draw: st.DrawFn, g: _Graph, x: _Value) -> _Value:
    perm = draw(st.permutations(range(len(x.shape))))
    (out,) = g.add("Transpose", [x.name], perm=list(perm))
    return _Value(out, x.dtype, [x.shape[i] for i in perm])


def _flatten(draw: st.DrawFn, g: _Graph, x: _Value) -> _Value:
    axis = draw(st.integers(0, len(x.shape)))
    (out,) = g.add("Flatten", [x.name], axis=axis)
    return _Value(out, x.dtype, [int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))])


def _unsqueeze(draw: st.DrawFn, g: _Graph, x: _Value) -> _Value:
    axis = draw(st.integers(-len(x.shape) - 1, len(x.shape)))
    (out,) = g.add("Unsqueeze", [x.name, g.const(np.array([axis], np.int64))])
    shape = list(x.shape)
    shape.insert(axis if axis >= 0 else len(shape) + 1 + axis, 1)
    return _Value(out, x.dtype, shape)


def _pad(draw: st.DrawFn, g: _Graph, x: _Value) -> _Value:
    rank = len(x.shape)
    pads = [draw(st.integers(0, 1)) for _ in range(2 * rank)]
    (out,) = g.add("Pad", [x.name, g.const(np.array(pads, np.int64))], mode="constant")
    return _Value(out, x.dtype, [d + pads[i] + pads[i + rank] for i, d in enumerate(x.shape)])


def _reduce(op: str) -> _Build:
    def build(draw: st.DrawFn, g: _Graph, x: _Value) -> _Value:
        axis = draw(st.integers(0, len(x.shape) - 1))
        keep = draw(st.sampled_from([0, 1]))
        (out,) = g.add(op, [x.name, g.const(np.array([axis], np.int64))], keepdims=keep)
        shape = (
            [1 if i == axis else d for i, d in enumerate(x.shape)]
            if keep
            else [d for i, d in enumerate(x.shape) if i != axis]
        )
        return _Value(out, x.dtype, shape)

    return build


def _pool(op: str) -> _Build:
    def build(draw: st.DrawFn, g: _Graph, x: _Value) -> _Value:
        spatial = x.shape[2:]
        kernel = [draw(st.integers(1, min(2, d))) for d in spatial]
        strides = [draw(st.integers(1, 2)) for _ in spatial]
        attrs: dict[str, object] = {"kernel_shape": kernel, "strides": strides}
        if draw(st.booleans()):
            attrs["ceil_mode"] = 1
        if op == "LpPool":
            attrs["p"] = 2
        (out,) = g.add(op, [x.name], **attrs)
        ceil = attrs.get("ceil_mode", 0)
        sizes = []
        for d, k, s in zip(spatial, kernel, strides):
            n = -(-(d - k) // s) + 1 if ceil else (d - k) // s + 1
            if ceil and (n - 1) * s >= d:
                n -= 1  # opset 22's rule: no window starts in the right padding
            sizes.append(n)
        return _Value(out, x.dtype, [*x.shape[:2], *sizes])

    return build


def _rms_norm(draw: st.DrawFn, g: _Graph, x: _Value) -> _Value:
    scale = g.const(np.linspace(0.5, 1.5, x.shape[-1]).astype(_np(x.dtype)))
    (out,) = g.add("RMSNormalization", [x.name, scale], axis=-1)
    return _Value(out, x.dtype, x.shape)


def _attention(draw: st.DrawFn, g: _Graph, x: _Value) -> _Value:
    (out,) = g.add("Attention", [x.name, x.name, x.name], is_causal=draw(st.sampled_from([0, 1])))
    return _Value(out, x.dtype, x.shape)


def _is_test(op: str) -> _Build:
    def build(draw: st.DrawFn, g: _Graph, x: _Value) -> _Value:
        (out,) = g.add(op, [x.name])
        g.side_outputs.append(oh.make_tensor_value_info(out, TensorProto.BOOL, x.shape))
        return x

    return build


def _shape(draw: st.DrawFn, g: _Graph, x: _Value) -> _Value:
    start = draw(st.integers(-len(x.shape), len(x.shape) - 1))
    (out,) = g.add("Shape", [x.name], start=start)
    length = len(x.shape) - (start if start >= 0 else len(x.shape) + start)
    g.side_outputs.append(oh.make_tensor_value_info(out, TensorProto.INT64, [length]))
    return x


def _cast_round_trip(draw: st.DrawFn, g: _Graph, x: _Value) -> _Value:
    (wide,) = g.add("Cast", [x.name], to=TensorProto.DOUBLE)
    (out,) = g.add("CastLike", [wide, x.name])
    return _Value(out, x.dtype, x.shape)


_OPS = [
    _Op("Elu", 6, _with_alpha("Elu", 0.5, 1.5)),
    _Op("Selu", 6, _same("Selu")),
    _Op("Celu", 12, _with_alpha("Celu", 0.5, 2.0)),
    _Op("ThresholdedRelu", 10, _with_alpha("ThresholdedRelu", 0.25, 1.0)),
    _Op("HardSigmoid", 6, _same("HardSigmoid")),
    _Op("HardSwish", 14, _same("HardSwish")),
    _Op("Mish", 18, _same("Mish")),
    _Op("Softplus", 1, _same("Softplus")),
    _Op("Softsign", 1, _same("Softsign")),
    _Op("Sin", 7, _same("Sin")),
    _Op("Cos", 7, _same("Cos")),
    _Op("Atan", 7, _same("Atan")),
    _Op("Round", 11, _same("Round")),
    _Op("Identity", 1, _same("Identity")),
    _Op("Dropout", 13, _same("Dropout")),
    _Op("Swish", 24, _with_alpha("Swish", 0.5, 1.702)),
    _Op("Gelu", 20, _gelu),
    _Op("SwiGLU", 28, _swiglu),
    _Op("Mod", 13, _mod),
    _Op("Reshape", 14, _reshape),
    _Op("Transpose", 13, _transpose, min_rank=2),
    _Op("Flatten", 13, _flatten),
    _Op("Unsqueeze", 13, _unsqueeze, max_rank=3),
    _Op("Pad", 18, _pad),
    _Op("ReduceMax", 18, _reduce("ReduceMax")),
    _Op("ReduceMin", 18, _reduce("ReduceMin")),
    _Op("MaxPool", 12, _pool("MaxPool"), min_rank=4),
    _Op("AveragePool", 19, _pool("AveragePool"), min_rank=4),
    _Op("LpPool", 18, _pool("LpPool"), min_rank=4),
    _Op("RMSNormalization", 23, _rms_norm),
    _Op("Attention", 23, _attention, min_rank=4),
    _Op("IsNaN", 13, _is_test("IsNaN")),
    _Op("IsInf", 10, _is_test("IsInf")),
    _Op("Shape", 15, _shape),
    _Op("CastLike", 15, _cast_round_trip),
]


def _np(dtype: int) -> np.dtype:
    return np.dtype(oh.tensor_dtype_to_np_dtype(dtype))


def _accepts(op: str, opset: int, dtype: int) -> bool:
    """Whether ``op`` at ``opset`` takes ``dtype`` as its first input."""
    schema = schemas.get_schema(op, opset)
    if schema is None or not schema.inputs:
        return False
    type_str = schema.inputs[0].type_str
    allowed = {
        t
        for c in schema.type_constraints
        if c.type_param_str == type_str
        for t in c.allowed_type_strs
    }
    return f"tensor({_DTYPES[dtype]})" in (allowed or {type_str})


@dataclasses.dataclass
class _Example:
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    target: int
    dtype: int


@st.composite
def _examples(draw: st.DrawFn) -> _Example:
    opset = draw(st.integers(19, 28))
    dtype = draw(st.sampled_from(sorted(_DTYPES)))
    rank = draw(st.integers(1, 4))
    shape = [draw(st.integers(1, 4)) for _ in range(rank)]
    g = _Graph(opset=opset)
    (cast,) = g.add("Cast", ["x"], to=dtype)
    value = _Value(cast, dtype, shape)
    for _ in range(draw(st.integers(1, 4))):
        usable = [
            op
            for op in _OPS
            if op.since <= opset
            and op.min_rank <= len(value.shape) <= op.max_rank
            and _accepts(op.op, opset, value.dtype)
        ]
        assume(usable)
        op = draw(st.sampled_from(usable))
        value = op.build(draw, g, value)
    (y,) = g.add("Cast", [value.name], to=TensorProto.FLOAT)
    outputs = [oh.make_tensor_value_info(y, TensorProto.FLOAT, value.shape), *g.side_outputs]
    model = make_model(
        g.nodes,
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        outputs,
        opset,
        initializers=g.initializers,
    )
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    feeds = {"x": (rng.standard_normal(shape) * 2).astype(np.float32)}
    target = draw(st.integers(18, opset - 1))
    return _Example(model, feeds, target, dtype)


def _tolerance(dtype: int) -> tuple[float, float]:
    if dtype == TensorProto.BFLOAT16:
        return 5e-2, 5e-2
    if dtype == TensorProto.FLOAT16:
        return 1e-2, 1e-2
    return 1e-4, 1e-5


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(_examples())
def test_random_graphs_lower_exactly_or_refuse_clearly(example: _Example) -> None:
    model = example.model
    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError:
        assume(False)  # a combination the generator cannot rule out (rare)
    before = model.SerializeToString()
    try:
        lowered = lower_opset(model, example.target)
    except DowngradeError as error:
        assert model.SerializeToString() == before
        check_refusals(error, example.target)
        for refusal in error.refusals:
            event(f"refused: {refusal.op_type}")
        return
    assert model.SerializeToString() == before
    assert [o.version for o in lowered.opset_import if o.domain == ""] == [example.target]
    onnx.checker.check_model(lowered, full_check=True)
    expected, _ = run_model(model, example.feeds, strict=False)
    actual, how = run_model(lowered, example.feeds)
    event(f"lowered, run on {how.split(' ')[0]}")
    rtol, atol = _tolerance(example.dtype)
    for e, a in zip(expected, actual):
        if np.asarray(e).dtype.kind in "biu":
            np.testing.assert_array_equal(a, e)
        else:
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)
