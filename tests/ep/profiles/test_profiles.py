"""EP profiles: an EP is a value, registered once, and nothing else spells its name."""

from __future__ import annotations

import ast
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

import onnxscript_ep_passes
from onnxscript_ep_passes.ep import make_session_options, measure_placement
from onnxscript_ep_passes.ep.cost import placement_cost, rates
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.live_tables import live_table
from onnxscript_ep_passes.ep.placement import predict_placement
from onnxscript_ep_passes.ep.profiles import (
    CPU,
    CUDA,
    DML,
    WEBGPU,
    CostRates,
    EpProfile,
    base,
    canonical_ep_name,
    profile_for,
    registered_profiles,
    resolve_ep,
    traits_for,
)
from onnxscript_ep_passes.ep.profiles.base import generic_profile, register
from onnxscript_ep_passes.ep.traits import EpTraits
from onnxscript_ep_passes.lowering.ort_kernels import host_provider
from onnxscript_ep_passes.reports.verdict import ep_display_name

_SRC = Path(onnxscript_ep_passes.__file__).resolve().parent


def test_every_profile_is_found_by_its_names_and_aliases() -> None:
    profiles = registered_profiles()
    assert {CPU, CUDA, DML, WEBGPU} <= set(profiles)
    assert len({p.ort_name for p in profiles}) == len(profiles)
    for profile in profiles:
        for name in (profile.ort_name, profile.ort_name.upper(), *profile.aliases):
            assert resolve_ep(name) is profile, name
            assert resolve_ep(f"  {name} ") is profile
        assert resolve_ep(profile) is profile
        assert profile.traits.ep == profile.ort_name
        assert ep_display_name(profile.ort_name) == profile.display_name


def test_display_names_are_as_people_say_them() -> None:
    shown = {p.ort_name: p.display_name for p in registered_profiles()}
    assert shown["DmlExecutionProvider"] == "DirectML"
    assert shown["TensorrtExecutionProvider"] == "TensorRT"
    assert shown["OpenVINOExecutionProvider"] == "OpenVINO"


def test_an_unknown_provider_name_gets_a_generic_profile() -> None:
    profile = resolve_ep("FooBarExecutionProvider")
    assert profile.generic and profile.ort_name == "FooBarExecutionProvider"
    assert profile.display_name == "FooBar"
    assert not profile.traits.cpu_inputs and not profile.traits.cpu_outputs
    assert "generic" in profile.traits.evidence
    assert resolve_ep("FooBarExecutionProvider") is profile  # made once
    # A table's EP that is no ORT name at all (tests use "TestEP") is looked up leniently.
    assert profile_for("TestEP").generic and traits_for("TestEP").ep == "TestEP"


def test_a_name_that_is_no_ep_is_refused_with_the_accepted_ones() -> None:
    with pytest.raises(ValueError, match=r"Unknown execution provider 'tpu'.*webgpu") as e:
        resolve_ep("tpu")
    assert "CUDAExecutionProvider" in str(e.value)
    with pytest.raises(ValueError, match="Unknown execution provider"):
        canonical_ep_name("cuda; rm -rf /")


def test_a_name_or_alias_is_registered_once() -> None:
    clash = EpProfile(
        ort_name="OtherExecutionProvider",
        display_name="Other",
        aliases=("cuda",),
        traits=EpTraits(ep="OtherExecutionProvider", cpu_inputs={}, cpu_outputs={}),
    )
    with pytest.raises(ValueError, match=r"already registered: \['cuda'\]"):
        register(clash)
    assert resolve_ep("cuda") is CUDA


def test_the_cost_objective_prices_each_ep_at_its_profiles_rates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    import onnx_ir as ir

    model = ir.from_proto(proto)
    slow = EpProfile(
        ort_name="SlowTestExecutionProvider",
        display_name="Slow",
        aliases=(),
        traits=EpTraits(ep="SlowTestExecutionProvider", cpu_inputs={}, cpu_outputs={}),
        cost=CostRates(1.0, 1.0, 1.0, 1.0, basis="test"),
    )
    monkeypatch.setattr(base, "_BY_NAME", dict(base._BY_NAME))
    monkeypatch.setattr(base, "_BY_ALIAS", dict(base._BY_ALIAS))
    register(slow)  # in this test's copy of the registry only
    costs = {}
    for name in ("CUDAExecutionProvider", slow.ort_name):
        table = KernelTable.from_rows(name, "0", "test", [("", "Relu", 14, None, None)])
        costs[name] = placement_cost(predict_placement(model, table), model)
    assert costs[slow.ort_name].ep_us > 1000 * costs["CUDAExecutionProvider"].ep_us
    assert rates(slow.ort_name)["ep_flops_per_us"] == 1.0
    assert rates("cuda") == rates()  # every shipped profile uses the default rates


def test_the_cpu_profile_cannot_host_a_placement_measurement() -> None:
    with pytest.raises(ValueError, match="needs a non-CPU EP"):
        make_session_options(CPU)
    assert CPU.is_host and not CUDA.is_host


def test_an_ep_that_is_not_here_says_so() -> None:
    pytest.importorskip("onnxruntime")
    import onnxruntime as ort

    if CUDA.ort_name in ort.get_available_providers():
        pytest.skip("CUDA is available here")
    with pytest.raises(RuntimeError, match="CUDAExecutionProvider is not available"):
        make_session_options("cuda")


@pytest.mark.webgpu
def test_the_webgpu_profile_selects_and_lists_the_plugin(webgpu: None) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    onnx.checker.check_model(proto, full_check=True)
    measured = measure_placement(proto, WEBGPU)
    assert measured.provider_of("r") == WEBGPU.ort_name
    table = live_table(WEBGPU)
    assert table is live_table("webgpu")  # one cached listing per EP
    assert table.ep == WEBGPU.ort_name and table.source == "live:get_registered_ep_kernel_defs"
    assert table.match("", "Relu", 14) is not None


def _string_constants(path: Path) -> list[tuple[int, str]]:
    """String literals of a module, less its docstrings and its ``__all__``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            skip.add(id(body[0].value))
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            skip.update(id(c) for c in ast.walk(node.value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
    ]


_ALLOWED: set[tuple[str, str]] = set()


def test_no_module_outside_the_profiles_spells_an_ep_name() -> None:
    profiles = registered_profiles()
    # "cpu" is also where a node lands ("ep" or "cpu"), not only an alias.
    spelled = {p.ort_name.lower() for p in profiles} | {
        a for p in profiles for a in p.aliases if a != "cpu"
    }
    found = []
    for path in sorted(_SRC.rglob("*.py")):
        relative = path.relative_to(_SRC).as_posix()
        if relative.startswith("ep/profiles/"):
            continue
        for line, text in _string_constants(path):
            if text.strip().lower() in spelled and (relative, text) not in _ALLOWED:
                found.append(f"{relative}:{line}: {text!r}")
    assert not found, "EP names spelled outside ep/profiles:\n" + "\n".join(found)


def test_the_scan_sees_a_spelled_name(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""Doc naming cuda."""\nEP = "WebGpuExecutionProvider"\n', encoding="utf-8")
    assert _string_constants(module) == [(2, "WebGpuExecutionProvider")]


def test_a_generic_profile_is_cached_per_name() -> None:
    assert generic_profile("AExecutionProvider") is generic_profile("AExecutionProvider")


def test_the_lowering_finds_the_host_ep_ort_falls_back_to() -> None:
    # The lowering never imports ep/ (the layering rule): it finds the CPU EP in ORT's own
    # priority list rather than naming it; the host profile is that EP.
    hosts = [p for p in registered_profiles() if p.is_host]
    assert [p.ort_name for p in hosts] == [host_provider()]
