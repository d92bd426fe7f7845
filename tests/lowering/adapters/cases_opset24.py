"""Cases for the 24 -> 23 adapters written by the lead (Cast, CastLike, Swish).

Run by test_registry_cases.py.
"""

from __future__ import annotations

import onnx
import onnx.helper as oh
from onnx import TensorProto

from tests.harness import AdapterCase, make_model


def _cast_model(to: int, round_mode: str | None, op: str = "Cast") -> onnx.ModelProto:
    attrs: dict[str, object] = {}
    if round_mode is not None:
        attrs["round_mode"] = round_mode
    if op == "Cast":
        node = oh.make_node("Cast", ["x"], ["y"], name="cast", to=to, **attrs)
        inputs = [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    else:
        node = oh.make_node("CastLike", ["x", "like"], ["y"], name="cast", **attrs)
        inputs = [
            oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            oh.make_tensor_value_info("like", to, [1]),
        ]
    return make_model([node], inputs, [oh.make_tensor_value_info("y", to, [2, 3])], 24)


def _swish_model(alpha: float | None) -> onnx.ModelProto:
    attrs = {} if alpha is None else {"alpha": alpha}
    node = oh.make_node("Swish", ["x"], ["y"], name="swish", **attrs)
    return make_model(
        [node],
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
        24,
    )


CASES: list[AdapterCase] = []
for _op in ("Cast", "CastLike"):
    CASES += [
        AdapterCase(_op, 24, "to_fp16", lambda op=_op: _cast_model(TensorProto.FLOAT16, None, op)),
        AdapterCase(_op, 24, "to_int32", lambda op=_op: _cast_model(TensorProto.INT32, None, op)),
        AdapterCase(
            _op,
            24,
            "round_mode_ignored",
            lambda op=_op: _cast_model(TensorProto.FLOAT16, "down", op),
        ),
        AdapterCase(
            _op,
            24,
            "to_float8e8m0_refused",
            lambda op=_op: _cast_model(TensorProto.FLOAT8E8M0, "up", op),
            refuse=r"node 'cast' \("
            + _op
            + r"-24.*FLOAT8E8M0, which "
            + _op
            + "-23 does not allow",
        ),
    ]
CASES += [
    AdapterCase("Swish", 24, "default_alpha", lambda: _swish_model(None)),
    AdapterCase("Swish", 24, "alpha_0.5", lambda: _swish_model(0.5)),
    AdapterCase("Swish", 24, "to_opset_18", lambda: _swish_model(1.7), target=18),
]
