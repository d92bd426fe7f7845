"""``onnxscript_ep_passes.torch_export`` on real ``torch.onnx.export(..., dynamo=True)`` programs.

What a user does: export, lower ``program.model`` in place, ``program.save(...)``. Each test
checks the whole path: the program's own ``onnx_ir.Model`` object is the one lowered, the
saved file (inline or with external data) loads, is at the chosen opset, passes
``onnx.checker`` full_check given as a path, and ORT computes what the original computed.
The CUDA and DirectML choices use the shipped kernel-table snapshots (no device needed);
the WebGPU one the live table of the installed plugin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnxscript_ep_passes import DowngradeError
from onnxscript_ep_passes.lowering.lower_opset import max_ir_version_for_opset
from onnxscript_ep_passes.torch_export import lower_for_ep, lower_program_opset
from tests.harness import run_model
from tests.torch_models import export_program, sample_inputs

pytestmark = [
    pytest.mark.torch,
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]


def _opset(model: onnx.ModelProto) -> int:
    (version,) = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    return version


def _outputs(program: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    outputs, how = run_model(program.model_proto, feeds)
    assert how == "onnxruntime"
    return outputs


def _check_saved(
    path: Path,
    opset: int,
    expected: list[np.ndarray],
    feeds: dict[str, np.ndarray],
    *,
    external_data: bool,
) -> None:
    """The saved file loads, is at ``opset``, passes the checker, and runs to ``expected``."""
    header = onnx.load(str(path), load_external_data=False)
    external = [
        t.name for t in header.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
    ]
    if external_data:
        assert external, "program.save(external_data=True) wrote no external tensor"
        assert all(
            (path.parent / e.value).exists()
            for t in header.graph.initializer
            for e in t.external_data
            if e.key == "location"
        )
    else:
        assert not external
    assert _opset(header) == opset
    assert header.ir_version <= max_ir_version_for_opset(opset)
    onnx.checker.check_model(str(path), full_check=True)
    loaded = onnx.load(str(path))  # with its weights
    assert _opset(loaded) == opset
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    actual = session.run(None, feeds)
    assert len(actual) == len(expected)
    for e, a in zip(expected, actual):
        assert a.shape == e.shape and a.dtype == e.dtype
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("external_data", [False, True], ids=["inline", "external"])
@pytest.mark.parametrize(
    ("kind", "opset", "ep", "ort_version", "chosen"),
    [
        # MaxPool-22 and Conv-22 have no CUDA 1.24 kernel; Transpose-25 neither.
        pytest.param("cnn", 25, "cuda", "1.24", 21, id="cnn25-cuda1.24"),
        # Reshape/Transpose-24 fall back on CUDA 1.25; 23 runs wholly on it (1.24 has no
        # Attention kernel at all: tests/passes/test_legalize.py).
        pytest.param("llama", 24, "cuda", "1.25", 23, id="llama24-cuda1.25"),
        # DirectML 1.24 stops at 21/22 for the shape and cast ops.
        pytest.param("qwen", 25, "dml", "1.24", 22, id="qwen25-dml1.24"),
    ],
)
def test_lower_for_ep_then_save(
    tmp_path: Path,
    kind: str,
    opset: int,
    ep: str,
    ort_version: str,
    chosen: int,
    external_data: bool,
) -> None:
    program = export_program(kind, opset)
    model = program.model
    feeds = sample_inputs(kind)
    expected = _outputs(program, feeds)

    choice = lower_for_ep(program, ep=ep, ort_version=ort_version)

    assert choice is not None
    assert program.model is model, "lower_for_ep must lower the program's model in place"
    assert (choice.source_opset, choice.chosen_opset) == (opset, chosen)
    assert choice.table_source.startswith("snapshot:")
    assert len(choice.after.fallback_nodes) < len(choice.before.fallback_nodes)
    assert _opset(program.model_proto) == chosen

    path = tmp_path / "model.onnx"
    program.save(path, external_data=external_data)
    _check_saved(path, chosen, expected, feeds, external_data=external_data)
    # save() must leave the program whole: it still runs, saves again, at the same opset.
    assert program.model is model
    np.testing.assert_allclose(_outputs(program, feeds)[0], expected[0], rtol=1e-5, atol=1e-6)
    again = tmp_path / "again" / "model.onnx"
    again.parent.mkdir()
    program.save(again, external_data=external_data)
    _check_saved(again, chosen, expected, feeds, external_data=external_data)


@pytest.mark.webgpu
@pytest.mark.usefixtures("webgpu")
def test_lower_for_ep_webgpu_live_table(tmp_path: Path) -> None:
    program = export_program("cnn", 25)
    feeds = sample_inputs("cnn")
    expected = _outputs(program, feeds)
    choice = lower_for_ep(program, ep="webgpu")
    assert choice is not None
    assert choice.table_source == "live:get_registered_ep_kernel_defs"
    # Transpose-25 and MaxPool-22 have no WebGPU kernel; at 21 nothing falls back.
    assert choice.chosen_opset == 21
    assert not choice.after.fallback_nodes
    path = tmp_path / "cnn.onnx"
    program.save(path, external_data=True)
    _check_saved(path, 21, expected, feeds, external_data=True)


def test_lower_for_ep_cpu_is_a_no_op() -> None:
    program = export_program("cnn", 24)
    before = program.model_proto.SerializeToString()
    assert lower_for_ep(program, ep="cpu") is None
    assert program.model_proto.SerializeToString() == before


def test_lower_for_ep_explicit_target(tmp_path: Path) -> None:
    program = export_program("gemma", 24)
    feeds = sample_inputs("gemma")
    expected = _outputs(program, feeds)
    choice = lower_for_ep(program, ep="cuda", ort_version="1.24", target_opset=20)
    assert choice is not None and choice.chosen_opset == 20
    path = tmp_path / "gemma.onnx"
    program.save(path, external_data=True)
    _check_saved(path, 20, expected, feeds, external_data=True)


@pytest.mark.parametrize("external_data", [False, True], ids=["inline", "external"])
def test_lower_program_opset(tmp_path: Path, external_data: bool) -> None:
    program = export_program("llama", 25)
    model = program.model
    feeds = sample_inputs("llama")
    expected = _outputs(program, feeds)

    assert lower_program_opset(program, 23) is True
    assert program.model is model
    assert _opset(program.model_proto) == 23
    assert lower_program_opset(program, 23) is False  # already there

    path = tmp_path / "llama.onnx"
    program.save(path, external_data=external_data)
    _check_saved(path, 23, expected, feeds, external_data=external_data)


def test_lowering_replaces_the_programs_cached_session() -> None:
    """``program(...)`` after lowering runs the lowered model, not a session cached before."""
    torch = pytest.importorskip("torch")
    program = export_program("cnn", 25)
    x = torch.from_numpy(sample_inputs("cnn")["x"])
    (before,) = program(x)  # ONNXProgram caches an ORT session of the opset-25 model
    assert lower_program_opset(program, 21)
    assert program._inference_session is None, "the stale session was kept"
    (after,) = program(x)
    session_model = getattr(program._inference_session, "_model_bytes", None)
    if session_model is not None:
        assert _opset(onnx.load_from_string(session_model)) == 21
    np.testing.assert_allclose(after.numpy(), before.numpy(), rtol=1e-5, atol=1e-6)

    program = export_program("cnn", 25)
    program(x)
    choice = lower_for_ep(program, ep="cuda", ort_version="1.24")
    assert choice is not None and choice.chosen_opset == 21
    assert program._inference_session is None


def test_refusal_leaves_the_program_unchanged() -> None:
    torch = pytest.importorskip("torch")

    class Float8RoundTrip(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return x.to(torch.float8_e4m3fn).to(torch.float32) * 2

    program = torch.onnx.export(
        Float8RoundTrip().eval(), (torch.randn(2, 3),), dynamo=True, opset_version=21
    )
    before = program.model_proto.SerializeToString()
    with pytest.raises(DowngradeError, match="FLOAT8E4M3FN"):
        lower_program_opset(program, 18)  # float8 Cast needs opset 19
    assert program.model_proto.SerializeToString() == before
    with pytest.raises(DowngradeError):
        lower_for_ep(program, ep="cuda", ort_version="1.24", target_opset=18)
    assert program.model_proto.SerializeToString() == before
    with pytest.raises(ValueError, match="below"):
        lower_program_opset(program, 17)
    assert lower_program_opset(program, 19) is True


@pytest.mark.parametrize("bad", ["model_proto", "ir_model", "none"])
def test_rejects_what_is_not_an_onnx_program(bad: str) -> None:
    import onnx_ir as ir

    proto = onnx.helper.make_model(
        onnx.helper.make_graph([], "empty", [], []),
        opset_imports=[onnx.helper.make_opsetid("", 24)],
    )
    value: Any = {
        "model_proto": proto,
        "ir_model": ir.serde.deserialize_model(proto),
        "none": None,
    }[bad]
    with pytest.raises(TypeError, match="ONNXProgram"):
        lower_for_ep(value, ep="cuda", ort_version="1.24")
    with pytest.raises(TypeError, match="ONNXProgram"):
        lower_program_opset(value, 23)


@pytest.mark.parametrize("legalize", [True, False])
def test_lower_for_ep_legalize_argument(legalize: bool) -> None:
    import onnx_ir as ir
    import torch
    from examples.make_example_model import build

    # Swish has no kernel on any EP: at opset 24 only legalization (expanding it) helps;
    # without it the choice is the lower opset whose adapter rewrites it.
    program = torch.onnx.ONNXProgram(ir.from_proto(build()), None)
    choice = lower_for_ep(program, ep="cuda", ort_version="main-2026-09", legalize=legalize)
    assert choice is not None and choice.legalized is legalize
    assert choice.chosen_opset == (24 if legalize else 23)
    assert _opset(program.model_proto) == choice.chosen_opset
    assert "Swish" not in {n.op_type for n in program.model_proto.graph.node}
    assert ("(1 node expanded)" in choice.summary()) is legalize
