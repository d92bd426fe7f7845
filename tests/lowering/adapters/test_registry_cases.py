"""Every hand-written adapter, proven by the cases its step module declares.

Each ``tests/lowering/adapters/cases_opsetNN.py`` module holds ``CASES``: a list of
:class:`tests.harness.AdapterCase`. This module runs them all (parametrized over the
registry) and checks that every hand-written adapter has at least one case.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import tests.lowering.adapters as case_package
from onnxscript_ep_passes import DEFAULT_REGISTRY
from tests.harness import AdapterCase


def _all_cases() -> list[AdapterCase]:
    cases: list[AdapterCase] = []
    for info in pkgutil.iter_modules(case_package.__path__):
        if info.name.startswith("cases_opset"):
            module = importlib.import_module(f"{case_package.__name__}.{info.name}")
            cases.extend(module.CASES)
    return cases


CASES = _all_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_adapter_case(case: AdapterCase) -> None:
    case.run()


def test_every_handwritten_adapter_has_a_case() -> None:
    covered = {(c.op_type, c.version) for c in CASES}
    missing = [
        f"{e.op_type}-{e.version}"
        for e in DEFAULT_REGISTRY.handwritten()
        if (e.op_type, e.version) not in covered
    ]
    assert not missing, f"hand-written adapters without a test case: {missing}"


def test_types_only_tests_name_the_schema_change() -> None:
    """A ``types_only`` test (the proto fast path's shortcut past an adapter) lives next to
    its adapter, in the same step module, and its docstring names the step it reads."""
    entries = [e for e in DEFAULT_REGISTRY.handwritten() if e.types_only is not None]
    assert entries  # Cast-24 and CastLike-24 at least
    for entry in entries:
        assert entry.types_only is not None
        assert entry.types_only.__module__ == entry.adapter.__module__, entry
        assert f"{entry.op_type}-{entry.version}" in (entry.types_only.__doc__ or ""), entry
