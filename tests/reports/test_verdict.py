"""The verdict line, ``EpLoweringChoice.summary()`` and its short repr (snapshot tables)."""

from __future__ import annotations

import dataclasses

import onnx
import onnx_ir as ir

from onnxscript_ep_passes.ep import TableKind, get_table
from onnxscript_ep_passes.passes import LowerOpsetForEpPass, choose_target_opset
from onnxscript_ep_passes.reports.verdict import (
    Figures,
    ep_display_name,
    quantity,
    table_label,
    verdict,
)
from tests.harness import reshape_chain, tensor_info


def _reshapes(opset: int, count: int = 40) -> ir.Model:
    """Relu then ``count`` Reshapes-``opset`` ([2, 6] -> [3, 4] -> [3, 4] ...), each output a
    graph output, so ORT fuses no two of them (it makes one Reshape of a chain of reshapes
    whose inner values nothing else reads, as reshape_chain's)."""
    proto = reshape_chain(opset, count)
    declared = {o.name for o in proto.graph.output}
    for i in range(1, count):
        if f"r{i}" not in declared:
            proto.graph.output.append(tensor_info(f"r{i}", onnx.TensorProto.FLOAT, [3, 4]))
    return ir.from_proto(proto)


def test_verdict_words() -> None:
    assert ep_display_name("WebGpuExecutionProvider") == "WebGPU"
    assert ep_display_name("DmlExecutionProvider") == "DirectML"
    assert ep_display_name("QNNExecutionProvider") == "QNN"
    live = "live:get_registered_ep_kernel_defs"
    assert table_label("1.32", TableKind.LIVE, live) == "ORT 1.32, live table"
    line = verdict(
        ep="WebGpuExecutionProvider",
        ort_version="1.32",
        table_kind=TableKind.LIVE,
        table_source="live:get_registered_ep_kernel_defs",
        source_opset=25,
        chosen_opset=24,
        before=Figures(376, 5_820_000, 18.1e6, 450, 43),
        after=Figures(4, 1024, 0, 0, 59),
    )
    # What the user pays first (copies, bytes, CPU compute), then the nodes by kind.
    assert line == (
        "opset 25 -> 24 on WebGPU (ORT 1.32, live table): Memcpy 376 -> 4 (5.8 MB -> 1.0 kB "
        "per run), CPU compute 18.1 MFLOP -> 0; fall back 450 -> 0, shape math on CPU 43 -> 59"
    )
    kept = verdict(
        ep="CUDAExecutionProvider",
        ort_version="main-2026-09",
        table_kind=TableKind.SNAPSHOT,
        table_source="snapshot:cuda-ort-main-2026-09.tsv",
        source_opset=24,
        chosen_opset=24,
        before=Figures(2, 64, 1000, 1),
        after=Figures(0),
        expanded=1,
        assumed=True,
        model="m.onnx",
    )
    assert kept == (
        "m.onnx: opset 24 kept (1 node expanded) on CUDA (ORT main-2026-09 assumed, "
        "snapshot cuda-ort-main-2026-09): Memcpy 2 -> 0 (64 B -> 0 per run), "
        "CPU compute 1.0 kFLOP -> 0; fall back 1 -> 0"
    )
    assert [quantity(v, "B") for v in (0, 999, 1000, 1_500_000, 2e12)] == [
        "0",
        "999 B",
        "1.0 kB",
        "1.5 MB",
        "2.0 TB",
    ]


def test_choice_summary_and_short_repr() -> None:
    model = _reshapes(24)
    choice = choose_target_opset(model, get_table("cuda", "1.24"))
    assert choice.summary() == (
        "opset 24 -> 23 on CUDA (ORT 1.24, snapshot cuda-ort-1.24): "
        "Memcpy 1 -> 0 (48 B -> 0 per run), CPU compute 480 FLOP -> 0; fall back 40 -> 0"
    )
    assert choice.summary("big.onnx").startswith("big.onnx: opset 24 -> 23 on CUDA")
    text = repr(choice)
    assert text.startswith("<EpLoweringChoice opset 24 -> 23 on CUDA") and "40 decisions" in text
    # The dataclass repr would list every node's prediction: this one stays one short line.
    assert len(text) < 300 < len(str(dataclasses.asdict(choice)))


def test_pass_marks_an_assumed_ort_release() -> None:
    named = LowerOpsetForEpPass("cuda", "1.24")(_reshapes(24, 2)).choice
    assert named is not None and not named.ort_version_assumed
    # CUDA cannot be listed here: a shipped snapshot stands in for the installed ORT.
    assumed = LowerOpsetForEpPass("cuda")(_reshapes(24, 2)).choice
    assert assumed is not None and assumed.ort_version_assumed
    assert " assumed, snapshot cuda-ort-" in assumed.summary()
