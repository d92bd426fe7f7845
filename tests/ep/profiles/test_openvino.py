"""The OpenVINO profile: an EP added as one profile module, one snapshot and this test.

Its table is transcribed from ORT's docs (every verdict says so) and its tensors live in
host memory, so no Memcpy is predicted or priced at its boundary with the CPU EP.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from onnxscript_ep_passes.cli import main
from onnxscript_ep_passes.ep import snapshots
from onnxscript_ep_passes.ep.cost import placement_cost, rates
from onnxscript_ep_passes.ep.kernel_listing import LiveTableUnavailableError
from onnxscript_ep_passes.ep.placement import predict_placement
from onnxscript_ep_passes.ep.profiles import (
    CPU,
    CUDA,
    OPENVINO,
    base,
    registered_profiles,
    resolve_ep,
)
from onnxscript_ep_passes.ep.profiles.openvino import OPENVINO_DEFAULT_OPTIONS
from onnxscript_ep_passes.ep.snapshots import available_snapshots, load_snapshot
from onnxscript_ep_passes.ep.table_choice import get_table, release_assumed
from onnxscript_ep_passes.ep.traits import EpTraits

_SNAPSHOT = "openvino-ort-1.24"


def _relu_det_neg(opset: int = 21) -> onnx.ModelProto:
    """``Relu -> Det -> Neg``: Det has no kernel on OpenVINO or CUDA, so it sits on CPU
    between two EP nodes."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Det", ["r"], ["d"], name="det"),
        helper.make_node("Neg", ["d"], ["y"], name="neg"),
    ]
    graph = helper.make_graph(nodes, "relu_det_neg", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    return model


def _relu_reshape(opset: int) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])
    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 3])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["y"], name="reshape"),
    ]
    graph = helper.make_graph(nodes, "relu_reshape", [x, shape], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=11)
    onnx.checker.check_model(model, full_check=True)
    return model


def _meta() -> dict[str, object]:
    text = snapshots._data_dir().joinpath(f"{_SNAPSHOT}.json").read_text(encoding="utf-8")
    meta: dict[str, object] = json.loads(text)
    return meta


def test_the_profile_resolves_from_its_names() -> None:
    for name in ("OpenVINOExecutionProvider", "openvino", "OpenVINO", " ov ", "OV"):
        assert resolve_ep(name) is OPENVINO, name
    assert OPENVINO in registered_profiles()
    assert OPENVINO.display_name == "OpenVINO" and OPENVINO.short_name == "openvino"
    assert not OPENVINO.generic and not OPENVINO.is_host
    assert OPENVINO.traits.host_memory and not CUDA.traits.host_memory
    assert not OPENVINO.traits.prefers_cpu_for_shape_nodes
    assert OPENVINO.cost.memcpy_latency_us == 0.0
    assert rates("ov")["memcpy_latency_us"] == 0.0 and rates("cuda") == rates()
    assert dict(OPENVINO_DEFAULT_OPTIONS) == {"device_type": "CPU"}


def test_the_snapshot_loads_with_its_provenance() -> None:
    table = load_snapshot(_SNAPSHOT)
    assert (table.ep, table.ort_version, table.ep_version) == (
        OPENVINO.ort_name,
        "1.24",
        "2025.4.1",
    )
    assert table.source == f"snapshot:{_SNAPSHOT}.tsv {snapshots.TRANSCRIBED}"
    assert snapshots.NOT_A_RELEASE not in table.source  # the release is named
    assert not table.has_type_constraints
    assert {d for d, _ in table.ops()} == {""}  # ai.onnx only
    # Claimed by op type: every since_version of a listed op, none of an unlisted one.
    for since in (1, 13, 24, 26):
        assert table.match("", "Reshape", since) is not None
    assert not table.has_op("", "Det") and not table.has_op("", "GatherElements")
    assert table.has_op("", "Hardmax") and table.has_op("", "LogSoftmax")  # ONNX spelling

    info = {i.name: i for i in available_snapshots()}[_SNAPSHOT]
    meta = _meta()
    assert info.transcribed_from == meta["transcribed_from"]
    assert str(meta["transcribed_from"]).startswith(
        "https://onnxruntime.ai/docs/execution-providers/OpenVINO-ExecutionProvider.html"
    )
    assert meta["listing"] == "transcribed from docs, not listed from a kernel registry"
    assert re.fullmatch(r"[0-9a-f]{40}", str(meta["docs_commit"]))
    assert meta["release"] == "v1.24.1" and meta["kernels"] == len(table)
    assert f"git-commit-id={meta['commit']}" in str(meta["build_info"])
    assert "data_ops.cc" in str(meta["claims_by"])
    assert str(meta["notes"]).startswith("Transcribed from ORT's docs")


def test_the_table_is_chosen_for_the_release_line() -> None:
    table = get_table("ov", "1.24.1")
    assert table is load_snapshot(_SNAPSHOT)
    assert not release_assumed(table, "1.24.1")
    assert release_assumed(get_table("openvino", "1.32"), "1.32")  # nearest below


def test_it_is_never_listed_live() -> None:
    with pytest.raises(LiveTableUnavailableError, match="claims nodes by op type"):
        OPENVINO.live_table()


def test_it_loads_only_with_the_openvino_wheel() -> None:
    import onnxruntime as ort

    loads, why = OPENVINO.loadable()
    assert loads == (OPENVINO.ort_name in ort.get_available_providers())
    if not loads:
        assert "onnxruntime-openvino" in why


def test_a_provider_that_breaks_the_listing_stops_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the installed ORT has a provider whose profile says get_all_opkernel_def()
    crashes (OpenVINO's wheel), no table is listed that way: a clear error, not a dead
    process. Shown with the CPU provider, which every ORT has."""
    if base._listing_blocker() is None:  # no OpenVINO wheel here: CPU is listed
        assert CPU.live_table().ep == CPU.ort_name
    else:  # the OpenVINO wheel: even the CPU EP is not listed
        assert base._listing_blocker() is OPENVINO
    breaking = dataclasses.replace(CPU, breaks_builtin_listing=True)
    monkeypatch.setitem(base._BY_NAME, CPU.ort_name, breaking)
    with pytest.raises(LiveTableUnavailableError, match="crashes an onnxruntime that has"):
        CPU.live_table()


def test_the_model_is_real() -> None:
    import onnxruntime as ort

    model = _relu_det_neg()
    session = ort.InferenceSession(model.SerializeToString(), providers=[CPU.ort_name])
    x = np.random.default_rng(0).standard_normal((2, 3, 3)).astype(np.float32)
    (y,) = session.run(None, {"x": x})
    np.testing.assert_allclose(y, -np.linalg.det(np.maximum(x, 0)), rtol=1e-4, atol=1e-5)


def test_openvino_predicts_no_memcpy_where_cuda_predicts_some() -> None:
    model = _relu_det_neg()
    ir_model = ir.serde.deserialize_model(model)
    on_ov = predict_placement(model, get_table(OPENVINO, "1.24"))
    on_cuda = predict_placement(model, get_table(CUDA, "1.24"))
    for prediction in (on_ov, on_cuda):
        placed = {n.name: n.placement for n in prediction.nodes}
        assert placed == {"relu": "ep", "det": "cpu", "neg": "ep"}, prediction.ep
    assert on_ov.memcpy == 0 and not on_ov.transfers
    assert {t.direction for t in on_cuda.transfers} == {"MemcpyToHost", "MemcpyFromHost"}
    ov_cost = placement_cost(on_ov, ir_model)
    cuda_cost = placement_cost(on_cuda, ir_model)
    assert (ov_cost.memcpy, ov_cost.memcpy_bytes, ov_cost.transfer_us) == (0, 0, 0.0)
    assert cuda_cost.memcpy == 2 and cuda_cost.memcpy_bytes > 0 and cuda_cost.transfer_us > 0


def test_opset_24_stays_on_openvino() -> None:
    """OpenVINO claims by op type: Reshape-24 is its, where CUDA 1.24 has no Reshape-24."""
    model = _relu_reshape(24)
    on_ov = predict_placement(model, get_table(OPENVINO, "1.24"))
    on_cuda = predict_placement(model, get_table(CUDA, "1.24"))
    assert all(n.placement == "ep" for n in on_ov.nodes) and on_ov.memcpy == 0
    assert {n.name for n in on_cuda.fallback_nodes} == {"reshape"} and on_cuda.memcpy > 0


def test_the_host_memory_trait_is_read_for_any_ep() -> None:
    """The placement reads the trait, not the EP's name: CUDA's table with host-memory
    traits predicts no Memcpy either."""
    model = _relu_det_neg()
    table = get_table(CUDA, "1.24")
    traits = dataclasses.replace(CUDA.traits, host_memory=True)
    assert predict_placement(model, table, traits=traits).memcpy == 0
    assert predict_placement(model, table, traits=CUDA.traits).memcpy == 2
    plain = EpTraits(ep="TestEP", cpu_inputs={}, cpu_outputs={})
    assert not plain.host_memory


def test_the_verdict_says_the_table_is_transcribed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "relu_det_neg.onnx"
    onnx.save(_relu_det_neg(), path)
    assert main(["report", str(path), "--ep", "ov", "--ort-version", "1.24", "--no-run"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("relu_det_neg.onnx: opset 21 kept on OpenVINO"), line
    assert f"snapshot {_SNAPSHOT} (transcribed from docs)" in line, line
    assert "Memcpy 0" in line, line
    assert main(["report", str(path), "--ep", "cuda", "--ort-version", "1.24", "--no-run"]) == 0
    cuda_line = capsys.readouterr().out.splitlines()[0]
    assert "Memcpy 2" in cuda_line and "transcribed" not in cuda_line, cuda_line
