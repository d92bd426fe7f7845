"""Random corruptions of a valid model file (and of its data file), run through the command
line: a clean result or one error line and status 1 or 3, never an exception, and never a
partial output."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, numpy_helper

from onnxscript_ep_passes.cli.program import main
from onnxscript_ep_passes.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED
from tests.harness import make_model


def _valid_files() -> tuple[bytes, bytes]:
    """A model touching the loader's paths: external weights, an If subgraph, a Constant,
    a local function, attributes of several types; and its data file."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    x = oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    branch_out = oh.make_tensor_value_info("b", TensorProto.FLOAT, [2, 8])
    then = oh.make_graph([oh.make_node("Swish", ["h"], ["b"], alpha=0.5)], "then", [], [branch_out])
    other = oh.make_graph([oh.make_node("Relu", ["h"], ["b"])], "else", [], [branch_out])
    body = [oh.make_node("Swish", ["i"], ["o"])]
    function = oh.make_function(
        "local", "F", ["i"], ["o"], body, [oh.make_opsetid("", 24)], attributes=[]
    )
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
        oh.make_node("F", ["m"], ["h"], domain="local", name="call"),
        oh.make_node("Constant", [], ["c"], value_int=1, name="const"),
        oh.make_node("Cast", ["c"], ["cond"], to=TensorProto.BOOL, name="cast"),
        oh.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other, name="if"),
    ]
    model = make_model(
        nodes, [x], [y], 24, initializers=[weight], functions=[function], extra_opsets={"local": 1}
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.onnx"
        onnx.save(model, path, save_as_external_data=True, location="m.onnx.data", size_threshold=0)
        return path.read_bytes(), (Path(tmp) / "m.onnx.data").read_bytes()


MODEL, DATA = _valid_files()


@st.composite
def _corrupted(draw: st.DrawFn, original: bytes) -> bytes:
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete", "splice"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 16))]
        else:  # a piece of the file copied elsewhere: plausible protobuf fields
            size = draw(st.integers(1, 32))
            data[draw(st.integers(0, len(data))) : 0] = data[at : at + size]
    return bytes(data)


_COMMANDS = {
    "lower": ["lower", "{m}", "-o", "{o}", "--target-opset", "21"],
    "lower-ep": ["lower", "{m}", "-o", "{o}", "--ep", "cuda", "--ort-version", "1.24"],
    "report": ["report", "{m}", "--ep", "cuda", "--ort-version", "1.24", "--json"],
}


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    model=st.one_of(_corrupted(MODEL), st.just(MODEL)),
    data=st.one_of(st.just(DATA), _corrupted(DATA)),
    command=st.sampled_from(list(_COMMANDS)),
)
def test_corrupted_files_never_crash_or_leave_partial_output(
    model: bytes, data: bytes, command: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "m.onnx").write_bytes(model)
        (directory / "m.onnx.data").write_bytes(data)
        out_dir = directory / "out"
        out_dir.mkdir()
        out = out_dir / "o.onnx"
        argv = [a.format(m=directory / "m.onnx", o=out) for a in _COMMANDS[command]]
        logging.disable(logging.CRITICAL)
        try:
            status = main(["-q", *argv])  # an exception here is a traceback for the user
        finally:
            logging.disable(logging.NOTSET)
        assert status in (EXIT_OK, EXIT_BAD_INPUT, EXIT_REFUSED)
        written = sorted(p.name for p in out_dir.iterdir())
        if status != EXIT_OK or command == "report":
            assert written == []
        elif written:  # (nothing is written when there is nothing to do)
            assert written in (["o.onnx"], ["o.onnx", "o.onnx.data"])
            onnx.checker.check_model(onnx.load(out))  # complete, with its weights
