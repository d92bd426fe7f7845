"""Fixtures for the EP tests: the real WebGPU plugin EP, or a skip that says why.

Set ``ONNXSCRIPT_EP_PASSES_REQUIRE_WEBGPU=1`` (CI does) to turn a missing WebGPU EP into a
test failure instead of a skip.
"""

from __future__ import annotations

import os

import pytest

from onnxscript_ep_passes.ep import KernelTable, get_table, webgpu_available

REQUIRE_WEBGPU_ENV = "ONNXSCRIPT_EP_PASSES_REQUIRE_WEBGPU"


@pytest.fixture(scope="session")
def webgpu() -> None:
    """The WebGPU plugin EP works here (plugin, Vulkan adapter, a probe session)."""
    ok, reason = webgpu_available()
    if ok:
        return
    if os.environ.get(REQUIRE_WEBGPU_ENV) == "1":
        pytest.fail(f"WebGPU EP required ({REQUIRE_WEBGPU_ENV}=1) but unavailable: {reason}")
    pytest.skip(f"WebGPU EP unavailable: {reason}")


@pytest.fixture(scope="session")
def webgpu_table(webgpu: None) -> KernelTable:
    """The live kernel table of the installed WebGPU plugin."""
    table = get_table("webgpu")
    assert table.source == "live:get_registered_ep_kernel_defs", table
    return table
