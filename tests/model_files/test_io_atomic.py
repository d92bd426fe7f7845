"""Atomic output: a crash, a full disk or a second writer never leaves a broken or mixed
OUT, OUT may be the input itself, and ``--weights reference`` shares the input's file."""

from __future__ import annotations

import hashlib
import os
import re
import resource
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from onnxscript_ep_passes.cli.program import main
from onnxscript_ep_passes.errors import EXIT_BAD_INPUT, EXIT_USAGE
from tests.harness import make_model, run_cli, run_model

_ROWS = 1024  # weights of 1024x1024 float: 4 MiB per model


def _model(tag: str, seed: int, rows: int = _ROWS) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((rows, _ROWS)).astype(np.float32)
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["h"], name=f"matmul_{tag}"),
        oh.make_node("Swish", ["h"], ["y"], name=f"swish_{tag}"),
    ]
    return make_model(
        nodes,
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, rows])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, _ROWS])],
        24,
        initializers=[numpy_helper.from_array(weight, "w")],
    )


def _save_external(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path, save_as_external_data=True, location=path.name + ".data")
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _identity(out: Path) -> str:
    """Which model OUT is ('a' or 'b'), after checking that its graph and weights agree."""
    model = onnx.load(out)  # reads the data file the graph names
    tag = model.graph.node[0].name.rsplit("_", 1)[1]
    rows = model.graph.initializer[0].dims[0]
    expected = numpy_helper.to_array(_model(tag, {"a": 1, "b": 2}[tag], rows).graph.initializer[0])
    np.testing.assert_array_equal(numpy_helper.to_array(model.graph.initializer[0]), expected)
    return tag


def _leftovers(directory: Path, out: Path) -> list[str]:
    """Files besides the inputs, OUT and the one data file OUT names."""
    graph = onnx.load(out, load_external_data=False)
    used = {out.name} | {
        e.value for t in graph.graph.initializer for e in t.external_data if e.key == "location"
    }
    return sorted(p.name for p in directory.iterdir() if p.name not in used)


_WRITER = textwrap.dedent(
    """
    import itertools, sys
    from onnxscript_ep_passes.model_files.io import load_model, save_model
    out, modes, sources = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]
    models = [load_model(s) for s in sources]
    print("ready", flush=True)
    count = int(sys.stdin.readline() or 0) or None
    modes = itertools.cycle(modes)
    for i in itertools.islice(itertools.count(), count):
        save_model(models[i % len(models)], out, weights=next(modes))
    """
)


def _writer(out: Path, *sources: Path, modes: str = "copy_file,rewrite") -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(out), modes, *map(str, sources)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    return process


def _sources(tmp_path: Path, rows: int = _ROWS) -> tuple[Path, Path]:
    inputs = tmp_path / "in"
    inputs.mkdir()
    return (
        _save_external(_model("a", 1, rows), inputs / "a.onnx"),
        _save_external(_model("b", 2, rows), inputs / "b.onnx"),
    )


_KILLER = textwrap.dedent(
    """
    import itertools, os, random, signal, sys, time
    from onnxscript_ep_passes.model_files.io import load_model, save_model
    out, rounds, sources = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    models = [load_model(s) for s in sources]
    rng = random.Random(0)
    for _ in range(rounds):
        pid = os.fork()
        if pid == 0:  # the writer: alternates models and weight modes until killed
            for i in itertools.count():
                mode = ("copy_file", "rewrite")[i // len(models) % 2]
                if sources == [out]:  # OUT is the input: load it and write it back
                    save_model(load_model(out), out, weights=("copy_file", "rewrite")[i % 2])
                else:
                    save_model(models[i % len(models)], out, weights=mode)
        time.sleep(rng.uniform(0.0, 0.3))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        print("killed", flush=True)
        sys.stdin.readline()  # the test has looked at OUT
    """
)


@pytest.mark.parametrize("in_place", [False, True], ids=["two-models", "in-place"])
def test_sigkill_during_writes_leaves_old_or_new(tmp_path: Path, in_place: bool) -> None:
    """A writer alternating two models into OUT (or writing OUT back over itself) is
    SIGKILLed at random moments: OUT is always one complete model, its graph and its
    weights from the same one."""
    a, b = _sources(tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "m.onnx"
    assert main(["-q", "lower", str(a), "-o", str(out), "--target-opset", "23"]) == 0
    rounds = 6 if in_place else 10
    sources = [out] if in_place else [b, a]
    killer = subprocess.Popen(
        [sys.executable, "-c", _KILLER, str(out), str(rounds), *map(str, sources)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert killer.stdin is not None and killer.stdout is not None
    seen = []
    for _ in range(rounds):
        assert killer.stdout.readline() == "killed\n"
        seen.append(_identity(out))
        killer.stdin.write("\n")
        killer.stdin.flush()
    assert killer.wait(timeout=60) == 0
    assert set(seen) <= ({"a"} if in_place else {"a", "b"})
    # Killed runs leave only their staging directories and, when killed between moving a
    # data file into place and the graph, that unused data file named after OUT; a clean
    # run afterwards removes both and leaves OUT and its data file alone.
    orphan = re.compile(re.escape(out.name) + r"(\.[0-9a-f]{8})?\.data|\..*\.tmp")
    assert all(orphan.fullmatch(name) for name in _leftovers(out_dir, out))
    process = _writer(out, a)
    process.communicate("1\n")
    assert process.returncode == 0
    assert _identity(out) == "a"
    assert _leftovers(out_dir, out) == []


def test_concurrent_writers_to_one_output(tmp_path: Path) -> None:
    """Two writers copying 16 MiB data files into one OUT at once (the old code shared one
    temporary name between them, and one failed)."""
    a, b = _sources(tmp_path, rows=4 * _ROWS)
    out = tmp_path / "out.onnx"
    writers = [_writer(out, a, modes="copy_file"), _writer(out, b, modes="copy_file")]
    for process in writers:
        assert process.stdin is not None
        process.stdin.write("4\n")
        process.stdin.flush()
    for process in writers:
        process.stdin.close()  # type: ignore[union-attr]
        assert process.wait(timeout=120) == 0
    assert _identity(out) in {"a", "b"}
    assert _leftovers(tmp_path, out) == ["in"]


def _no_bigger_files() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes then fail with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))


def test_disk_full_while_overwriting_the_input_leaves_it_intact(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(_model("a", 1), src)  # 4 MiB of weights inline: the write hits the limit
    before = _digest(src)
    argv = ["lower", str(src), "-o", str(src), "--target-opset", "23", "--external-data", "never"]
    result = run_cli(*argv, preexec_fn=_no_bigger_files)
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert "Traceback" not in result.stderr and "File too large" in result.stderr
    assert _digest(src) == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # no temporary left


@pytest.mark.parametrize("weights", ["copy_file", "rewrite", "reference"])
def test_output_equal_to_input(tmp_path: Path, weights: str) -> None:
    src = _save_external(_model("a", 1), tmp_path / "m.onnx")
    x = np.random.default_rng(3).standard_normal((2, _ROWS)).astype(np.float32)
    expected, _ = run_model(onnx.load(src), {"x": x})
    argv = ["-q", "lower", str(src), "-o", str(src), "--target-opset", "23"]
    assert main([*argv, "--weights", weights]) == 0
    onnx.checker.check_model(str(src), full_check=True)
    actual, _ = run_model(onnx.load(src), {"x": x})
    np.testing.assert_allclose(actual[0], expected[0], rtol=1e-5, atol=1e-5)
    assert _leftovers(tmp_path, src) == []


def test_output_equal_to_the_input_data_file_is_refused(tmp_path: Path) -> None:
    src = _save_external(_model("a", 1), tmp_path / "m.onnx")
    data = tmp_path / "m.onnx.data"
    before = _digest(data)
    argv = ["-q", "lower", str(src), "-o", str(data), "--target-opset", "23"]
    assert main(argv) == EXIT_BAD_INPUT
    assert _digest(data) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]


def test_overwriting_an_output_keeps_one_data_file(tmp_path: Path) -> None:
    a, b = _sources(tmp_path)
    out = tmp_path / "o.onnx"
    for source in (a, b, a):
        assert main(["-q", "lower", str(source), "-o", str(out), "--target-opset", "23"]) == 0
        assert _leftovers(tmp_path, out) == ["in"]
    assert _identity(out) == "a"


def test_weights_reference_shares_the_input_file(tmp_path: Path) -> None:
    src = _save_external(_model("a", 1), tmp_path / "m.onnx")
    out = tmp_path / "m23.onnx"
    argv = ["-q", "lower", str(src), "-o", str(out), "--target-opset", "23"]
    assert main([*argv, "--weights", "reference"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data", "m23.onnx"]
    assert out.stat().st_size < 4096  # the graph only
    onnx.checker.check_model(str(out), full_check=True)
    x = np.random.default_rng(4).standard_normal((2, _ROWS)).astype(np.float32)
    expected, _ = run_model(onnx.load(src), {"x": x})
    actual, _ = run_model(onnx.load(out), {"x": x})
    np.testing.assert_allclose(actual[0], expected[0], rtol=1e-5, atol=1e-5)


def test_weights_reference_needs_the_input_directory(tmp_path: Path) -> None:
    src = _save_external(_model("a", 1), tmp_path / "m.onnx")
    (tmp_path / "elsewhere").mkdir()
    out = tmp_path / "elsewhere" / "m23.onnx"
    argv = ["lower", str(src), "-o", str(out), "--target-opset", "23", "--weights", "reference"]
    with pytest.raises(SystemExit) as exit_:  # a usage error, reported as argparse does
        main(argv)
    assert exit_.value.code == EXIT_USAGE
    assert not os.listdir(tmp_path / "elsewhere")


def test_abandoned_staging_directories_are_removed(tmp_path: Path) -> None:
    """A staging directory no process holds (its run was killed) is removed by the next
    write to the same OUT; one a live writer holds, and other outputs' ones, are kept."""
    import fcntl

    src = _save_external(_model("a", 1), tmp_path / "in.onnx")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    abandoned = out_dir / ".m.onnx.0badc0de.tmp"
    live = out_dir / ".m.onnx.1234abcd.tmp"
    other = out_dir / ".n.onnx.0badc0de.tmp"
    for directory in (abandoned, live, other):
        directory.mkdir()
        (directory / "m.onnx.data").write_bytes(b"\0" * 1024)
    fd = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        argv = ["-q", "lower", str(src), "-o", str(out_dir / "m.onnx"), "--target-opset", "23"]
        assert main(argv) == 0
    finally:
        os.close(fd)
    assert not abandoned.exists()
    assert live.exists() and other.exists()
    assert _identity(out_dir / "m.onnx") == "a"


# -- the plain lowering's fast path: weights copied while the nodes are lowered ----------


def _fast_path_model(tag: str, seed: int) -> onnx.ModelProto:
    """A model the proto fast path lowers (a Cast-24 attribute drop), 4 MiB of weights."""
    model = _model(tag, seed)
    del model.graph.node[1:]
    model.graph.node.append(
        oh.make_node(
            "Cast", ["h"], ["y"], name=f"cast_{tag}", to=TensorProto.FLOAT, round_mode="up"
        )
    )
    model.graph.value_info.append(oh.make_tensor_value_info("h", TensorProto.FLOAT, [2, _ROWS]))
    return model


def test_fast_path_disk_full_while_copying_leaves_nothing(tmp_path: Path) -> None:
    """The weights copy runs in a thread: its failure still reaches the user as one line,
    and neither OUT nor anything staged is left."""
    (tmp_path / "in").mkdir()
    src = _save_external(_fast_path_model("a", 1), tmp_path / "in" / "m.onnx")
    out = tmp_path / "out" / "m23.onnx"
    out.parent.mkdir()
    argv = ["lower", str(src), "-o", str(out), "--target-opset", "23"]
    result = run_cli(*argv, preexec_fn=_no_bigger_files)
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert "Traceback" not in result.stderr and "File too large" in result.stderr
    assert list(out.parent.iterdir()) == []


def test_fast_path_copy_stops_when_the_caller_gives_up(tmp_path: Path) -> None:
    """Leaving a ProtoSave without committing (the fast path declined, or an error) stops
    the copy and removes what it staged; a committed one writes OUT and its data."""
    from onnxscript_ep_passes.model_files.io import load_graph_proto
    from onnxscript_ep_passes.model_files.proto_save import ProtoSave, proto_source_file

    src = _save_external(_fast_path_model("a", 1), tmp_path / "m.onnx")
    out = tmp_path / "o" / "m23.onnx"
    out.parent.mkdir()
    proto = load_graph_proto(src)
    data = proto_source_file(proto, src)
    assert isinstance(data, Path)
    with pytest.raises(KeyboardInterrupt), ProtoSave(proto, out, data):
        raise KeyboardInterrupt
    with ProtoSave(proto, out, data):
        pass  # declined
    assert list(out.parent.iterdir()) == []
    with ProtoSave(proto, out, data) as saving:
        saving.commit(proto)
    assert sorted(p.name for p in out.parent.iterdir()) == ["m23.onnx", "m23.onnx.data"]
    assert _digest(out.parent / "m23.onnx.data") == _digest(tmp_path / "m.onnx.data")
    onnx.checker.check_model(str(out), full_check=True)


def test_a_stopped_copy_copies_no_further_chunk(tmp_path: Path) -> None:
    import threading

    from onnxscript_ep_passes.model_files import atomic as _atomic

    (tmp_path / "src").write_bytes(bytes(range(256)) * 64)
    stop = threading.Event()
    with open(tmp_path / "src", "rb") as src, open(tmp_path / "dst", "wb") as dst:
        assert _atomic._bounded_copy(src, dst, 16384, stop)
    assert (tmp_path / "dst").read_bytes() == (tmp_path / "src").read_bytes()
    stop.set()
    with open(tmp_path / "src", "rb") as src, open(tmp_path / "dst", "wb") as dst:
        assert not _atomic._bounded_copy(src, dst, 16384, stop)
    assert (tmp_path / "dst").read_bytes() == b""


# -- interrupts: Ctrl-C, SIGTERM, SIGHUP ------------------------------------------------

_LARGE_FLOATS = 64 * 1024 * 1024  # a 256 MiB weight: its copy takes a while


@pytest.fixture(scope="module")
def large_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """y = Swish(x + w) at opset 24, w of 256 MiB in m.onnx.data (a sparse file: zeros;
    a lowering copies it in 64 MiB chunks and flushes it, long enough to be interrupted)."""
    directory = tmp_path_factory.mktemp("large")
    n = _LARGE_FLOATS
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[n])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in {"location": "m.onnx.data", "offset": "0", "length": str(4 * n)}.items():
        weight.external_data.add(key=key, value=value)
    x = oh.make_tensor_value_info("x", TensorProto.FLOAT, [n])
    nodes = [oh.make_node("Add", ["x", "w"], ["h"]), oh.make_node("Swish", ["h"], ["y"])]
    model = make_model(nodes, [x], [x], 24, initializers=[weight])
    model.graph.output[0].name = "y"
    path = directory / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with open(directory / "m.onnx.data", "wb") as file:
        file.truncate(4 * n + 4096)  # bytes past the tensor: copied in chunks, never reflinked
    return path


def _staged_data(out: Path) -> bool:
    """Whether a staging directory of ``out`` holds a data file being written (the command
    may remove a staging directory while it is being listed: that one holds nothing)."""
    for folder in out.parent.glob(f".{out.name}.*.tmp"):
        try:
            if any(staged.stat().st_size > 0 for staged in folder.glob("*.data")):
                return True
        except OSError:
            pass
    return False


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("SIGINT", ["--target-opset", "23"]),
        ("SIGTERM", ["--target-opset", "23"]),
        ("SIGHUP", ["--target-opset", "23"]),
        ("SIGTERM", ["--target-opset", "23", "--weights", "rewrite"]),
        ("SIGINT", ["--ep", "cuda", "--ort-version", "1.24"]),
    ],
    ids=["ctrl-c-copy", "sigterm-copy", "sighup-copy", "sigterm-rewrite", "ctrl-c-ep-search"],
)
def test_an_interrupt_while_writing_leaves_nothing(
    large_model: Path, tmp_path: Path, name: str, args: list[str]
) -> None:
    """Ctrl-C printed a KeyboardInterrupt traceback; SIGTERM and SIGHUP left a 258 MB
    staging folder. A real signal sent while the data file is being written: one line,
    exit 128 + n, nothing left next to OUT, the input as it was."""
    data = large_model.parent / "m.onnx.data"
    graph, data_stat = large_model.read_bytes(), data.stat()
    out = tmp_path / "o.onnx"
    command = [sys.executable, "-m", "onnxscript_ep_passes", "-q", "lower", str(large_model)]
    process = subprocess.Popen([*command, "-o", str(out), *args], stderr=subprocess.PIPE, text=True)
    try:
        while process.poll() is None and not _staged_data(out):
            time.sleep(0.001)  # the copy of 256 MiB takes far longer than one look
        assert process.poll() is None, "the run ended before the data file was written"
        process.send_signal(getattr(signal, name))
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    number = int(getattr(signal, name))
    assert process.returncode == 128 + number, stderr
    assert stderr.splitlines() == [
        f"ERROR onnxscript_ep_passes: interrupted by {name}: stopped, no partial output left"
    ]
    assert list(tmp_path.iterdir()) == [], "no staging folder, no OUT, no data file"
    assert large_model.read_bytes() == graph
    after = data.stat()
    assert (after.st_size, after.st_mtime_ns) == (data_stat.st_size, data_stat.st_mtime_ns)


def test_an_ignored_sighup_stays_ignored(tmp_path: Path) -> None:
    """Under ``nohup`` (SIGHUP ignored when the run starts) a hang-up does not stop it."""
    src = _save_external(_model("a", 1), tmp_path / "a.onnx")
    out = tmp_path / "o.onnx"

    def ignore_hangups() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    command = [sys.executable, "-m", "onnxscript_ep_passes", "-q", "lower", str(src)]
    process = subprocess.Popen(
        [*command, "-o", str(out), "--target-opset", "23"],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ignore_hangups,
    )
    hangups = 0
    while process.poll() is None:
        process.send_signal(signal.SIGHUP)
        hangups += 1
        time.sleep(0.05)
    assert process.returncode == 0 and hangups > 1, process.stderr
    assert _identity(out) == "a"


# -- permissions ------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(
    "args",
    [
        ["--target-opset", "23"],  # the proto fast path, its copy begun early
        ["--target-opset", "23", "--weights", "rewrite"],
        ["--target-opset", "23", "--external-data", "never"],
        ["--ep", "cuda", "--ort-version", "1.24", "--report-json", "{d}/r.json"],
    ],
    ids=["copy_file", "rewrite", "inline", "ep-and-report"],
)
@pytest.mark.parametrize(
    ("model_mode", "data_mode", "expected"),
    [(0o600, 0o600, 0o600), (0o640, 0o600, 0o600), (0o644, 0o640, 0o640), (0o644, 0o644, 0o644)],
    ids=["private", "private-data", "group", "public"],
)
def test_outputs_take_at_most_the_inputs_permissions(
    tmp_path: Path, args: list[str], model_mode: int, data_mode: int, expected: int
) -> None:
    """A 0600 data file was copied as 0644: private weights became world-readable. Each
    file written (OUT, its data file, the report) has at most the permissions every input
    file grants, and the umask still applies."""
    src = _save_external(_model("a", 1), tmp_path / "in.onnx")
    src.chmod(model_mode)
    (tmp_path / "in.onnx.data").chmod(data_mode)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    argv = [a.format(d=out_dir) for a in args]
    old = os.umask(0o022)
    try:
        assert main(["-q", "lower", str(src), "-o", str(out_dir / "o.onnx"), *argv]) == 0
    finally:
        os.umask(old)
    written = sorted(out_dir.iterdir())
    assert written and {p.name: _mode(p) for p in written} == {p.name: expected for p in written}
    assert _identity(out_dir / "o.onnx") == "a"


def test_the_umask_still_applies_and_the_staging_directory_is_private(tmp_path: Path) -> None:
    src = _save_external(_model("a", 1), tmp_path / "in.onnx")
    out = tmp_path / "o.onnx"
    old = os.umask(0o077)
    try:
        from onnxscript_ep_passes.model_files.atomic import Stage

        stage = Stage(out, None)
        stage.create()
        try:
            assert _mode(stage.path) == 0o700
        finally:
            stage.cleanup()
        assert main(["-q", "lower", str(src), "-o", str(out), "--target-opset", "23"]) == 0
    finally:
        os.umask(old)
    assert _mode(out) == _mode(tmp_path / "o.onnx.data") == 0o600


@pytest.mark.parametrize("also_bad_data", [False, True])
def test_fast_path_structural_refusal_while_copying_leaves_nothing(
    tmp_path: Path, also_bad_data: bool
) -> None:
    """The weights copy begins before the structural checks: a model they refuse is
    refused for that, one line, and neither OUT nor anything staged is left; when its
    external data is refused too, the structural refusal is the one shown."""
    (tmp_path / "in").mkdir()
    model = _fast_path_model("a", 1)
    model.graph.node[1].input[0] = "nowhere"  # read, defined by nothing
    src = _save_external(model, tmp_path / "in" / "m.onnx")
    if also_bad_data:
        proto = onnx.load(src, load_external_data=False)
        for entry in proto.graph.initializer[0].external_data:
            if entry.key == "length":
                entry.value = "5"
        src.write_bytes(proto.SerializeToString())
    out = tmp_path / "out" / "m23.onnx"
    out.parent.mkdir()
    result = run_cli("lower", str(src), "-o", str(out), "--target-opset", "23")
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert "reads 'nowhere', which nothing defines" in result.stderr, result.stderr
    assert "length" not in result.stderr and "Traceback" not in result.stderr
    assert list(out.parent.iterdir()) == []
