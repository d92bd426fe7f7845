"""Cases for the 19 -> 18 adapters (run by test_registry_cases.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto

from tests.harness import AdapterCase, make_model, tensor_info

F = TensorProto.FLOAT


_vi = tensor_info


def _cast(op: str, to: int, saturate: int | None, src: int = F) -> onnx.ModelProto:
    attrs = {} if saturate is None else {"saturate": saturate}
    if op == "Cast":
        node = oh.make_node("Cast", ["x"], ["y"], name="cast", to=to, **attrs)
        inputs = [_vi("x", src, [2, 3])]
    else:
        node = oh.make_node("CastLike", ["x", "like"], ["y"], name="cast", **attrs)
        inputs = [_vi("x", src, [2, 3]), _vi("like", to, [1])]
    return make_model([node], inputs, [_vi("y", to, [2, 3])], 19)


def _avgpool(dilations: list[int] | None) -> onnx.ModelProto:
    attrs: dict[str, object] = {"kernel_shape": [2, 2], "pads": [1, 0, 0, 1]}
    if dilations is not None:
        attrs["dilations"] = dilations
    node = oh.make_node("AveragePool", ["x"], ["y"], name="pool", **attrs)
    return make_model([node], [_vi("x", F, [1, 2, 5, 5])], [_vi("y", F, 4)], 19)


def _deformconv() -> onnx.ModelProto:
    node = oh.make_node("DeformConv", ["x", "w", "offset"], ["y"], name="dconv")
    return make_model(
        [node],
        [_vi("x", F, [1, 1, 4, 4]), _vi("w", F, [1, 1, 2, 2]), _vi("offset", F, [1, 8, 3, 3])],
        [_vi("y", F, [1, 1, 3, 3])],
        19,
    )


def _dq(x_type: int, scale_type: int, per_axis: bool, zp: bool = True) -> onnx.ModelProto:
    shape = [3] if per_axis else []
    count = 3 if per_axis else 1
    inits = [
        onnx.numpy_helper.from_array(
            np.array([0.5, 0.031, 3.0][:count], dtype=np.float32).reshape(shape), "scale_f"
        )
    ]
    nodes = [oh.make_node("Cast", ["scale_f"], ["scale"], to=scale_type)]
    inputs = ["xq", "scale"]
    if zp:
        zp_np = np.array([3, -2, 0][:count]).reshape(shape)
        if x_type == TensorProto.UINT8:
            zp_np = np.abs(zp_np)
        np_type = onnx.helper.tensor_dtype_to_np_dtype(x_type)
        inits.append(onnx.numpy_helper.from_array(zp_np.astype(np_type), "zp"))
        inputs.append("zp")
    nodes.append(oh.make_node("DequantizeLinear", inputs, ["yq"], name="dq", axis=1))
    nodes.append(oh.make_node("Cast", ["yq"], ["y"], to=F))  # ORT cannot return bfloat16
    return make_model(
        nodes,
        [_vi("xq", x_type, [2, 3, 4])],
        [_vi("y", F, [2, 3, 4])],
        19,
        initializers=inits,
    )


def _dq_float8() -> onnx.ModelProto:
    nodes = [
        oh.make_node("Cast", ["x"], ["x8"], to=TensorProto.FLOAT8E4M3FN),
        oh.make_node("DequantizeLinear", ["x8", "scale"], ["y"], name="dq"),
    ]
    return make_model(
        nodes,
        [_vi("x", F, [2, 3])],
        [_vi("y", F, [2, 3])],
        19,
        initializers=[onnx.numpy_helper.from_array(np.array(0.5, np.float32), "scale")],
    )


def _q(x_type: int, out_type: int, per_axis: bool, saturate: int | None = None) -> onnx.ModelProto:
    shape = [3] if per_axis else []
    count = 3 if per_axis else 1
    scale = np.array([0.05, 0.013, 0.2][:count], dtype=np.float32).reshape(shape)
    nodes = [
        oh.make_node("Cast", ["xf"], ["x"], to=x_type),
        oh.make_node("Cast", ["scale_f"], ["scale"], to=x_type),
    ]
    inits = [onnx.numpy_helper.from_array(scale, "scale_f")]
    if out_type in (TensorProto.INT8, TensorProto.UINT8):
        zp = np.array([1, 7, 0][:count]).reshape(shape)
        inits.append(
            onnx.numpy_helper.from_array(
                zp.astype(onnx.helper.tensor_dtype_to_np_dtype(out_type)), "zp"
            )
        )
    else:
        nodes.append(oh.make_node("Cast", ["zero"], ["zp"], to=out_type))
        inits.append(onnx.numpy_helper.from_array(np.zeros(shape, np.float32), "zero"))
    attrs = {} if saturate is None else {"saturate": saturate}
    nodes.append(
        oh.make_node("QuantizeLinear", ["x", "scale", "zp"], ["y"], name="q", axis=1, **attrs)
    )
    return make_model(
        nodes, [_vi("xf", F, [2, 3, 4])], [_vi("y", out_type, [2, 3, 4])], 19, initializers=inits
    )


def _q_feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
    # Values around and beyond the 8-bit range, with exact ties (x / scale = k + 0.5).
    x = rng.uniform(-8, 8, size=(2, 3, 4)).astype(np.float32)
    x[0, 0, :] = np.array([0.025, 0.075, -0.125, 100.0], np.float32)
    return {"xf": x}


def _pad(
    mode: str,
    pads: list[int] | None,
    axes: list[int] | None = None,
    shape: tuple[int, ...] = (3, 4),
    elem: int = F,
) -> onnx.ModelProto:
    inits = []
    inputs = [_vi("x", elem, list(shape))]
    if pads is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(pads, np.int64), "pads"))
    else:
        inputs.append(_vi("pads", TensorProto.INT64, [2 * len(shape)]))
    names = ["x", "pads"]
    if axes is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        names += ["", "axes"]
    node = oh.make_node("Pad", names, ["y"], name="pad", mode=mode)
    return make_model([node], inputs, [_vi("y", elem, len(shape))], 19, initializers=inits)


def _pad_dynamic_feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "x": rng.standard_normal((3, 4)).astype(np.float32),
        "pads": np.array([2, -1, 4, 5], np.int64),
    }


def _resize(
    mode: str,
    scales: list[float] | None = None,
    sizes: list[int] | None = None,
    interp: str = "linear",
    axes: list[int] | None = None,
) -> onnx.ModelProto:
    inits = []
    names = ["x", ""]
    if scales is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(scales, np.float32), "scales"))
        names.append("scales")
    else:
        names.append("")
    if sizes is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
        names.append("sizes")
    attrs: dict[str, object] = {"coordinate_transformation_mode": mode, "mode": interp}
    if axes is not None:
        attrs["axes"] = axes
    node = oh.make_node("Resize", names, ["y"], name="resize", **attrs)
    return make_model([node], [_vi("x", F, [1, 2, 3, 4])], [_vi("y", F, 4)], 19, initializers=inits)


CASES: list[AdapterCase] = []
for _op in ("Cast", "CastLike"):
    CASES += [
        AdapterCase(_op, 19, "to_fp16", lambda op=_op: _cast(op, TensorProto.FLOAT16, None)),
        AdapterCase(_op, 19, "saturate_ignored", lambda op=_op: _cast(op, TensorProto.INT32, 0)),
        AdapterCase(
            _op,
            19,
            "to_float8_refused",
            lambda op=_op: _cast(op, TensorProto.FLOAT8E4M3FN, 1),
            refuse=r"node 'cast' \(" + _op + r"-19.*FLOAT8E4M3FN, which " + _op + "-",
        ),
    ]
CASES += [
    AdapterCase("AveragePool", 19, "no_dilations", lambda: _avgpool(None)),
    AdapterCase("AveragePool", 19, "unit_dilations", lambda: _avgpool([1, 1])),
    AdapterCase(
        "AveragePool",
        19,
        "dilated_refused",
        lambda: _avgpool([2, 1]),
        refuse=r"node 'pool' \(AveragePool-19.*dilations=\[2, 1\]",
    ),
    AdapterCase(
        "DeformConv",
        19,
        "refused",
        _deformconv,
        refuse=r"node 'dconv' \(DeformConv-19.*does not exist before opset 19",
    ),
    AdapterCase(
        "DeformConv",
        22,
        "refused_from_22",
        lambda: _with_opset(_deformconv(), 22),
        target=18,
        refuse=r"node 'dconv' \(DeformConv-22.*DeformConv-19",
    ),
    AdapterCase("DequantizeLinear", 19, "float_scale", lambda: _dq(TensorProto.INT8, F, False)),
    AdapterCase(
        "DequantizeLinear",
        19,
        "fp16_scale_per_axis",
        lambda: _dq(TensorProto.UINT8, TensorProto.FLOAT16, True),
    ),
    AdapterCase(
        "DequantizeLinear",
        19,
        "bf16_scale_no_zero_point",
        lambda: _dq(TensorProto.INT8, TensorProto.BFLOAT16, False, zp=False),
    ),
    AdapterCase(
        "DequantizeLinear",
        19,
        "float8_refused",
        _dq_float8,
        refuse=r"node 'dq' \(DequantizeLinear-19.*FLOAT8E4M3FN",
    ),
    AdapterCase(
        "QuantizeLinear",
        19,
        "float_per_tensor",
        lambda: _q(F, TensorProto.UINT8, False),
        feeds=_q_feeds,
    ),
    AdapterCase(
        "QuantizeLinear",
        19,
        "saturate_ignored",
        lambda: _q(F, TensorProto.INT8, True, saturate=0),
        feeds=_q_feeds,
    ),
    AdapterCase(
        "QuantizeLinear",
        19,
        "fp16_per_axis",
        lambda: _q(TensorProto.FLOAT16, TensorProto.INT8, True),
        feeds=_q_feeds,
    ),
    AdapterCase(
        "QuantizeLinear",
        19,
        "float8_refused",
        lambda: _q(F, TensorProto.FLOAT8E5M2, False),
        refuse=r"node 'q' \(QuantizeLinear-19.*FLOAT8E5M2",
    ),
    AdapterCase("Pad", 19, "constant", lambda: _pad("constant", [1, 0, 0, 2])),
    AdapterCase("Pad", 19, "reflect", lambda: _pad("reflect", [1, 2, 0, 1])),
    AdapterCase("Pad", 19, "wrap", lambda: _pad("wrap", [2, 1, 1, 1])),
    AdapterCase("Pad", 19, "wrap_beyond_length", lambda: _pad("wrap", [4, 0, 7, 9])),
    AdapterCase("Pad", 19, "wrap_negative_pads", lambda: _pad("wrap", [-1, 3, 2, -2])),
    AdapterCase(
        "Pad",
        19,
        "wrap_axes_int64",
        lambda: _pad("wrap", [2, 3], axes=[-1], shape=(2, 3, 4), elem=TensorProto.INT64),
    ),
    AdapterCase(
        "Pad", 19, "wrap_runtime_pads", lambda: _pad("wrap", None), feeds=_pad_dynamic_feeds
    ),
    AdapterCase("Resize", 19, "half_pixel", lambda: _resize("half_pixel", [1, 1, 2, 1.5])),
    AdapterCase(
        "Resize",
        19,
        "half_pixel_symmetric_integral_scales",
        lambda: _resize("half_pixel_symmetric", [1, 1, 2, 1.5]),
    ),
    AdapterCase(
        "Resize",
        19,
        "half_pixel_symmetric_sizes_nearest",
        lambda: _resize("half_pixel_symmetric", sizes=[6, 8], axes=[2, 3], interp="nearest"),
    ),
    AdapterCase(
        "Resize",
        19,
        "half_pixel_symmetric_sizes_inexact_refused",
        lambda: _resize("half_pixel_symmetric", sizes=[5, 7], axes=[2, 3]),
        refuse=r"node 'resize' \(Resize-19.*fractional output width 4.99999",
    ),
    AdapterCase(
        "Resize",
        19,
        "half_pixel_symmetric_fractional_refused",
        lambda: _resize("half_pixel_symmetric", [1, 1, 1.5, 1]),
        refuse=r"node 'resize' \(Resize-19.*half_pixel_symmetric.*fractional output width 4.5",
    ),
]


def _with_opset(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    from onnxscript_ep_passes.lowering.lower_opset import max_ir_version_for_opset

    model.opset_import[0].version = opset
    model.ir_version = max_ir_version_for_opset(opset)
    return model
