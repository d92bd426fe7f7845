"""proto_save: the weights copy begun when the proto is loaded, committed for an onnx-ir
model (``lower --ep`` and the full lowering) only when it is what ``save_model`` writes."""

from __future__ import annotations

import hashlib
import resource
import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from onnxscript_ep_passes.cli.program import main
from onnxscript_ep_passes.errors import EXIT_BAD_INPUT, EXIT_REFUSED
from onnxscript_ep_passes.model_files.io import load_graph_proto, model_from_proto, save_model
from onnxscript_ep_passes.model_files.proto_save import (
    ProtoSave,
    early_save,
    proto_source_file,
    save_proto,
)
from onnxscript_ep_passes.passes import LowerOpsetForEpPass
from tests.harness import benchmark_decoder, make_model, run_cli, tensor_info

EP = ("--ep", "cuda", "--ort-version", "1.24")


def _files(directory: Path) -> dict[str, str]:
    """Every file in ``directory`` (hidden staging directories included) and its digest."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file()
        else "dir"
        for p in sorted(directory.rglob("*"))
    }


@pytest.fixture(scope="module")
def decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("decoder") / "decoder.onnx"
    benchmark_decoder(path)  # external data: decoder.onnx.data
    return path


@pytest.mark.parametrize("bound", [(), ("--lowest-opset", "23")], ids=["full", "bounded"])
def test_lower_for_ep_writes_what_save_model_writes(
    decoder: Path, tmp_path: Path, bound: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The CLI (its weights copy begun before the search) against the same pass and
    # save_model in this process: the same files, byte for byte.
    committed: list[bool] = []
    original = ProtoSave.commit_model

    def spy(self: ProtoSave, model: ir.Model) -> bool:
        committed.append(original(self, model))
        return committed[-1]

    monkeypatch.setattr(ProtoSave, "commit_model", spy)
    (tmp_path / "cli").mkdir()
    (tmp_path / "ref").mkdir()
    assert (
        main(["-q", "lower", str(decoder), "-o", str(tmp_path / "cli" / "m.onnx"), *EP, *bound])
        == 0
    )
    model = model_from_proto(load_graph_proto(decoder), decoder)
    lowest = int(bound[1]) if bound else None
    LowerOpsetForEpPass("cuda", "1.24", lowest_opset=lowest)(model)
    save_model(model, tmp_path / "ref" / "m.onnx")
    assert _files(tmp_path / "cli") == _files(tmp_path / "ref")
    assert sorted(_files(tmp_path / "cli")) == ["m.onnx", "m.onnx.data"]
    assert len(committed) == 1
    if bound:  # opset 23, plain: every weight still in the input's file, copied early
        assert committed == [True]
    onnx.checker.check_model(str(tmp_path / "cli" / "m.onnx"), full_check=True)


def test_commit_model_cuts_the_copy_to_the_tensors_kept(decoder: Path, tmp_path: Path) -> None:
    proto = load_graph_proto(decoder)
    data = proto_source_file(proto, decoder)
    assert isinstance(data, Path)
    model = model_from_proto(proto, decoder)
    graph = model.graph
    # Drop the tensor stored last in the data file: save_model copies only up to the end of
    # the last tensor the model holds, and so must the early copy.
    last = max(
        (v for v in graph.initializers.values() if isinstance(v.const_value, ir.ExternalTensor)),
        key=lambda v: v.const_value.offset or 0,  # type: ignore[union-attr]
    )
    graph.initializers.pop(str(last.name))
    fed = ir.Value(name=f"{last.name}_fed", type=last.type, shape=last.shape)
    graph.inputs.append(fed)  # its readers read a graph input instead: still a valid model
    for use in list(last.uses()):
        use.node.replace_input_with(use.idx, fed)
    (tmp_path / "early").mkdir()
    (tmp_path / "ref").mkdir()
    with early_save(proto, decoder, tmp_path / "early" / "m.onnx", data) as saving:
        assert isinstance(saving, ProtoSave)
        assert saving.commit_model(model)
    save_model(model, tmp_path / "ref" / "m.onnx")
    assert _files(tmp_path / "early") == _files(tmp_path / "ref")
    assert (tmp_path / "early" / "m.onnx.data").stat().st_size < data.stat().st_size


def test_commit_model_declines_a_model_with_new_weights(decoder: Path, tmp_path: Path) -> None:
    proto = load_graph_proto(decoder)
    data = proto_source_file(proto, decoder)
    model = model_from_proto(proto, decoder)
    big = ir.Value(name="built", const_value=ir.tensor(np.ones((64, 64), np.float32)))
    model.graph.initializers.add(big)  # a large tensor held in memory: written anew
    out = tmp_path / "o" / "m.onnx"
    out.parent.mkdir()
    with early_save(proto, decoder, out, data) as saving:
        assert saving is not None and not saving.commit_model(model)
        save_model(model, out)
    assert sorted(_files(out.parent)) == ["m.onnx", "m.onnx.data"]  # nothing staged is left
    saved = onnx.load(out)
    assert any(t.name == "built" for t in saved.graph.initializer)


def test_early_save_is_not_begun_in_place_or_without_a_data_file(
    decoder: Path, tmp_path: Path
) -> None:
    proto = load_graph_proto(decoder)
    data = proto_source_file(proto, decoder)
    with early_save(proto, decoder, decoder, data) as saving:
        assert saving is None  # save_model keeps a model's data file when saved over itself
    with early_save(proto, decoder, tmp_path / "m.onnx", None) as saving:
        assert saving is None
    assert list(tmp_path.iterdir()) == []


def test_nothing_to_do_refusal_and_disk_full_leave_nothing(decoder: Path, tmp_path: Path) -> None:
    out = tmp_path / "o" / "m.onnx"
    out.parent.mkdir()
    # The CPU EP: nothing to do, nothing written (the copy begun is removed).
    assert main(["-q", "lower", str(decoder), "-o", str(out), "--ep", "cpu"]) == 0
    assert _files(out.parent) == {}
    # A refused explicit target: exit 3, nothing left.
    refused = onnx.load(decoder, load_external_data=False)
    bad = onnx.helper.make_node("Cast", ["logits"], ["e8"], name="to_e8m0", to=24)
    refused.graph.node.append(bad)
    e8 = onnx.ValueInfoProto()
    e8.CopyFrom(next(o for o in refused.graph.output if o.name == "logits"))
    e8.name, e8.type.tensor_type.elem_type = "e8", 24
    refused.graph.output.append(e8)
    path = decoder.parent / "refused.onnx"
    onnx.save(refused, path)  # its tensors still point at decoder.onnx.data
    result = run_cli("lower", str(path), "-o", str(out), *EP, "--target-opset", "23")
    assert result.returncode == EXIT_REFUSED and "to_e8m0" in result.stderr, result.stderr
    assert _files(out.parent) == {}

    # The disk fills while the copy runs during the search: one line, exit 1, nothing left.
    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes then fail with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    result = run_cli("lower", str(decoder), "-o", str(out), *EP, "--lowest-opset", "23",
                     preexec_fn=small_files)  # fmt: skip
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert "Traceback" not in result.stderr and "File too large" in result.stderr
    assert _files(out.parent) == {}


def _weighted(directory: Path) -> Path:
    """A one-MatMul model whose weight is in ``m.onnx.data``."""
    weight = onnx.numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    model = make_model(
        [onnx.helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")],
        [tensor_info("x", onnx.TensorProto.FLOAT, [2, 64])],
        [tensor_info("y", onnx.TensorProto.FLOAT, [2, 64])],
        23,
        initializers=[weight],
    )
    path = directory / "m.onnx"
    onnx.save(model, path, save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    return path


def test_commit_checks_the_graph_while_the_copy_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The graph is checked and staged before the weights copy ends (the copy here waits
    for the check), and the files are those save_proto writes."""
    from onnxscript_ep_passes.model_files import atomic

    path = _weighted(tmp_path)
    checked = threading.Event()
    check_output, copy_range = atomic.check_output, atomic.Stage.copy_range

    def check(
        proto: onnx.ModelProto, out: Path, data: bytes | None = None, *, spent: bool = False
    ) -> None:
        check_output(proto, out, data, spent=spent)
        checked.set()

    def copy_after_the_check(self: atomic.Stage, *args: Any) -> bool:
        assert checked.wait(30), "the graph was checked only after the copy"
        return copy_range(self, *args)

    expected = tmp_path / "expected" / "m.onnx"
    expected.parent.mkdir()
    proto = load_graph_proto(path)
    save_proto(proto, expected, proto_source_file(proto, path), path)
    monkeypatch.setattr(atomic, "check_output", check)
    monkeypatch.setattr(atomic.Stage, "copy_range", copy_after_the_check)
    out = tmp_path / "out" / "m.onnx"
    out.parent.mkdir()
    proto = load_graph_proto(path)
    with ProtoSave(proto, out, proto_source_file(proto, path), path) as saving:
        saving.commit(proto)
    assert checked.is_set()
    assert _files(out.parent) == _files(expected.parent)


@pytest.mark.parametrize("copy_fails", [True, False], ids=["copy_fails", "copy_succeeds"])
def test_commit_refused_by_the_checker_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copy_fails: bool
) -> None:
    """A graph the checker refuses leaves nothing; when the copy failed too, its error
    is the one raised (as when the copy was waited for first)."""
    from onnxscript_ep_passes.model_files import atomic

    path = _weighted(tmp_path)

    def refuse(
        proto: onnx.ModelProto, out: Path, data: bytes | None = None, *, spent: bool = False
    ) -> None:
        raise ValueError("refused by the checker")

    def fail(self: atomic.Stage, *args: Any) -> bool:
        raise OSError("no space left")

    monkeypatch.setattr(atomic, "check_output", refuse)
    if copy_fails:
        monkeypatch.setattr(atomic.Stage, "copy_range", fail)
    out = tmp_path / "out" / "m.onnx"
    out.parent.mkdir()
    proto = load_graph_proto(path)
    error = OSError if copy_fails else ValueError
    with pytest.raises(error), ProtoSave(proto, out, proto_source_file(proto, path), path) as s:
        s.commit(proto)
    assert _files(out.parent) == {}
