"""resolve_target: one value for the EP, its table, the ORT release and the provenance."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxscript_ep_passes import EpTarget, resolve_target
from onnxscript_ep_passes.ep import CUDA, TableKind, load_snapshot
from onnxscript_ep_passes.ep.target import MEASURED_ONLY, target_of


def test_a_named_release_is_a_snapshot_not_assumed() -> None:
    target = resolve_target("cuda", "1.24")
    assert target.profile is CUDA and target.ep == "CUDAExecutionProvider"
    assert target.kind is TableKind.SNAPSHOT and target.detail == "cuda-ort-1.24.tsv"
    assert target.ort_version == "1.24" and target.from_release
    assert not target.ort_version_assumed and target.ort_version_requested == "1.24"
    assert target.table is load_snapshot("cuda-ort-1.24")


def test_no_release_named_assumes_the_snapshot_s() -> None:
    target = resolve_target("cuda")  # CUDA cannot be listed on this machine
    assert target.kind is TableKind.SNAPSHOT and target.ort_version_assumed


def test_a_snapshot_not_from_a_release_says_so() -> None:
    target = resolve_target("cuda", "main-2026-09")
    assert target.kind is TableKind.SNAPSHOT and not target.from_release


def test_a_file_and_the_measure_only_fallback(tmp_path: Path) -> None:
    path = tmp_path / "t.tsv"
    path.write_text("domain\top\tstart\tend\nai.onnx\tRelu\t14\tinf\n", encoding="utf-8")
    from_file = resolve_target("tensorrt", "1.24", kernel_table=path)
    assert from_file.kind is TableKind.FILE and from_file.detail == str(path)
    assert not from_file.ort_version_assumed
    measured = resolve_target("coreml", measure=True)
    assert measured.kind is TableKind.NONE and measured.table.source == MEASURED_ONLY
    with pytest.raises(ValueError, match="--kernel-table FILE"):
        resolve_target("coreml")


def test_a_target_given_to_a_pass_is_used_as_is() -> None:
    target = resolve_target("cuda", "1.24")
    assert target_of(target) is target
    with pytest.raises(ValueError, match="not both"):
        target_of(target, "1.25")
    given = target_of("cuda", table=target.table)
    assert isinstance(given, EpTarget) and not given.ort_version_assumed
