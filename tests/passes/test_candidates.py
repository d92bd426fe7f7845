"""The candidates of the EP search: a legalized candidate's model rebuilt on demand."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir

from onnxscript_ep_passes.ep import KernelTable
from onnxscript_ep_passes.passes.candidates import SearchSettings
from onnxscript_ep_passes.passes.lower_for_ep import _search
from tests.harness import make_model, run_model

FLOAT = onnx.TensorProto.FLOAT
_OPS = (
    *("Add", "Cast", "CastLike", "Concat", "Constant", "ConstantOfShape", "Div", "Flatten"),
    *("Mul", "Neg", "Pow", "Reciprocal", "ReduceMean", "Relu", "Reshape", "Shape", "Size"),
    *("Slice", "Sqrt", "Sub", "Sum", "Tanh"),
)


def _ops(model: ir.Model) -> collections.Counter[str]:
    return collections.Counter(n.op_type for n in ir.traversal.RecursiveGraphIterator(model.graph))


def test_a_legalized_model_not_kept_is_rebuilt_the_same() -> None:
    # Gelu has no kernel: every candidate opset 24..20 gets a legalized variant. The
    # search keeps only the best-ranked one's model; dominance may choose another, whose
    # model is then rebuilt (lowering steps, then legalization) and must be the same.
    original = make_model(
        [
            oh.make_node("Gelu", ["x"], ["g"], name="gelu", approximate="tanh"),
            oh.make_node("Neg", ["g"], ["y"], name="neg"),
        ],
        [oh.make_tensor_value_info("x", FLOAT, [2, 5])],
        [oh.make_tensor_value_info("y", FLOAT, [2, 5])],
        24,
    )
    table = KernelTable.from_rows("TestEP", "0.0", "test", [("", op, 1, 40, None) for op in _OPS])
    model = ir.from_proto(original)
    _, _, search = _search(model, table, None, 20, True, SearchSettings(keep_models=True))
    assert sorted(search.legalized) == [20, 21, 22, 23, 24]
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)}
    expected, _ = run_model(original, feeds)
    for opset, candidate in search.legalized.items():
        kept = candidate.model
        assert kept is not None
        candidate.model = None
        rebuilt = search.model_of(model, candidate)
        assert rebuilt is candidate.model and rebuilt is not kept
        assert rebuilt.opset_imports[""] == opset
        assert _ops(rebuilt) == _ops(kept), opset
        proto = ir.to_proto(rebuilt)
        onnx.checker.check_model(proto, full_check=True)
        actual, how = run_model(proto, feeds)
        assert how == "onnxruntime"
        np.testing.assert_allclose(actual[0], expected[0], rtol=1e-6, atol=1e-6)
    assert _ops(model) == {"Gelu": 1, "Neg": 1}  # the model searched is untouched
