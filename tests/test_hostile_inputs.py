"""Hostile and malformed inputs, through the command line: one line naming the problem,
exit status 1, never a traceback, nothing written, nothing read from outside the model's
directory and never more than declared."""

from __future__ import annotations

import json
import logging
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from onnxscript_ep_passes.cli.program import main
from onnxscript_ep_passes.errors import EXIT_BAD_INPUT, EXIT_USAGE
from tests.harness import make_model, run_cli, run_model

X = oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
Y = oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])


def _swish(opset: int = 24) -> onnx.ModelProto:
    return make_model([oh.make_node("Swish", ["x"], ["y"], name="swish")], [X], [Y], opset)


def _write(path: Path, model: onnx.ModelProto) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def _raw(field: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (to build what protobuf refuses to build)."""

    def varint(n: int) -> bytes:
        out = b""
        while True:
            low, n = n & 0x7F, n >> 7
            if not n:
                return out + bytes([low])
            out += bytes([low | 0x80])

    return varint(field << 3 | 2) + varint(len(payload)) + payload


def _nested_if(depth: int) -> bytes:
    """A model whose If nodes nest ``depth`` deep (beyond protobuf's recursion limit)."""
    out = oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    leaf = oh.make_graph([oh.make_node("Swish", ["x"], ["y"])], "leaf", [], [out])
    graph = leaf.SerializeToString()
    tail = _raw(12, out.SerializeToString())
    for _ in range(depth):
        then = _raw(1, b"then_branch") + b"\xa0\x01\x05" + _raw(6, graph)  # type=GRAPH
        other = _raw(1, b"else_branch") + b"\xa0\x01\x05" + _raw(6, leaf.SerializeToString())
        node = _raw(1, b"c") + _raw(2, b"y") + _raw(4, b"If") + _raw(5, then) + _raw(5, other)
        graph = _raw(1, node) + tail
    cond = oh.make_tensor_value_info("c", TensorProto.BOOL, [])
    graph += _raw(11, X.SerializeToString()) + _raw(11, cond.SerializeToString())
    opset = oh.make_opsetid("", 24).SerializeToString()
    return b"\x08\x0a" + _raw(8, opset) + _raw(7, graph)  # ir_version 10


def _duplicate_names() -> onnx.ModelProto:
    nodes = [oh.make_node("Relu", ["x"], ["y"], name="a"), oh.make_node("Swish", ["x"], ["y"])]
    return make_model(nodes, [X], [Y], 24)


def _cycle() -> onnx.ModelProto:
    nodes = [
        oh.make_node("Add", ["x", "b"], ["a"], name="add"),
        oh.make_node("Swish", ["a"], ["b"], name="swish"),
        oh.make_node("Relu", ["a"], ["y"], name="relu"),
    ]
    return make_model(nodes, [X], [Y], 24)


def _recursive_function() -> onnx.ModelProto:
    body = [oh.make_node("F", ["i"], ["o"], domain="local")]
    imports = [oh.make_opsetid("", 24), oh.make_opsetid("local", 1)]
    function = oh.make_function("local", "F", ["i"], ["o"], body, imports)
    model = make_model([oh.make_node("F", ["x"], ["y"], domain="local")], [X], [Y], 24)
    model.opset_import.append(oh.make_opsetid("local", 1))
    model.functions.append(function)
    return model


def _bad_attribute(op: str) -> onnx.ModelProto:
    if op == "AveragePool":
        x = oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])
        y = oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 3, 3])
        node = oh.make_node("AveragePool", ["x"], ["y"], name="pool", kernel_shape=[2, 2])
        node.attribute.append(oh.make_attribute("dilations", 1))  # INTS in the schema
        return make_model([node], [x], [y], 22)
    node = oh.make_node("Mod", ["x", "x"], ["y"], name="mod")
    node.attribute.append(oh.make_attribute("fmod", [1, 2]))  # INT in the schema
    return make_model([node], [X], [Y], 28)


def _sparse(where: str) -> onnx.ModelProto:
    """w (float[4, 4], two values) as a sparse initializer, of the graph or of an If
    branch, or as a Constant's sparse_value."""
    values = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "w")
    indices = numpy_helper.from_array(np.array([0, 5], np.int64), "w_indices")
    sparse = oh.make_sparse_tensor(values, indices, [4, 4])
    nodes = [oh.make_node("MatMul", ["x", "w"], ["h"]), oh.make_node("Relu", ["h"], ["y"])]
    if where == "constant":
        nodes.insert(0, oh.make_node("Constant", [], ["w"], name="c", sparse_value=sparse))
    model = make_model(nodes, [X], [Y], 24)
    if where == "graph":
        model.graph.sparse_initializer.append(sparse)
    elif where == "subgraph":
        out = oh.make_tensor_value_info("z", TensorProto.FLOAT, [4, 4])
        branch = oh.make_graph([oh.make_node("Identity", ["w"], ["z"])], "branch", [], [out])
        branch.sparse_initializer.append(sparse)
        model.graph.input.append(oh.make_tensor_value_info("c", TensorProto.BOOL, []))
        model.graph.node[0].input[1] = "v"
        model.graph.node.insert(
            0, oh.make_node("If", ["c"], ["v"], then_branch=branch, else_branch=branch)
        )
    return model


def _foreign_domain(where: str) -> onnx.ModelProto:
    """A node in domain 'custom', which the model (or the function holding it) does not
    import."""
    if where == "graph":
        nodes = [oh.make_node("Foo", ["x"], ["y"], domain="custom", name="foo")]
        return make_model(nodes, [X], [Y], 24)
    body = [oh.make_node("Foo", ["i"], ["o"], domain="custom", name="foo")]
    function = oh.make_function("local", "F", ["i"], ["o"], body, [oh.make_opsetid("", 24)])
    node = oh.make_node("F", ["x"], ["y"], domain="local")
    return make_model([node], [X], [Y], 24, functions=[function], extra_opsets={"local": 1})


def _local_function(domain: str, name: str, twice: bool = False) -> onnx.ModelProto:
    body = [oh.make_node("Neg", ["i"], ["o"])]
    function = oh.make_function(domain, name, ["i"], ["o"], body, [oh.make_opsetid("", 24)])
    extra = {domain: 1} if domain else None
    node = oh.make_node(name, ["x"], ["y"], domain=domain)
    functions = [function, function] if twice else [function]
    return make_model([node], [X], [Y], 24, functions=functions, extra_opsets=extra)


def _ir3() -> onnx.ModelProto:
    """IR version 3 at opset 24: its initializer is not a graph input, as IR 3 requires."""
    weight = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    nodes = [oh.make_node("MatMul", ["x", "w"], ["y"])]
    model = make_model(nodes, [X], [Y], 24, initializers=[weight])
    model.ir_version = 3
    return model


def _opset_twice() -> onnx.ModelProto:
    model = _swish(24)
    model.opset_import.append(oh.make_opsetid("ai.onnx", 21))
    return model


def _swish_with(edit: Callable[[onnx.ModelProto], object]) -> Callable[[], bytes]:
    """The Swish model with one field the checker requires broken by ``edit``."""

    def build() -> bytes:
        model = _swish()
        edit(model)
        return model.SerializeToString()

    return build


def _twice_metadata(model: onnx.ModelProto) -> None:
    model.metadata_props.add(key="author", value="a")
    model.metadata_props.add(key="author", value="b")


def _string_raw_data(model: onnx.ModelProto) -> None:
    strings = oh.make_tensor("s", TensorProto.STRING, [1], [b"a"])
    strings.raw_data = b"abc"
    model.graph.initializer.append(strings)


_TRUNCATED = _swish().SerializeToString()[:-9]

# name -> (file contents, words the one-line error must contain)
MALFORMED: dict[str, tuple[Callable[[], bytes], str]] = {
    "empty": (lambda: b"", "empty file"),
    "random": (lambda: np.random.default_rng(0).bytes(4096), "not an ONNX model"),
    "truncated": (lambda: _TRUNCATED, "not an ONNX model"),
    "text": (lambda: b"hello, this is not a model\n" * 30, "not an ONNX model"),
    "nested-if-50": (lambda: _nested_if(50), "nested too deeply"),
    "duplicate-names": (lambda: _duplicate_names().SerializeToString(), "'y' is defined twice"),
    "cycle": (lambda: _cycle().SerializeToString(), "cycle"),
    "recursive-function": (
        lambda: _recursive_function().SerializeToString(),
        "'local::F' calls itself",
    ),
    "attr-int-for-ints": (
        lambda: _bad_attribute("AveragePool").SerializeToString(),
        "node 'pool' (AveragePool-22) in graph 'test_graph': attribute 'dilations' is INT",
    ),
    "attr-ints-for-int": (
        lambda: _bad_attribute("Mod").SerializeToString(),
        "node 'mod' (Mod-28) in graph 'test_graph': attribute 'fmod' is INTS",
    ),
    "opset-29": (lambda: _swish(29).SerializeToString(), "ai.onnx opset 29"),
    "opset-99": (lambda: _swish(99).SerializeToString(), "ai.onnx opset 99"),
    # Data that cannot be carried is refused by name, never dropped.
    "sparse-initializer": (
        lambda: _sparse("graph").SerializeToString(),
        "sparse initializer 'w' in graph 'test_graph' is not supported",
    ),
    "sparse-initializer-in-subgraph": (
        lambda: _sparse("subgraph").SerializeToString(),
        "sparse initializer 'w' in subgraph 'then_branch' of node <unnamed> (If)",
    ),
    "sparse-constant": (
        lambda: _sparse("constant").SerializeToString(),
        "attribute 'sparse_value' of node 'c' (Constant) in graph 'test_graph' holds a sparse",
    ),
    # Malformed: each of these once gave an OUT that fails onnx's checker, with exit 0.
    "domain-not-imported": (
        lambda: _foreign_domain("graph").SerializeToString(),
        "node 'foo' (custom::Foo) in graph 'test_graph' is in domain 'custom', which the "
        "model does not import",
    ),
    "domain-not-imported-by-function": (
        lambda: _foreign_domain("function").SerializeToString(),
        "is in domain 'custom', which function 'local::F' does not import",
    ),
    "function-in-onnx-domain": (
        lambda: _local_function("", "Relu").SerializeToString(),
        "local function 'Relu' is in the ai.onnx domain",
    ),
    "function-twice": (
        lambda: _local_function("local", "F", twice=True).SerializeToString(),
        "local function 'local::F' is defined twice",
    ),
    "opset-imported-twice": (lambda: _opset_twice().SerializeToString(), "imports ai.onnx twice"),
    "graph-without-name": (_swish_with(lambda m: m.graph.ClearField("name")), "has no name"),
    "node-without-op-type": (
        _swish_with(lambda m: m.graph.node[0].ClearField("op_type")),
        "node 'swish' () in graph 'test_graph' has no op_type",
    ),
    "initializer-without-name": (
        _swish_with(lambda m: m.graph.initializer.append(numpy_helper.from_array(np.ones(2)))),
        "initializer #0 in graph 'test_graph' has no name",
    ),
    "input-without-type": (
        _swish_with(lambda m: m.graph.input[0].ClearField("type")),
        "input 'x' of the model has no type",
    ),
    "negative-dimension": (
        _swish_with(
            lambda m: setattr(m.graph.input[0].type.tensor_type.shape.dim[0], "dim_value", -3)
        ),
        "value 'x' in graph 'test_graph' has a negative dimension [-3, 4]",
    ),
    "metadata-key-twice": (_swish_with(_twice_metadata), "metadata_props key 'author' appears"),
    "string-raw-data": (
        _swish_with(_string_raw_data),
        "initializer 's' in graph 'test_graph' is a string tensor holding raw_data",
    ),
    "ir3-initializer-not-input": (
        lambda: _ir3().SerializeToString(),
        "initializer 'w' in graph 'test_graph' is not a graph input, which IR version 3 requires",
    ),
}

COMMANDS = {
    "lower": ["lower", "{model}", "-o", "{out}", "--target-opset", "21"],
    "lower-23": ["lower", "{model}", "-o", "{out}", "--target-opset", "23"],  # proto fast path
    "optimize": ["optimize", "{model}", "-o", "{out}", "--ep", "cuda", "--ort-version", "1.24"],
    "lower-ep": ["lower", "{model}", "-o", "{out}", "--ep", "cuda", "--ort-version", "1.24"],
    "report": ["report", "{model}", "--ep", "cuda", "--ort-version", "1.24"],
}


def _cli(tmp_path: Path, command: str, model: Path, caplog: pytest.LogCaptureFixture) -> int:
    out = tmp_path / "out" / "lowered.onnx"
    out.parent.mkdir(exist_ok=True)
    argv = [a.format(model=model, out=out) for a in COMMANDS[command]]
    with caplog.at_level(logging.INFO):
        status = main(["-q", *argv])  # an exception here is the traceback a user would see
    assert not any(out.parent.iterdir()), "nothing may be written for a bad input"
    return status


def _error_line(caplog: pytest.LogCaptureFixture) -> str:
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert "\n" not in errors[0] and "Traceback" not in errors[0]
    return errors[0]


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_input_is_one_line_and_status_1(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str, command: str
) -> None:
    build, expected = MALFORMED[case]
    model = tmp_path / f"{case}.onnx"
    model.write_bytes(build())
    before = model.read_bytes()
    assert _cli(tmp_path, command, model, caplog) == EXIT_BAD_INPUT
    line = _error_line(caplog)
    assert line.startswith(str(model)), line
    assert expected in line
    assert model.read_bytes() == before


# -- external data --------------------------------------------------------------------


def _external_model(location: str, *, offset: int = 0, length: int | None = 64) -> onnx.ModelProto:
    """y = x @ w with w (4x4 float, 64 bytes) declared at ``location``."""
    weight = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    model = make_model(
        [oh.make_node("MatMul", ["x", "w"], ["h"]), oh.make_node("Swish", ["h"], ["y"])],
        [X],
        [Y],
        24,
        initializers=[weight],
    )
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": str(offset)}
    if length is not None:
        entries["length"] = str(length)
    for key, value in entries.items():
        tensor.external_data.add(key=key, value=value)
    return model


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"TOP-SECRET " * 120)
    return secret


def _case_absolute(model_dir: Path, secret: Path) -> str:
    return str(secret)


def _case_dotdot(model_dir: Path, secret: Path) -> str:
    return f"../{secret.name}"


def _case_symlink_out(model_dir: Path, secret: Path) -> str:
    (model_dir / "w.bin").symlink_to(secret)
    return "w.bin"


def _case_dev_zero(model_dir: Path, secret: Path) -> str:
    return "/dev/zero"


def _case_symlink_dev_zero(model_dir: Path, secret: Path) -> str:
    (model_dir / "w.bin").symlink_to("/dev/zero")
    return "w.bin"


def _case_directory(model_dir: Path, secret: Path) -> str:
    (model_dir / "w.bin").mkdir()
    return "w.bin"


def _case_missing(model_dir: Path, secret: Path) -> str:
    return "nowhere.bin"


def _case_hard_link(model_dir: Path, secret: Path) -> str:
    os.link(secret, model_dir / "w.bin")
    return "w.bin"


def _case_short_file(model_dir: Path, secret: Path) -> str:
    (model_dir / "w.bin").write_bytes(b"\0" * 40)  # 64 declared
    return "w.bin"


EXTERNAL: dict[str, tuple[Callable[[Path, Path], str], str]] = {
    "absolute": (_case_absolute, "absolute path"),
    "dotdot": (_case_dotdot, "leaves the model's directory"),
    "symlink-out": (_case_symlink_out, "outside"),
    "dev-zero": (_case_dev_zero, "absolute path"),
    "symlink-dev-zero": (_case_symlink_dev_zero, "outside"),
    "directory": (_case_directory, "not a regular file"),
    "missing": (_case_missing, "cannot be read"),
    "hard-link": (_case_hard_link, "hard links"),
    "short-file": (_case_short_file, "declares bytes 0..64, but the file holds 40"),
}


@pytest.mark.parametrize("weights", ["copy_file", "rewrite"])
@pytest.mark.parametrize("case", list(EXTERNAL))
def test_external_data_outside_or_unusable_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str, weights: str
) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    make_location, expected = EXTERNAL[case]
    location = make_location(model_dir, _secret(tmp_path))
    path = _write(model_dir / "m.onnx", _external_model(location))
    out = tmp_path / "out" / "lowered.onnx"
    out.parent.mkdir()
    argv = ["-q", "lower", str(path), "-o", str(out), "--target-opset", "23"]
    with caplog.at_level(logging.INFO):
        assert main([*argv, "--weights", weights]) == EXIT_BAD_INPUT
    line = _error_line(caplog)
    assert f"tensor 'w': external data location '{location}'" in line
    assert expected in line
    assert not any(out.parent.iterdir())


@pytest.mark.parametrize(
    ("offset", "length", "expected"),
    [
        (1160, 64, "declares bytes 1160..1224, but the file holds 1200"),
        (0, 1 << 40, "declares length 1099511627776, but the tensor needs 64 bytes"),
        (-8, 64, "negative offset"),
    ],
)
def test_declared_range_must_lie_in_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, offset: int, length: int, expected: str
) -> None:
    (tmp_path / "w.bin").write_bytes(np.arange(300, dtype=np.float32).tobytes())  # 1200 B
    path = _write(tmp_path / "m.onnx", _external_model("w.bin", offset=offset, length=length))
    with caplog.at_level(logging.INFO):
        status = main(["lower", str(path), "-o", str(tmp_path / "o.onnx"), "--target-opset", "23"])
    assert status == EXIT_BAD_INPUT
    assert expected in _error_line(caplog)
    assert not (tmp_path / "o.onnx").exists()


def test_copy_never_reads_past_the_declared_range(tmp_path: Path) -> None:
    """The data file holds the tensor and then bytes no tensor declares: they stay behind."""
    secret = b"PRIVATE-KEY " * 100
    (tmp_path / "w.bin").write_bytes(np.eye(4, dtype=np.float32).tobytes() + secret)
    path = _write(tmp_path / "m.onnx", _external_model("w.bin"))
    out = tmp_path / "out" / "lowered.onnx"
    out.parent.mkdir()
    assert main(["-q", "lower", str(path), "-o", str(out), "--target-opset", "23"]) == 0
    written = b"".join(p.read_bytes() for p in out.parent.iterdir())
    assert b"PRIVATE-KEY" not in written
    assert (out.parent / "lowered.onnx.data").stat().st_size == 64
    onnx.checker.check_model(str(out), full_check=True)


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "w.bin")
    path = _write(tmp_path / "m.onnx", _external_model("w.bin"))
    out = str(tmp_path / "o.onnx")
    # The old code blocked forever reading the FIFO.
    result = run_cli("lower", str(path), "-o", out, "--target-opset", "23", timeout=60)
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert "not a regular file" in result.stderr and "Traceback" not in result.stderr


# -- huge declared shapes -------------------------------------------------------------


# The child's own peak RSS is VmHWM of its address space: ``ru_maxrss`` would also count
# the pytest process it was forked from (Linux carries the high-water mark across fork and
# exec), which grows with the tests run before this one.
_MEASURED_CLI = """
import sys
from onnxscript_ep_passes.cli.program import main
status = main(sys.argv[1:])
with open("/proc/self/status") as f:
    peak = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
sys.stderr.write(f"peak-rss-kib={peak}")
sys.exit(status)
"""


def _limit_memory() -> None:
    limit = 6 * 1024**3  # address space: the old code reached for 8 GB and more here
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@pytest.mark.parametrize("command", ["lower", "report"])
def test_huge_declared_shape_keeps_memory_bounded(tmp_path: Path, command: str) -> None:
    """An 88-byte model: Range over Size(x) with x declared float[1000000000]. ONNX's data
    propagation would materialize the 10^9 values; the lowering must not."""
    x = oh.make_tensor_value_info("x", TensorProto.FLOAT, [1_000_000_000])
    y = oh.make_tensor_value_info("y", TensorProto.INT64, [None])
    nodes = [oh.make_node("Size", ["x"], ["n"]), oh.make_node("Range", ["zero", "n", "one"], ["y"])]
    scalars = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
    ]
    path = _write(tmp_path / "huge.onnx", make_model(nodes, [x], [y], 28, initializers=scalars))
    args = {
        "lower": ["lower", str(path), "-o", str(tmp_path / "o.onnx"), "--target-opset", "18"],
        "report": ["report", str(path), "--ep", "cuda", "--ort-version", "1.24"],
    }[command]
    result = subprocess.run(
        [sys.executable, "-c", _MEASURED_CLI, "-q", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=_limit_memory,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "shape inference failed" not in result.stderr  # the old code ran out of memory
    peak_mib = int(result.stderr.rsplit("peak-rss-kib=", 1)[1]) // 1024
    assert peak_mib < 1024, f"{peak_mib} MiB"
    if command == "lower":
        lowered = onnx.load(tmp_path / "o.onnx")
        assert [o.version for o in lowered.opset_import if o.domain == ""] == [18]


# -- every type carried, and no OUT that fails onnx's checker -----------------------------


def test_string_tensors_pass_every_command(tmp_path: Path) -> None:
    """A string initializer (and Identity over it) on each command: exit 0, OUT valid and
    the strings kept (the cost model once raised 'Bitwidth not available: STRING', and a
    folded string could not be saved)."""
    strings = oh.make_tensor("s", TensorProto.STRING, [2], [b"a", b"bc"])
    words = oh.make_tensor_value_info("words", TensorProto.STRING, [2])
    nodes = [oh.make_node("Swish", ["x"], ["y"]), oh.make_node("Identity", ["s"], ["words"])]
    path = _write(
        tmp_path / "m.onnx", make_model(nodes, [X], [Y, words], 24, initializers=[strings])
    )
    ep = ["--ep", "cuda", "--ort-version", "1.24"]
    for name, args in {
        "ep": ["lower", str(path), "-o", str(tmp_path / "ep.onnx"), *ep],
        "21": ["lower", str(path), "-o", str(tmp_path / "21.onnx"), "--target-opset", "21"],
        "optimized": ["optimize", str(path), "-o", str(tmp_path / "optimized.onnx"), *ep],
        "report": ["report", str(path), *ep, "--json"],
    }.items():
        result = run_cli(*args)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
        if name == "report":
            continue
        onnx.checker.check_model(str(tmp_path / f"{name}.onnx"), full_check=True)
        feeds = {"x": np.ones((2, 4), np.float32)}
        outputs, _ = run_model(onnx.load(tmp_path / f"{name}.onnx"), feeds)
        assert list(outputs[1]) == ["a", "bc"]


@pytest.mark.parametrize(
    "args",
    [
        ["lower", "{model}", "-o", "{out}", "--target-opset", "23"],  # the proto fast path
        ["lower", "{model}", "-o", "{out}", "--target-opset", "21", "--external-data", "never"],
        ["lower", "{model}", "-o", "{out}", "--target-opset", "21", "--weights", "rewrite"],
        ["lower", "{model}", "-o", "{out}", "--ep", "cuda", "--write-unchanged"],
        ["optimize", "{model}", "-o", "{out}", "--ep", "cuda", "--ort-version", "1.24"],
    ],
    ids=["fast-path", "ir-inline", "ir-rewrite", "ep-early-copy", "optimize"],
)
def test_an_output_failing_onnx_checker_is_never_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, args: list[str]
) -> None:
    """x [2, 4] @ w [3, 4] cannot be multiplied: the checks on reading leave shapes to ORT,
    but onnx's checker refuses the result, so each write path refuses OUT before the
    rename: one line, exit 1, nothing left, the input unchanged."""
    model_dir, out_dir = tmp_path / "model", tmp_path / "out"
    model_dir.mkdir(), out_dir.mkdir()
    nodes = [oh.make_node("MatMul", ["x", "w"], ["h"]), oh.make_node("Relu", ["h"], ["y"])]
    weight = numpy_helper.from_array(np.ones((3, 4), np.float32), "w")
    model = make_model(nodes, [X], [Y], 24, initializers=[weight])
    path = model_dir / "m.onnx"
    onnx.save(model, path, save_as_external_data=True, size_threshold=0)
    before = {p.name: p.read_bytes() for p in model_dir.iterdir()}
    out = out_dir / "o.onnx"
    with caplog.at_level(logging.INFO):
        status = main(["-q", *(a.format(model=path, out=out) for a in args)])
    assert status == EXIT_BAD_INPUT
    line = _error_line(caplog)
    assert line.startswith(f"refusing to write '{out}': the result fails onnx's checker"), line
    assert "Incompatible dimensions for matrix multiplication" in line
    assert list(out_dir.iterdir()) == []
    assert {p.name: p.read_bytes() for p in model_dir.iterdir()} == before


# -- outputs that would destroy an input or another output ----------------------------


def _save_with_data(path: Path) -> None:
    """y = Swish(x @ w) at opset 24, w (64 bytes) in ``<path>.data``."""
    weight = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    nodes = [oh.make_node("MatMul", ["x", "w"], ["h"]), oh.make_node("Swish", ["h"], ["y"])]
    model = make_model(nodes, [X], [Y], 24, initializers=[weight])
    location = path.name + ".data"
    onnx.save(model, path, save_as_external_data=True, location=location, size_threshold=0)


def _tree(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (links as what they point at) and its bytes."""
    return {
        str(p.relative_to(directory)): (
            os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
        )
        for p in sorted(directory.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


def _one_error(status: int, caplog: pytest.LogCaptureFixture, stderr: str) -> str:
    """The one error line of a run: argparse's for a usage error, the log's otherwise."""
    assert "Traceback" not in stderr
    if status == EXIT_USAGE:
        lines = [line for line in stderr.splitlines() if "error:" in line]
    else:
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(lines) == 1, (lines, stderr)
    assert "\n" not in lines[0] and "Traceback" not in lines[0]
    return lines[0]


def _main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    try:
        status = main(["-q", *argv])
    except SystemExit as exit_:  # argparse's usage errors
        status = int(exit_.code or 0)
    return status, capsys.readouterr().err


_EP = ["--ep", "cuda", "--ort-version", "1.24"]
_TABLE = "domain\top\tstart\tend\nai.onnx\tMatMul\t13\tinf\nai.onnx\tSwish\t24\tinf\n"


def _path_case(d: Path, case: str) -> tuple[list[str], int, str]:
    """argv (in ``d``, which holds m.onnx with m.onnx.data, and t.tsv), the exit status
    and words of the one error line."""
    m, out, table = str(d / "m.onnx"), str(d / "o.onnx"), str(d / "t.tsv")
    lower_ep = ["lower", m, "-o", out, *_EP]
    with_table = ["lower", m, "-o", out, "--ep", "qnn", "--kernel-table", table]
    if case == "report-json-is-model":
        return [*lower_ep, "--report-json", m], EXIT_USAGE, "--report-json"
    if case == "report-json-is-out":
        return [*lower_ep, "--report-json", out], EXIT_USAGE, "are one file"
    if case == "report-json-links-to-model":
        (d / "link.json").symlink_to(d / "m.onnx")
        return [*lower_ep, "--report-json", str(d / "link.json")], EXIT_USAGE, "it reads"
    if case == "report-json-hard-link-of-model":
        os.link(d / "m.onnx", d / "hard.json")
        return [*lower_ep, "--report-json", str(d / "hard.json")], EXIT_USAGE, "it reads"
    if case == "report-json-is-the-data-file":
        data = str(d / "m.onnx.data")
        return [*lower_ep, "--report-json", data], EXIT_BAD_INPUT, "weights are read from"
    if case == "report-json-named-as-out-data":
        return [*lower_ep, "--report-json", out + ".data"], EXIT_USAGE, "data file of -o"
    if case == "report-json-named-as-fresh-out-data":
        fresh = out + ".0123abcd.data"
        return [*lower_ep, "--report-json", fresh], EXIT_USAGE, "data file of -o"
    if case == "report-json-is-kernel-table":
        return [*with_table, "--report-json", table], EXIT_USAGE, "--kernel-table"
    if case == "out-is-kernel-table":
        args = ["lower", m, "-o", table, "--ep", "qnn", "--kernel-table", table]
        return args, EXIT_USAGE, "is the file --kernel-table"
    if case == "kernel-table-named-as-out-data":
        os.replace(table, out + ".data")
        args = ["lower", m, "-o", out, "--ep", "qnn", "--kernel-table", out + ".data"]
        return args, EXIT_USAGE, "data file of -o"
    if case == "model-named-as-out-data":
        os.replace(d / "m.onnx", d / "o.onnx.data")
        os.replace(d / "m.onnx.data", d / "o.onnx.data.data")  # keep its weights reachable
        proto = onnx.load(d / "o.onnx.data", load_external_data=False)
        from onnxscript_ep_passes.core.onnx_utils import point_external_data

        point_external_data(proto, "o.onnx.data.data")
        (d / "o.onnx.data").write_bytes(proto.SerializeToString())
        args = ["lower", out + ".data", "-o", out, "--target-opset", "23"]
        return args, EXIT_USAGE, "MODEL"
    if case == "report-json-is-a-directory":
        (d / "r").mkdir()
        return [*lower_ep, "--report-json", str(d / "r")], EXIT_BAD_INPUT, "is a directory"
    if case == "out-in-a-missing-directory":
        args = ["lower", m, "-o", str(d / "nowhere" / "o.onnx"), *_EP]
        return args, EXIT_BAD_INPUT, "does not exist"
    if case == "optimize-report-json-is-model":
        args = ["optimize", m, "-o", out, *_EP, "--no-fuse", "--report-json", m]
        return args, EXIT_USAGE, "--report-json"
    if case == "optimize-out-is-the-data-file":
        args = ["optimize", m, "-o", str(d / "m.onnx.data"), *_EP, "--no-fuse"]
        return args, EXIT_BAD_INPUT, "weights are read from"
    raise AssertionError(case)


PATH_CASES = [
    "report-json-is-model",
    "report-json-is-out",
    "report-json-links-to-model",
    "report-json-hard-link-of-model",
    "report-json-is-the-data-file",
    "report-json-named-as-out-data",
    "report-json-named-as-fresh-out-data",
    "report-json-is-kernel-table",
    "out-is-kernel-table",
    "kernel-table-named-as-out-data",
    "model-named-as-out-data",
    "report-json-is-a-directory",
    "out-in-a-missing-directory",
    "optimize-report-json-is-model",
    "optimize-out-is-the-data-file",
]


@pytest.mark.parametrize("case", PATH_CASES)
def test_an_output_never_overwrites_an_input_or_another_output(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """``lower m.onnx -o o.onnx --report-json m.onnx`` replaced the model with the report;
    ``--report-json o.onnx`` lost the report. Each such run is refused before any work."""
    _save_with_data(tmp_path / "m.onnx")
    (tmp_path / "t.tsv").write_text(_TABLE, encoding="utf-8")
    argv, expected_status, words = _path_case(tmp_path, case)
    before = _tree(tmp_path)
    with caplog.at_level(logging.INFO):
        status, stderr = _main(argv, capsys)
    assert status == expected_status, stderr
    assert words in _one_error(status, caplog, stderr)
    assert _tree(tmp_path) == before, "nothing written, every input as it was"


def test_the_report_is_written_after_out_and_atomically(tmp_path: Path) -> None:
    """The report replaces an old one whole (never truncated in place: a hard link to the
    old report keeps the old bytes), beside the new OUT, and no temporary file remains."""
    path = _write(tmp_path / "m.onnx", _swish())
    report = tmp_path / "r.json"
    report.write_text("old report\n")
    os.link(report, tmp_path / "old.json")
    argv = ["-q", "lower", str(path), "-o", str(tmp_path / "o.onnx"), *_EP]
    assert main([*argv, "--report-json", str(report)]) == 0
    assert json.loads(report.read_text())["model"] == str(path)
    assert (tmp_path / "old.json").read_text() == "old report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "o.onnx", "old.json", "r.json"]
