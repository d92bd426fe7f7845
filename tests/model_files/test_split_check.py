"""onnx's full check, its halves run at once in two processes (split_check.py): the same
answer as ``check_model(full_check=True)``, and no child process left behind."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from onnxscript_ep_passes.core import forked
from onnxscript_ep_passes.model_files import split_check
from onnxscript_ep_passes.model_files.output_check import check_output
from onnxscript_ep_passes.model_files.split_check import full_check
from tests.harness import make_model

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="the split runs on Linux only (fork); elsewhere it is off"
)

X = oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
Y = oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])


@pytest.fixture
def split_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """Split the check of every model, however small (module rule 1's size bound off)."""
    monkeypatch.setattr(split_check, "SPLIT_BYTES", 0)
    if not forked.can_fork():
        pytest.skip("this process may use one CPU only: the check is never split here")


def _valid() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    nodes = [oh.make_node("MatMul", ["x", "w"], ["h"]), oh.make_node("Relu", ["h"], ["y"])]
    return make_model(nodes, [X], [Y], 24, initializers=[w])


def _structural_error() -> onnx.ModelProto:
    """Relu with two inputs: the structural checks fail (and the inference would too)."""
    return make_model([oh.make_node("Relu", ["x", "x"], ["y"])], [X], [Y], 24)


def _inference_error() -> onnx.ModelProto:
    """MatMul of [2, 4] by [3, 4]: structurally sound, refused by strict inference."""
    w = numpy_helper.from_array(np.ones((3, 4), np.float32), "w")
    return make_model([oh.make_node("MatMul", ["x", "w"], ["y"])], [X], [Y], 24, initializers=[w])


def _type_error() -> onnx.ModelProto:
    """Add of float and int64 values: refused by the inference's type checks."""
    i = oh.make_tensor_value_info("i", TensorProto.INT64, [2, 4])
    return make_model([oh.make_node("Add", ["x", "i"], ["y"])], [X, i], [Y], 24)


def _answer(check: object, model: onnx.ModelProto) -> tuple[type[BaseException] | None, str]:
    try:
        check(model.SerializeToString())  # type: ignore[operator]
    except Exception as error:
        return type(error), str(error)
    return None, ""


def _full(data: bytes) -> None:
    onnx.checker.check_model(data, full_check=True)


@pytest.mark.parametrize("make", [_valid, _structural_error, _inference_error, _type_error])
def test_split_answers_as_the_full_check(
    make: object, split_always: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = make()  # type: ignore[operator]
    forks = []
    real = forked.Child.__init__

    def counted(self: forked.Child, work: object) -> None:
        forks.append(work)
        real(self, work)  # type: ignore[arg-type]

    monkeypatch.setattr(forked.Child, "__init__", counted)
    expected = _answer(_full, model)
    assert _answer(full_check, model) == expected
    assert len(forks) == 1  # it was split
    if make is not _valid:
        assert expected[0] is not None


def test_small_models_are_checked_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[object] = []
    monkeypatch.setattr(forked.Child, "__init__", lambda self, work: created.append(work))
    assert _answer(full_check, _inference_error()) == _answer(_full, _inference_error())
    assert created == []  # far below SPLIT_BYTES


def test_the_output_check_refuses_the_same_way_split(
    tmp_path: Path, split_always: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = []
    for split in (True, False):
        monkeypatch.setattr(forked, "FORK", split)
        with pytest.raises(ValueError, match="Incompatible dimensions") as error:
            check_output(_inference_error(), tmp_path / "o.onnx")
        messages.append(str(error.value))
    assert messages[0] == messages[1]
