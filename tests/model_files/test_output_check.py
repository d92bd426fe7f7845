"""The check every written graph passes before it is moved into place (output_check.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto, numpy_helper

from onnxscript_ep_passes.model_files import output_check
from onnxscript_ep_passes.model_files.output_check import check_output, check_serialized
from onnxscript_ep_passes.model_files.serialize import SerializedModel, serialize_parts
from tests.harness import make_model

X = oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
Y = oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])


def _external(tmp_path: Path) -> onnx.ModelProto:
    """y = SimplifiedLayerNormalization(x @ w, scale): an ORT op in the ai.onnx domain
    (no ONNX schema), w and scale in a data file, w also read inside an If branch."""
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    scale = numpy_helper.from_array(np.ones(4, np.float32), "scale")
    out = oh.make_tensor_value_info("b", TensorProto.FLOAT, [2, 4])
    branch = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["b"])], "branch", [], [out])
    cond = oh.make_tensor_value_info("c", TensorProto.BOOL, [])
    nodes = [
        oh.make_node("If", ["c"], ["h"], then_branch=branch, else_branch=branch),
        oh.make_node("SimplifiedLayerNormalization", ["h", "scale"], ["y"], name="norm"),
    ]
    model = make_model(nodes, [X, cond], [Y], 24, initializers=[w, scale])
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, size_threshold=0)
    return onnx.load(tmp_path / "m.onnx", load_external_data=False)


def test_ort_ops_and_external_data_pass_and_the_model_is_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proto = _external(tmp_path)
    before = proto.SerializeToString()
    monkeypatch.chdir(tmp_path.parent)  # the checker, given bytes, looks in the cwd
    check_output(proto, tmp_path / "out.onnx")
    assert proto.SerializeToString() == before
    with pytest.raises(onnx.checker.ValidationError):  # what the check sets aside
        onnx.checker.check_model(proto, full_check=True)


def test_a_model_the_checker_refuses_is_refused_in_one_line(tmp_path: Path) -> None:
    w = numpy_helper.from_array(np.ones((3, 4), np.float32), "w")  # x is [2, 4]: no MatMul
    model = make_model([oh.make_node("MatMul", ["x", "w"], ["y"])], [X], [Y], 24, initializers=[w])
    with pytest.raises(ValueError, match="Incompatible dimensions") as error:
        check_output(model, tmp_path / "o.onnx")
    message = str(error.value)
    assert message.startswith(f"refusing to write '{tmp_path / 'o.onnx'}'") and "\n" not in message
    assert message.endswith("nothing was written")


@pytest.mark.parametrize("kind", ["input", "output"])
def test_a_model_input_or_output_without_shape_is_named(tmp_path: Path, kind: str) -> None:
    shapeless = oh.make_tensor_value_info(kind[0], TensorProto.FLOAT, None)
    inputs, outputs = ([shapeless], [Y]) if kind == "input" else ([X], [shapeless])
    node = oh.make_node("Relu", [inputs[0].name], [outputs[0].name])
    with pytest.raises(ValueError, match=f"{kind} '{kind[0]}' of graph 'test_graph' has no shape"):
        check_output(make_model([node], inputs, outputs, 24), tmp_path / "o.onnx")


def _flat_external(tmp_path: Path, constant_external: bool) -> onnx.ModelProto:
    """y = x @ w + c: w in a data file, c a Constant (its tensor external too when
    ``constant_external``), no subgraph."""
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    value = numpy_helper.from_array(np.ones((2, 4), np.float32), "c")
    nodes = [
        oh.make_node("Constant", [], ["c"], value=value),
        oh.make_node("MatMul", ["x", "w"], ["h"]),
        oh.make_node("Add", ["h", "c"], ["y"]),
    ]
    model = make_model(nodes, [X], [Y], 24, initializers=[w])
    onnx.save(
        model,
        tmp_path / "f.onnx",
        save_as_external_data=True,
        size_threshold=0,
        convert_attribute=constant_external,
    )
    return onnx.load(tmp_path / "f.onnx", load_external_data=False)


@pytest.mark.parametrize("kind", ["subgraphs", "flat", "flat_constant_external"])
def test_checked_copy_from_the_bytes_is_the_one_made_by_walking(tmp_path: Path, kind: str) -> None:
    """The serialized model only spares walks: the copy checked is the same."""
    from onnxscript_ep_passes.model_files.output_check import _checkable

    if kind == "subgraphs":
        proto = _external(tmp_path)
    else:
        proto = _flat_external(tmp_path, constant_external=kind == "flat_constant_external")
    walked = _checkable(proto)
    from_bytes = _checkable(proto, proto.SerializeToString())
    assert from_bytes.SerializeToString() == walked.SerializeToString()
    spent = onnx.ModelProto()
    spent.CopyFrom(proto)  # a spent proto is set aside in place: the same model checked
    in_place = _checkable(spent, spent.SerializeToString(), spent=True)
    assert in_place is spent and in_place.SerializeToString() == walked.SerializeToString()
    if kind != "subgraphs":
        constant = proto.graph.node[0].attribute[0].t
        external = kind == "flat_constant_external"
        assert (constant.data_location == TensorProto.EXTERNAL) == external
        assert from_bytes.graph.node[0].attribute[0].t.data_location == TensorProto.DEFAULT


def _parts(proto: onnx.ModelProto) -> tuple[SerializedModel, bytes]:
    model = ir.serde.deserialize_model(proto)
    parts = serialize_parts(model)
    return parts, parts.data()


def _outcome(check: Callable[[], None]) -> str:
    try:
        check()
    except ValueError as error:
        return str(error)
    return "passed"


@pytest.mark.parametrize(
    "kind", ["flat", "flat_constant_external", "subgraphs", "refused", "ort_op", "opset_missing"]
)
def test_the_serialized_check_is_the_proto_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """check_serialized, whichever way it checks, says what check_output says."""
    monkeypatch.chdir(tmp_path.parent)
    if kind == "subgraphs":
        proto = _external(tmp_path)
    elif kind in ("refused", "ort_op"):
        w = numpy_helper.from_array(np.ones((3 if kind == "refused" else 4, 4), np.float32), "w")
        op = "MatMul" if kind == "refused" else "SimplifiedLayerNormalization"
        nodes = [oh.make_node("Relu", ["x"], ["r"]), oh.make_node(op, ["r", "w"], ["y"])]
        proto = make_model(nodes, [X], [Y], 24, initializers=[w])
    else:
        proto = _flat_external(tmp_path, constant_external=kind == "flat_constant_external")
        if kind == "opset_missing":
            del proto.opset_import[:]
    parts, data = _parts(proto)
    assert bool(parts.nodes) == (kind != "subgraphs")  # held apart unless a node holds a graph
    out = tmp_path / "o.onnx"
    full = onnx.ModelProto.FromString(data)
    expected = _outcome(lambda: check_output(full, out, data))
    if kind in ("flat", "refused", "opset_missing"):  # checked from the bytes, no proto built

        def whole_proto_checked(*args: object) -> None:
            raise AssertionError("the whole proto was checked")

        monkeypatch.setattr(output_check, "check_output", whole_proto_checked)
    assert _outcome(lambda: check_serialized(parts, data, out)) == expected
    passing = ("flat", "flat_constant_external", "subgraphs", "ort_op")
    assert (expected == "passed") == (kind in passing), expected
    assert parts.data() == data  # the shell is not changed
