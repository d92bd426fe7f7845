"""Test-suite policy: a test that needs something missing skips with the reason printed,
except in CI (``ONNXSCRIPT_EP_PASSES_REQUIRE_ALL=1``, set by ``.ci/run``), where CI must
have everything, so any skip is turned into a failure."""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from onnxscript_ep_passes.ep import KernelTable, get_table, webgpu_available

REQUIRE_ALL = os.environ.get("ONNXSCRIPT_EP_PASSES_REQUIRE_ALL") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if REQUIRE_ALL and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where nothing may be skipped: {reason}"


@pytest.fixture(scope="session")
def webgpu() -> None:
    """The real WebGPU plugin EP works here (plugin, Vulkan adapter, a probe session)."""
    ok, reason = webgpu_available()
    if not ok:
        pytest.skip(f"WebGPU EP unavailable: {reason}")


@pytest.fixture(scope="session")
def webgpu_table(webgpu: None) -> KernelTable:
    """The live kernel table of the installed WebGPU plugin."""
    table = get_table("webgpu")
    assert table.source == "live:get_registered_ep_kernel_defs", table
    return table
