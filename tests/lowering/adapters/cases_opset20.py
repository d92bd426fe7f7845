"""Cases for the 20 -> 19 adapters (run by test_registry_cases.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto

from tests.harness import AdapterCase, make_model, tensor_info

F = TensorProto.FLOAT
S = TensorProto.STRING


_vi = tensor_info


def _gelu(approximate: str | None, elem: int = F) -> onnx.ModelProto:
    attrs = {} if approximate is None else {"approximate": approximate}
    nodes = [
        oh.make_node("Cast", ["x"], ["xc"], to=elem),
        oh.make_node("Gelu", ["xc"], ["yc"], name="gelu", **attrs),
        oh.make_node("Cast", ["yc"], ["y"], to=F),
    ]
    return make_model(nodes, [_vi("x", F, [2, 3, 4])], [_vi("y", F, [2, 3, 4])], 20)


def _affine_grid(size: list[int], align_corners: int | None) -> onnx.ModelProto:
    attrs = {} if align_corners is None else {"align_corners": align_corners}
    node = oh.make_node("AffineGrid", ["theta", "size"], ["grid"], name="affine", **attrs)
    spatial = len(size) - 2
    return make_model(
        [node],
        [_vi("theta", F, [size[0], spatial, spatial + 1])],
        [_vi("grid", F, [size[0], *size[2:], spatial])],
        20,
        initializers=[onnx.numpy_helper.from_array(np.array(size, np.int64), "size")],
    )


def _affine_grid_runtime_size() -> onnx.ModelProto:
    node = oh.make_node("AffineGrid", ["theta", "size"], ["grid"], name="affine")
    return make_model(
        [node],
        [_vi("theta", F, [2, 2, 3]), _vi("size", TensorProto.INT64, [4])],
        [_vi("grid", F, ["n", "h", "w", 2])],
        20,
    )


def _affine_grid_runtime_feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "theta": rng.standard_normal((2, 2, 3)).astype(np.float32),
        "size": np.array([2, 3, 1, 6], np.int64),
    }


def _dft(
    axis: int | None,
    *,
    length: int | None = None,
    onesided: int = 0,
    inverse: int = 0,
    runtime_axis: bool = False,
    shape: tuple[int, ...] = (2, 5, 6, 1),
) -> onnx.ModelProto:
    inits = []
    inputs = [_vi("x", F, list(shape))]
    names = ["x", ""]
    if length is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(length, np.int64), "len"))
        names[1] = "len"
    if runtime_axis:
        inputs.append(_vi("axis", TensorProto.INT64, []))
        names.append("axis")
    elif axis is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(axis, np.int64), "axis"))
        names.append("axis")
    while names[-1] == "":
        names.pop()
    node = oh.make_node("DFT", names, ["y"], name="dft", onesided=onesided, inverse=inverse)
    return make_model([node], inputs, [_vi("y", F, len(shape))], 20, initializers=inits)


def _dft_axis_feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "x": rng.standard_normal((2, 5, 6, 1)).astype(np.float32),
        "axis": np.array(1, np.int64),
    }


def _grid_sample(mode: str | None, rank: int = 4, **attrs: object) -> onnx.ModelProto:
    if mode is not None:
        attrs["mode"] = mode
    node = oh.make_node("GridSample", ["x", "grid"], ["y"], name="gs", **attrs)
    spatial = rank - 2
    x_shape = [1, 2, *[4, 5, 3][:spatial]]
    grid_shape = [1, *[3, 2, 4][:spatial], spatial]
    return make_model(
        [node],
        [_vi("x", F, x_shape), _vi("grid", F, grid_shape)],
        [_vi("y", F, rank)],
        20,
    )


def _grid_feeds(rank: int):  # type: ignore[no-untyped-def]
    def feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
        spatial = rank - 2
        x_shape = [1, 2, *[4, 5, 3][:spatial]]
        grid_shape = [1, *[3, 2, 4][:spatial], spatial]
        return {
            "x": rng.standard_normal(x_shape).astype(np.float32),
            "grid": rng.uniform(-1.2, 1.2, size=grid_shape).astype(np.float32),
        }

    return feeds


def _string_op(op: str) -> onnx.ModelProto:
    if op == "StringConcat":
        node = oh.make_node(op, ["a", "b"], ["y"], name="strop")
        inputs = [_vi("a", S, [2]), _vi("b", S, [2])]
        outputs = [_vi("y", S, [2])]
    elif op == "RegexFullMatch":
        node = oh.make_node(op, ["a"], ["y"], name="strop", pattern="a.*")
        inputs = [_vi("a", S, [2])]
        outputs = [_vi("y", TensorProto.BOOL, [2])]
    elif op == "StringSplit":
        node = oh.make_node(op, ["a"], ["y", "n"], name="strop", delimiter=",")
        inputs = [_vi("a", S, [2])]
        outputs = [_vi("y", S, [2, "k"]), _vi("n", TensorProto.INT64, [2])]
    else:  # ImageDecoder
        node = oh.make_node(op, ["a"], ["y"], name="strop")
        inputs = [_vi("a", TensorProto.UINT8, ["n"])]
        outputs = [_vi("y", TensorProto.UINT8, ["h", "w", 3])]
    return make_model([node], inputs, outputs, 20)


CASES: list[AdapterCase] = [
    AdapterCase("Gelu", 20, "default", lambda: _gelu(None)),
    AdapterCase("Gelu", 20, "tanh", lambda: _gelu("tanh"), rtol=1e-5, atol=1e-6),
    AdapterCase("Gelu", 20, "to_opset_18", lambda: _gelu("none"), target=18),
    AdapterCase(
        "Gelu",
        20,
        "fp16_to_opset_18",
        lambda: _gelu("tanh", TensorProto.FLOAT16),
        target=18,
        rtol=2e-3,
        atol=2e-3,
    ),
    AdapterCase("AffineGrid", 20, "2d", lambda: _affine_grid([2, 3, 4, 5], None), atol=1e-6),
    AdapterCase("AffineGrid", 20, "2d_batch_1", lambda: _affine_grid([1, 3, 1, 5], 0), atol=1e-6),
    AdapterCase(
        "AffineGrid", 20, "2d_align_corners", lambda: _affine_grid([1, 3, 2, 5], 1), atol=1e-6
    ),
    AdapterCase(
        "AffineGrid",
        20,
        "3d_align_corners_to_opset_18",
        lambda: _affine_grid([1, 1, 2, 3, 4], 1),
        target=18,
        atol=1e-6,
    ),
    AdapterCase("AffineGrid", 20, "3d", lambda: _affine_grid([2, 1, 3, 4, 1], 0), atol=1e-6),
    AdapterCase(
        "AffineGrid",
        20,
        "runtime_size",
        _affine_grid_runtime_size,
        feeds=_affine_grid_runtime_feeds,
        atol=1e-6,
    ),
    AdapterCase(
        "AffineGrid",
        20,
        "align_corners_size_1_refused",
        lambda: _affine_grid([1, 3, 1, 5], 1),
        refuse=r"node 'affine' \(AffineGrid-20.*align_corners=1 with a spatial size that is 1",
    ),
    AdapterCase("DFT", 20, "default_axis", lambda: _dft(None), atol=1e-5),
    AdapterCase("DFT", 20, "axis_1", lambda: _dft(1), atol=1e-5),
    AdapterCase("DFT", 20, "axis_negative_onesided", lambda: _dft(-3, onesided=1), atol=1e-5),
    AdapterCase(
        "DFT",
        20,
        "inverse_dft_length_to_opset_18",
        lambda: _dft(2, length=8, inverse=1),
        target=18,
        atol=1e-5,
    ),
    AdapterCase(
        "DFT",
        20,
        "runtime_axis_refused",
        lambda: _dft(None, runtime_axis=True),
        feeds=_dft_axis_feeds,
        refuse=r"node 'dft' \(DFT-20.*input 'axis' \('axis'\) is not a constant",
    ),
    AdapterCase(
        "GridSample", 20, "default_linear", lambda: _grid_sample(None), feeds=_grid_feeds(4)
    ),
    AdapterCase(
        "GridSample",
        20,
        "cubic_border_aligned",
        lambda: _grid_sample("cubic", padding_mode="border", align_corners=1),
        feeds=_grid_feeds(4),
        atol=1e-5,
    ),
    AdapterCase(
        "GridSample",
        20,
        "nearest_reflection",
        lambda: _grid_sample("nearest", padding_mode="reflection"),
        feeds=_grid_feeds(4),
    ),
    AdapterCase(
        "GridSample",
        20,
        "volumetric_refused",
        lambda: _grid_sample("linear", rank=5),
        refuse=r"node 'gs' \(GridSample-20.*rank 5: GridSample before opset 20 is 2-D",
    ),
]
for _op, _what in (
    ("StringConcat", "concatenates strings"),
    ("RegexFullMatch", "matches a regular expression"),
    ("StringSplit", "splits a string"),
    ("ImageDecoder", "decodes an image"),
):
    CASES.append(
        AdapterCase(
            _op,
            20,
            "refused",
            lambda op=_op: _string_op(op),
            refuse=rf"node 'strop' \({_op}-20.*{_op} does not exist before opset 20.*{_what}",
        )
    )


def _is_test(op: str, elem: int, **attrs: object) -> onnx.ModelProto:
    nodes = [
        oh.make_node("Cast", ["x"], ["xc"], to=elem),
        oh.make_node(op, ["xc"], ["y"], name="test", **attrs),
    ]
    return make_model(nodes, [_vi("x", F, [2, 4])], [_vi("y", TensorProto.BOOL, [2, 4])], 20)


def _special_feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = np.array([np.inf, -np.inf, np.nan, 0.0, 1e6, -1e30, 448.0, 3.5], np.float32)
    return {"x": x.reshape(2, 4)}


def _reduce_bool(
    op: str, shape: list[int], keepdims: int, axes: list[int] | None
) -> onnx.ModelProto:
    inits = []
    names = ["b"]
    if axes is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        names.append("axes")
    node = oh.make_node(op, names, ["y"], name="reduce", keepdims=keepdims)
    out_rank = len(shape) if keepdims else len(shape) - (len(axes) if axes else len(shape))
    return make_model(
        [node],
        [_vi("b", TensorProto.BOOL, shape)],
        [_vi("y", TensorProto.BOOL, out_rank)],
        20,
        initializers=inits,
    )


def _constant_of_shape(elem: int, value: float) -> onnx.ModelProto:
    np_type = onnx.helper.tensor_dtype_to_np_dtype(elem)
    tensor = onnx.numpy_helper.from_array(np.array([value], np.float32).astype(np_type), "v")
    nodes = [
        oh.make_node("ConstantOfShape", ["shape"], ["yc"], name="cos", value=tensor),
        oh.make_node("Cast", ["yc"], ["y"], to=F),
    ]
    return make_model(
        nodes,
        [],
        [_vi("y", F, [2, 3])],
        20,
        initializers=[onnx.numpy_helper.from_array(np.array([2, 3], np.int64), "shape")],
    )


CASES += [
    AdapterCase(
        "IsInf", 20, "fp16", lambda: _is_test("IsInf", TensorProto.FLOAT16), feeds=_special_feeds
    ),
    AdapterCase(
        "IsInf",
        20,
        "bf16_negative_only_to_18",
        lambda: _is_test("IsInf", TensorProto.BFLOAT16, detect_positive=0),
        feeds=_special_feeds,
        target=18,
    ),
    AdapterCase(
        "IsInf",
        20,
        "float8e5m2",
        lambda: _is_test("IsInf", TensorProto.FLOAT8E5M2),
        feeds=_special_feeds,
    ),
    AdapterCase("IsInf", 20, "float", lambda: _is_test("IsInf", F), feeds=_special_feeds),
    AdapterCase(
        "IsInf",
        20,
        "float8_to_18_refused",
        lambda: _is_test("IsInf", TensorProto.FLOAT8E4M3FN),
        target=18,
        refuse=r"node 'test' \(IsInf-20.*FLOAT8E4M3FN tensor cannot be read or built below opset 19",
    ),
    AdapterCase(
        "IsNaN",
        20,
        "float8e4m3fn",
        lambda: _is_test("IsNaN", TensorProto.FLOAT8E4M3FN),
        feeds=_special_feeds,
    ),
    AdapterCase(
        "IsNaN",
        20,
        "bf16_to_18",
        lambda: _is_test("IsNaN", TensorProto.BFLOAT16),
        feeds=_special_feeds,
        target=18,
    ),
    AdapterCase(
        "ReduceMax", 20, "bool_axis_1", lambda: _reduce_bool("ReduceMax", [3, 4, 2], 0, [1])
    ),
    AdapterCase(
        "ReduceMax",
        20,
        "bool_all_to_18",
        lambda: _reduce_bool("ReduceMax", [3, 4], 1, None),
        target=18,
    ),
    AdapterCase(
        "ReduceMin", 20, "bool_axes", lambda: _reduce_bool("ReduceMin", [3, 4, 2], 1, [0, 2])
    ),
    AdapterCase(
        "ConstantOfShape", 20, "bf16", lambda: _constant_of_shape(TensorProto.BFLOAT16, 1.2)
    ),
    AdapterCase(
        "ConstantOfShape",
        20,
        "float8e4m3fn",
        lambda: _constant_of_shape(TensorProto.FLOAT8E4M3FN, -3.5),
    ),
    AdapterCase(
        "ConstantOfShape",
        20,
        "float8_to_18_refused",
        lambda: _constant_of_shape(TensorProto.FLOAT8E5M2, 2.0),
        target=18,
        refuse=r"node 'cos' \(ConstantOfShape-20.*FLOAT8E5M2 tensor cannot be read or built",
    ),
    AdapterCase(
        "ConstantOfShape",
        20,
        "fp16_to_18",
        lambda: _constant_of_shape(TensorProto.FLOAT16, 0.1),
        target=18,
    ),
]
