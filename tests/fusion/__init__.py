"""Tests of :mod:`onnxscript_ep_passes.fusion` (and the optimize pipeline on real EPs)."""

import pytest

WEBGPU_EXPORT_MARKS = [
    pytest.mark.torch,
    pytest.mark.webgpu,
    pytest.mark.usefixtures("webgpu"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]
"""Marks of a test module that exports with torch and runs on the real WebGPU EP."""
