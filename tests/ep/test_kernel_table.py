"""KernelTable: ORT's matching rule, type checks, snapshots and their provenance, table choice."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import onnxruntime as ort
import pytest

from onnxscript_ep_passes.ep import snapshots
from onnxscript_ep_passes.ep.kernel_table import KernelRange, KernelTable, TableKind
from onnxscript_ep_passes.ep.live_tables import LiveTableUnavailableError, live_table
from onnxscript_ep_passes.ep.profiles import canonical_ep_name
from onnxscript_ep_passes.ep.snapshots import (
    available_snapshots,
    load_snapshot,
    parse_snapshot,
    write_snapshot,
)
from onnxscript_ep_passes.ep.table_choice import get_table, release_assumed
from onnxscript_ep_passes.ep.target import read_kernel_table, resolve_target

CUDA_RELEASES = [f"1.{minor}" for minor in range(19, 32)]
"""The release lines of onnxruntime-gpu shipped as tables listed from their wheels."""

DML_RELEASES = ["1.16", "1.17", "1.18", "1.19", "1.20", "1.21", "1.22", "1.23", "1.24"]
"""The onnxruntime-directml release lines read from their Windows libraries."""

SHIPPED = {
    "cuda-ort-1.16": ("CUDAExecutionProvider", "1.16"),
    **{f"cuda-ort-{line}": ("CUDAExecutionProvider", line) for line in CUDA_RELEASES},
    "cuda-ort-main-2026-09": ("CUDAExecutionProvider", "main-2026-09"),
    **{f"dml-ort-{line}": ("DmlExecutionProvider", line) for line in DML_RELEASES},
    "webgpu-ort-1.32": ("WebGpuExecutionProvider", "1.32.0"),
    "openvino-ort-1.24": ("OpenVINOExecutionProvider", "1.24"),
}
NOT_RELEASES = {"cuda-ort-1.16", "cuda-ort-main-2026-09"}
TRANSCRIBED_FROM_DOCS = {"openvino-ort-1.24"}  # tests/ep/profiles/test_openvino.py


def _table(*rows: tuple[str, str, int, int | None, dict[str, list[str]] | None]) -> KernelTable:
    return KernelTable.from_rows("TestEP", "0.0", "test", rows)


# -- the matching rule ---------------------------------------------------------------


def test_open_range_matches_only_its_start() -> None:
    t = _table(("", "Reshape", 23, None, None))
    assert t.match("", "Reshape", 23) is not None
    assert t.match("", "Reshape", 24) is None
    assert t.match("", "Reshape", 22) is None


def test_closed_range_matches_inside_and_exact_start() -> None:
    t = _table(("", "Transpose", 13, 20, None), ("", "Transpose", 21, 22, None))
    for v in (13, 17, 20):
        assert t.match("", "Transpose", v) == KernelRange(13, 20)
    assert t.match("", "Transpose", 22) == KernelRange(21, 22)
    assert t.match("", "Transpose", 23) is None
    assert t.match("", "Transpose", 12) is None


def test_int_max_end_is_an_open_range() -> None:
    t = _table(("", "Relu", 14, 2**31 - 1, None))
    (r,) = t.registered("", "Relu")
    assert r.end is None and r.describe() == "14+"
    assert t.supports("", "Relu", 14) and not t.supports("", "Relu", 15)


def test_domains_are_normalised() -> None:
    t = _table(("ai.onnx", "Cos", 7, None, None), ("com.microsoft", "Gelu", 1, None, None))
    assert t.supports("", "Cos", 7) and t.supports("ai.onnx", "Cos", 7)
    assert t.ops() == [("", "Cos"), ("com.microsoft", "Gelu")]
    assert t.supports("com.microsoft", "Gelu", 1) and not t.supports("", "Gelu", 1)


def test_types_checked_only_when_known() -> None:
    t = _table(
        ("", "Concat", 13, None, {"T": ["tensor(float)", "float16"]}),
        ("", "Cos", 7, None, None),
    )
    assert t.supports("", "Concat", 13)  # types unknown: not checked
    assert t.supports("", "Concat", 13, {"T": "float"})  # short spelling
    assert t.supports("", "Concat", 13, {"T": "tensor(float16)"})
    assert not t.supports("", "Concat", 13, {"T": "tensor(int64)"})
    assert t.supports("", "Concat", 13, {"other": "tensor(int64)"})  # unknown key ignored
    assert t.supports("", "Cos", 7, {"T": "tensor(float8e8m0)"})  # table without types


def test_type_constraint_by_formal_parameter_name() -> None:
    t = _table(("", "Reshape", 23, 24, {"T": ["tensor(float)"], "shape": ["tensor(int64)"]}))
    assert t.supports("", "Reshape", 24, {"T": "tensor(float)", "shape": "tensor(int64)"})
    assert not t.supports("", "Reshape", 24, {"shape": "tensor(int32)"})


def test_any_matching_kernel_with_the_types_wins() -> None:
    # ORT registers Range twice at 11+ (float, int32): either one may match.
    t = _table(
        ("", "Range", 11, None, {"T": ["tensor(float)"]}),
        ("", "Range", 11, None, {"T": ["tensor(int32)"]}),
    )
    assert t.supports("", "Range", 11, {"T": "tensor(int32)"})
    assert t.supports("", "Range", 11, {"T": "tensor(float)"})
    assert not t.supports("", "Range", 11, {"T": "tensor(int64)"})


def test_explain_names_the_registered_ranges_and_types() -> None:
    t = _table(
        ("", "Reshape", 21, 22, None),
        ("", "Reshape", 23, None, None),
        ("", "Cast", 24, 24, {"T2": ["tensor(float)"]}),
    )
    kernel, reason = t.explain("", "Reshape", 24)
    assert kernel is None
    assert reason == "no kernel for Reshape at since_version 24 (registered: [21, 22], 23+)"
    kernel, reason = t.explain("", "Cast", 24, {"T2": "float8e8m0"})
    assert kernel is None and "type tensor(float8e8m0) not supported for T2" in reason
    assert "op not registered" in t.explain("", "Swish", 24)[1]
    assert t.explain("", "Reshape", 22)[0] == KernelRange(21, 22)


def test_explain_names_a_range_once_when_it_is_registered_per_type() -> None:
    # ORT registers Cast once per type: the reason lists each range once.
    t = _table(
        *[("", "Cast", 19, 20, {"T1": [ty]}) for ty in ("tensor(float)", "tensor(int64)")],
        *[("", "Cast", 23, None, {"T1": [ty]}) for ty in ("tensor(float)", "tensor(int64)")],
    )
    reason = t.explain("", "Cast", 24)[1]
    assert reason == "no kernel for Cast at since_version 24 (registered: [19, 20], 23+)"


def test_aliases() -> None:
    assert canonical_ep_name("webgpu") == "WebGpuExecutionProvider"
    assert canonical_ep_name("CUDA") == "CUDAExecutionProvider"
    assert canonical_ep_name("directml") == canonical_ep_name("dml") == "DmlExecutionProvider"
    assert canonical_ep_name("CPUExecutionProvider") == "CPUExecutionProvider"
    with pytest.raises(ValueError, match="Unknown execution provider"):
        canonical_ep_name("tpu")


# -- snapshots -----------------------------------------------------------------------


def test_shipped_snapshots_and_provenance() -> None:
    infos = {i.name: i for i in available_snapshots()}
    assert set(infos) == set(SHIPPED)
    for name, (ep, version) in SHIPPED.items():
        table = load_snapshot(name)
        assert (table.ep, table.ort_version) == (ep, version)
        marked = f"snapshot:{name}.tsv {snapshots.NOT_A_RELEASE}"
        if name in TRANSCRIBED_FROM_DOCS:
            marked = f"snapshot:{name}.tsv {snapshots.TRANSCRIBED}"
        with_mark = NOT_RELEASES | TRANSCRIBED_FROM_DOCS
        assert table.source == (marked if name in with_mark else f"snapshot:{name}.tsv")
        meta = json.loads(snapshots._data_dir().joinpath(f"{name}.json").read_text())
        assert meta["kernels"] == len(table), name
        assert infos[name].source  # where the rows came from
        typed = name not in with_mark and ep != "DmlExecutionProvider"
        assert table.has_type_constraints == typed, name
    assert load_snapshot("cuda-ort-1.24.tsv") is load_snapshot("cuda-ort-1.24")
    assert load_snapshot("webgpu-ort-1.32").ep_version == "0.4.0"
    with pytest.raises(ValueError, match="shipped"):
        load_snapshot("cuda-ort-9.99")


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_snapshot_names_its_release_or_says_it_has_none(name: str) -> None:
    """A table from a release names its tag and the commit ORT's build info gives; one that
    cannot be tied to a release says so in its notes and in every verdict (its source)."""
    meta = json.loads(snapshots._data_dir().joinpath(f"{name}.json").read_text())
    if meta["commit"] is None:  # only a build that records none
        assert "names no commit" in meta["notes"], name
    else:
        assert re.fullmatch(r"[0-9a-f]{7,40}", meta["commit"]), name
    if name in NOT_RELEASES:
        assert meta["release"] is None and meta["notes"].startswith("Not from a release")
        assert load_snapshot(name).source.endswith(snapshots.NOT_A_RELEASE)
        return
    tag = meta["release"]
    assert re.fullmatch(r"v\d+\.\d+\.\d+", tag), name
    line = ".".join(tag[1:].split(".")[:2])
    assert meta["ort_version"].startswith(line), (name, tag)
    if meta["ep"] == "DmlExecutionProvider":
        # read from the release's Windows library; the few ops DirectML registers by code
        # (not in its static table) are carried from a transcription, and listed
        assert meta["package"] == f"onnxruntime-directml=={tag[1:]}"
        assert re.fullmatch(r"[0-9a-f]{64}", meta["wheel_sha256"])
        carried = {row.split()[0] for row in meta["carried_rows"]}
        by_code = {"If", "DFT", "STFT", "GridSample", "OptionalGetElement", "OptionalHasElement"}
        sequence = ("At", "Construct", "Empty", "Erase", "Insert", "Length")
        assert carried <= by_code | {f"Sequence{what}" for what in sequence}, carried
        assert meta["carried_from"].startswith("transcribed: microsoft/onnxruntime docs/")
    if meta["ep"] == "CUDAExecutionProvider":
        # listed from the release's own wheel; other patch releases of the line compared
        assert meta["package"] == f"onnxruntime-gpu=={tag[1:]}"
        assert re.fullmatch(r"[0-9a-f]{64}", meta["wheel_sha256"])
        assert f"git-commit-id={meta['commit']}" in meta["build_info"]
        for other, verdict in meta["other_releases"].items():
            assert other.startswith(f"{line}.") and other != tag[1:], (name, other)
            assert verdict == "same kernels" or verdict.startswith("differs: "), (name, other)


def test_cuda_124_is_the_release_not_main() -> None:
    """onnxruntime-gpu 1.24 has no Resize-19, GridSample-20 or ReduceMax-20 (ultralytics
    PR 25915, onnx issue 7747: Memcpy around every Resize at opset >= 19 on 1.24.3); the
    main-branch table that used to ship as 1.24 listed Resize 19+ and GridSample [20, 21]."""
    t = load_snapshot("cuda-ort-1.24")
    float32 = {"T": "tensor(float)", "T1": "tensor(float)"}
    for op, have, lacks in (("Resize", 18, 19), ("GridSample", 16, 20), ("ReduceMax", 18, 20)):
        assert t.supports("", op, have, float32), op
        assert not t.supports("", op, lacks, float32), op
    assert json.loads(snapshots._data_dir().joinpath("cuda-ort-1.24.json").read_text())[
        "other_releases"
    ] == {"1.24.1": "same kernels"}


def test_later_cuda_releases_add_the_kernels() -> None:
    """The first release line with each kernel the 1.24 release lacks."""
    first = {}
    for op, since in (("Resize", 19), ("GridSample", 20), ("ReduceMax", 20)):
        first[op] = next(
            line
            for line in CUDA_RELEASES
            if load_snapshot(f"cuda-ort-{line}").supports("", op, since)
        )
    assert first == {"Resize": "1.25", "GridSample": "1.25", "ReduceMax": "1.27"}


def test_snapshot_facts_from_the_audit() -> None:
    """Spot checks of the tables against ORT issue 27729's audit of 1.24."""
    cuda124 = load_snapshot("cuda-ort-1.24")
    assert cuda124.supports("", "Flatten", 13) and not cuda124.supports("", "Flatten", 21)
    assert not cuda124.supports("", "ConstantOfShape", 20)
    assert not cuda124.supports("", "Pad", 19) and not cuda124.supports("", "Size", 19)
    assert not cuda124.supports("", "QuantizeLinear", 23)
    main = load_snapshot("cuda-ort-main-2026-09")
    assert main.supports("", "MaxPool", 12) and not main.supports("", "MaxPool", 22)
    dml = load_snapshot("dml-ort-1.24")
    assert all(r.end is None for rs in dml.ranges.values() for r in rs)
    assert dml.supports("", "Reshape", 21) and not dml.supports("", "Reshape", 23)


def test_dml_releases_differ_where_their_libraries_do() -> None:
    """1.20's static registrations lack the opset-21 kernels 1.21 added; 1.21 to 1.24 read
    the same; every DirectML range is open."""
    d120, d121 = load_snapshot("dml-ort-1.20"), load_snapshot("dml-ort-1.21")
    added = {(op, r.start) for (_, op), rs in d121.ranges.items() for r in rs} - {
        (op, r.start) for (_, op), rs in d120.ranges.items() for r in rs
    }
    assert ("Transpose", 21) in added and ("Flatten", 21) in added and len(added) == 9
    for line in ("1.22", "1.23", "1.24"):
        assert dict(load_snapshot(f"dml-ort-{line}").ranges) == dict(d121.ranges), line
    assert load_snapshot("dml-ort-1.24").has_op("com.microsoft", "GroupQueryAttention")


def test_webgpu_snapshot_facts() -> None:
    t = load_snapshot("webgpu-ort-1.32")
    assert t.registered("", "Transpose")[-1] == KernelRange(
        24, None, t.registered("", "Transpose")[-1].type_constraints
    )
    assert t.supports("", "Transpose", 24) and not t.supports("", "Transpose", 25)
    assert t.supports("", "Flatten", 21) and not t.supports("", "Flatten", 23)
    assert not t.has_op("", "ConstantOfShape")
    assert t.has_op("com.ms.internal.nhwc", "Conv")
    assert not t.supports("", "Concat", 13, {"T": "tensor(int64)"})


def test_snapshot_roundtrip(tmp_path) -> None:
    original = load_snapshot("webgpu-ort-1.32")
    path = write_snapshot(original, tmp_path, "roundtrip", notes="test")
    again = parse_snapshot(path.read_text(), ep=original.ep, ort_version="x", source="file")
    assert dict(again.ranges) == dict(original.ranges)
    meta = json.loads((tmp_path / "roundtrip.json").read_text())
    assert meta["ep"] == "WebGpuExecutionProvider" and meta["kernels"] == len(original)


def test_parse_snapshot_rejects_bad_header() -> None:
    with pytest.raises(ValueError, match="header"):
        parse_snapshot("op\tdomain\tstart\tend\n", ep="cuda", ort_version="1", source="x")


# -- choosing a table ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ep", "version", "expected", "assumed"),
    [
        ("cuda", "1.24", "cuda-ort-1.24", False),
        ("cuda", "1.24.3", "cuda-ort-1.24", False),
        ("cuda", "1.20.2", "cuda-ort-1.20", False),
        ("cuda", "1.26.0", "cuda-ort-1.26", False),
        ("cuda", "1.31.1", "cuda-ort-1.31", False),
        ("cuda", "1.32", "cuda-ort-1.31", True),  # newest not newer
        ("cuda", "2.0", "cuda-ort-1.31", True),
        ("cuda", "1.19", "cuda-ort-1.19", False),
        ("cuda", "1.18", "cuda-ort-1.16", True),
        ("cuda", "1.10", "cuda-ort-1.16", True),  # all newer: the oldest
        ("cuda", "main-2026-09", "cuda-ort-main-2026-09", False),
        ("cuda", "1.27.1", "cuda-ort-1.27", False),  # main after 1.27 is newer than 1.27.x
        ("cuda", "1.28", "cuda-ort-1.28", False),
        ("directml", "1.24.1", "dml-ort-1.24", False),
        ("DmlExecutionProvider", "1.17", "dml-ort-1.17", False),
        ("DmlExecutionProvider", "1.15", "dml-ort-1.16", True),
        ("dml", "1.21.0", "dml-ort-1.21", False),
        ("dml", "1.31", "dml-ort-1.24", True),
    ],
)
def test_get_table_nearest_snapshot(ep: str, version: str, expected: str, assumed: bool) -> None:
    table = get_table(ep, version)
    assert table.source.removesuffix(f" {snapshots.NOT_A_RELEASE}") == f"snapshot:{expected}.tsv"
    assert release_assumed(table, version) is assumed
    assert release_assumed(table, None)  # a shipped table with no release named


def test_get_table_without_live_uses_snapshot_for_installed_version() -> None:
    table = get_table("webgpu", prefer_live=False)
    assert table.source == "snapshot:webgpu-ort-1.32.tsv"


def test_get_table_errors_list_the_tables() -> None:
    with pytest.raises(ValueError, match=r"Shipped snapshots: .*cuda-ort-1\.24"):
        get_table("cpu", prefer_live=False)
    with pytest.raises(ValueError, match="Unknown execution provider"):
        get_table("tpu")
    with pytest.raises(ValueError, match="Unrecognised ORT version"):
        get_table("cuda", "latest")


def test_live_cpu_table() -> None:
    table = live_table("cpu")
    assert table.source == "live:get_all_opkernel_def"
    assert table.ort_version == ort.__version__
    assert table.has_type_constraints and table.supports("", "Relu", 14, {"T": "tensor(float)"})
    assert get_table("cpu") is table
    assert not release_assumed(table, None)


def test_every_loader_says_the_kind_of_its_table(tmp_path: Path) -> None:
    assert live_table("cpu").kind is TableKind.LIVE
    assert {load_snapshot(s.name).kind for s in available_snapshots()} == {TableKind.SNAPSHOT}
    assert {n for n in SHIPPED if not load_snapshot(n).from_release} == NOT_RELEASES
    assert live_table("cpu").from_release  # only a snapshot can name no release
    path = write_snapshot(load_snapshot("webgpu-ort-1.32"), tmp_path, "mine")
    assert read_kernel_table(path, "webgpu").kind is TableKind.FILE
    assert resolve_target("qnn", measure=True).kind is TableKind.NONE
    # A table a caller builds is a caller's table, whatever its source text reads like.
    text = path.read_text(encoding="utf-8")
    for source in ("live:get_all_opkernel_def", "snapshot:cuda-ort-1.24.tsv", "none: measured"):
        assert KernelTable.from_rows("TestEP", "0", source, []).kind is TableKind.FILE
        parsed = parse_snapshot(text, ep="TestEP", ort_version="0", source=source)
        assert parsed.kind is TableKind.FILE
    built = KernelTable.from_rows("TestEP", "0", "listed", [], kind=TableKind.LIVE)
    assert built.kind is TableKind.LIVE


def test_a_kind_reads_the_detail_after_its_prefix() -> None:
    assert TableKind.LIVE.detail("live:get_all_opkernel_def") == "get_all_opkernel_def"
    assert TableKind.SNAPSHOT.detail("snapshot:cuda-ort-1.24.tsv") == "cuda-ort-1.24.tsv"
    assert TableKind.NONE.detail("none: measured") == "measured"
    assert TableKind.FILE.detail("file:/tmp/t.tsv") == "/tmp/t.tsv"
    assert TableKind.FILE.detail("rows of a test") == "rows of a test"  # no prefix: as is
    assert TableKind.LIVE.detail("snapshot:x.tsv") == "snapshot:x.tsv"  # another kind's


def _cuda_listable() -> bool:
    try:
        live_table("cuda")
    except LiveTableUnavailableError:
        return False
    return True


def test_live_cuda_table_or_a_clear_error() -> None:
    """Never skipped: where CUDA can be listed (a GPU machine) the live table is used,
    elsewhere a clear error and the nearest snapshot."""
    if _cuda_listable():
        table = live_table("cuda")
        assert table.source.startswith("live:") and table.ep == "CUDAExecutionProvider"
        assert table.has_op("", "MatMul") and get_table("cuda") is table
        return
    with pytest.raises(LiveTableUnavailableError, match="CUDAExecutionProvider") as error:
        live_table("cuda")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        assert "is not available" in str(error.value)
    # get_table falls back to the nearest shipped snapshot
    assert get_table("cuda").source.startswith("snapshot:cuda-ort-")


@pytest.mark.webgpu
def test_live_webgpu_table_matches_shipped_snapshot(webgpu_table: KernelTable) -> None:
    snapshot = load_snapshot("webgpu-ort-1.32")
    if webgpu_table.ep_version != snapshot.ep_version:
        pytest.skip(f"installed plugin {webgpu_table.ep_version} != snapshot {snapshot.ep_version}")
    assert dict(webgpu_table.ranges) == dict(snapshot.ranges)
    assert len(webgpu_table) == 371


def test_dump_tool_writes_a_loadable_snapshot(tmp_path) -> None:
    tool = Path(__file__).resolve().parents[2] / "tools" / "dump_kernel_table.py"
    done = subprocess.run(
        [sys.executable, str(tool), "cpu", "--out", str(tmp_path), "--notes", "test"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    version = ".".join(ort.__version__.split(".")[:2])
    tsv = tmp_path / f"cpu-ort-{version}.tsv"
    meta = json.loads(tsv.with_suffix(".json").read_text())
    assert meta["ep"] == "CPUExecutionProvider" and meta["ort_version"] == ort.__version__
    assert meta["source"] == "live:get_all_opkernel_def" and meta["notes"] == "test"
    table = parse_snapshot(
        tsv.read_text(), ep=meta["ep"], ort_version=meta["ort_version"], source="x"
    )
    assert dict(table.ranges) == dict(live_table("cpu").ranges)


def test_dump_tool_dumps_cuda_or_reports_it_unavailable(tmp_path) -> None:
    """Never skipped: on a GPU machine the tool writes the CUDA table, elsewhere it exits 2."""
    tool = Path(__file__).resolve().parents[2] / "tools" / "dump_kernel_table.py"
    done = subprocess.run(
        [sys.executable, str(tool), "cuda", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if _cuda_listable():
        assert done.returncode == 0, done.stderr
        assert sorted(p.suffix for p in tmp_path.iterdir()) == [".json", ".tsv"]
        return
    assert done.returncode == 2 and "cannot list CUDAExecutionProvider" in done.stderr
    assert not list(tmp_path.iterdir())
